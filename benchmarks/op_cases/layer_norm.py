"""layer_norm_rows (C++) vs its pure-torch reference and torch's LayerNorm (``F.layer_norm``).

The rows of FSD-lite's SIR and cluster head: ~5k point rows of 8 / 32 / 64 channels (one frame's foreground);
forward, plus forward + backward at 32 channels. Peak memory per variant (32 channels) in a fresh subprocess.
"""
import torch

from op_cases._scaffold import case


def inputs(rows, channels, requires_grad=False, seed=0):
    """Seeded ``(x (rows, channels), weight (channels,), bias (channels,))`` float32."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, channels, generator=g)
    weight, bias = torch.randn(channels, generator=g), torch.randn(channels, generator=g)
    return tuple(t.requires_grad_(requires_grad) for t in (x, weight, bias))


def forward(variant, x, weight, bias):
    """One normalization; returns the rows."""
    if variant == 'fsdlite':
        from fsdlite.ops import layer_norm_rows
        return layer_norm_rows(x, weight, bias, 1e-5)
    if variant == 'reference':
        from fsdlite.ops.layer_norm.reference import layer_norm_rows_reference
        return layer_norm_rows_reference(x, weight, bias, 1e-5)
    return torch.nn.functional.layer_norm(x, (x.shape[1],), weight, bias, 1e-5)


def work(variant, rows, channels, backward=False):
    """Zero-arg callable: forward (and backward) of ``variant`` ('fsdlite', 'reference', 'torch')."""
    x, weight, bias = inputs(rows, channels, requires_grad=backward)

    def run():
        out = forward(variant, x, weight, bias)
        if backward:
            out.sum().backward()
            for t in (x, weight, bias):
                t.grad = None

    return run


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): 5,280 rows of 8, 32 and 64 channels forward, 32 channels
    forward + backward; ``quick``: 500 rows."""
    rows = 500 if quick else 5_280
    variants = ('reference', 'torch', 'fsdlite')
    return [case(f'layer_norm_rows{" fwd+bwd" if backward else ""}', f'N={rows} C={channels}', work, variants, 'torch',
                 measure_memory=channels == 32 and not backward, rows=rows, channels=channels, backward=backward)
            for channels, backward in ((8, False), (32, False), (64, False), (32, True))]
