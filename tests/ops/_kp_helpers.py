"""Helpers shared by the tests of the kernel-point ops (kpconv, kp_aggregate): random problems, the
output-and-gradient comparison against a reference, real S3DIS neighbourhoods and the CUDA-vs-CPU check."""
import numpy as np
import torch


def kp_problem(m, n, h, k, c, dtype, per_query, seed, shadow):
    """A seeded generator and the geometry/features shared by the kernel-point ops.

    Neighbour slots are random indices in [0, N] (N = shadow, drawn with probability ``shadow``), so
    duplicates and shadow padding occur naturally.

    Returns:
        tuple: (torch.Generator for the op-specific tensors, dict with q_pts (M, 3), s_pts (N, 3),
        neighbors (M, H) int64, features (N, C), kernel_points (K, 3) or (M, K, 3)).
    """
    g = torch.Generator().manual_seed(seed)
    nb = torch.randint(0, max(n, 1), (m, h), generator=g)
    nb[torch.rand(m, h, generator=g) < shadow] = n
    if n == 0:
        nb.fill_(0)
    return g, dict(
        q_pts=torch.rand(m, 3, generator=g, dtype=dtype),
        s_pts=torch.rand(n, 3, generator=g, dtype=dtype),
        neighbors=nb,
        features=torch.randn(n, c, generator=g, dtype=dtype),
        kernel_points=0.3 * torch.randn((m, k, 3) if per_query else (k, 3), generator=g, dtype=dtype),
    )


def require_grad(args, keys):
    """Marks the present tensors ``args[key]`` of ``keys`` as requiring gradients; returns ``args``."""
    for key in keys:
        if args[key] is not None:
            args[key].requires_grad_(True)
    return args


def outputs_and_grads(fn, args, keys, **params):
    """Output of ``fn(**args, **params)`` and the gradients of sum(y * probe) w.r.t. the present ``keys``."""
    y = fn(**args, **params)
    probe = torch.linspace(-1, 1, y.numel(), dtype=y.dtype, device=y.device).view_as(y)
    inputs = [args[k] for k in keys if args[k] is not None]
    grads = torch.autograd.grad((y * probe).sum(), inputs, allow_unused=True, materialize_grads=True) \
        if inputs and y.requires_grad else [torch.zeros_like(t) for t in inputs]
    return y, grads


def assert_matches(fn, ref, args, keys, atol=1e-10, rtol=1e-7, **params):
    """``fn`` and ``ref`` agree on the output and on the gradients of the present ``keys``."""
    y, grads = outputs_and_grads(fn, args, keys, **params)
    y_ref, grads_ref = outputs_and_grads(ref, args, keys, **params)
    torch.testing.assert_close(y, y_ref, atol=atol, rtol=rtol)
    for name, g, g_ref in zip([k for k in keys if args[k] is not None], grads, grads_ref):
        torch.testing.assert_close(g, g_ref, atol=atol, rtol=rtol, msg=lambda m: f'grad of {name}: {m}')


def assert_cuda_matches_cpu(fn, args, keys, atol=1e-4, rtol=1e-4, **params):
    """``fn`` on CUDA copies of ``args`` agrees with ``fn`` on the CPU (output and gradients of ``keys``)."""
    y, grads = outputs_and_grads(fn, args, keys, **params)
    cuda_args = {k: (v.detach().cuda().requires_grad_(v.requires_grad) if v is not None else None)
                 for k, v in args.items()}
    y_cuda, grads_cuda = outputs_and_grads(fn, cuda_args, keys, **params)
    torch.testing.assert_close(y_cuda.cpu(), y, atol=atol, rtol=rtol)
    for g, g_cuda in zip(grads, grads_cuda):
        torch.testing.assert_close(g_cuda.cpu(), g, atol=atol, rtol=rtol)


def s3dis_neighborhoods(shared_data, num_points, radius, h, seed):
    """Real geometry for the kernel-point ops: a random subset of the S3DIS Area 5 conferenceRoom_1 subset
    (DERIVED from SysCV/vis4d-test-data@8e92136:s3d_test/Area_5/conferenceRoom_1/Annotations) with
    brute-force radius neighbours (test-only), nearest first, shadow-padded.

    Returns:
        tuple: points (P, 3) float32, RGB features (P, 3) float32 in [0, 1], neighbors (P, h) int64.
    """
    data = np.load(shared_data / 's3dis_area5_conf1' / 'area5_conferenceRoom_1_subset.npz')
    pick = np.random.default_rng(seed).choice(len(data['xyz']), num_points, replace=False)
    pts = torch.from_numpy(data['xyz'][pick].astype(np.float32))
    feats = torch.from_numpy(data['rgb'][pick].astype(np.float32) / 255.0)
    dist = torch.cdist(pts, pts)
    dist[dist > radius] = float('inf')
    d, nb = dist.sort(1)
    nb, d = nb[:, :h].clone(), d[:, :h]
    nb[torch.isinf(d)] = len(pts)
    return pts, feats, nb
