"""Export a model of any family to a deploy folder (``deploy/export_onnx.py`` is the command line).

``DIR/model.onnx`` (one file, opset >= 18, standard ONNX ops only, static shapes), ``DIR/deploy.json``
(bounds, input/output names and meanings, what runs outside the graph, graph summary), ``DIR/config.py`` (the
model config the runtime builds its pre/post-ops from) and ``DIR/report.md``; with capacity tiers
(:mod:`fsdlite.deploy.tiers`) also ``DIR/model_tier<scale>.onnx``, one fixed-shape graph per tier.
"""
import json
import time
from pathlib import Path
from typing import NamedTuple

import torch
from mmengine.config import Config

from ..engine.checkpoint import load_weights
from ..engine.tool_setup import load_config
from ..registry import MODELS
from ..structures.bounds import scale_bounds
from .adapter import adapter_class
from .bounds_io import load_bounds_file
from .decisions import explain_graph
from .folding import fold_batch_norms
from .graph_checks import DeployGraphError, check_graph
from .onnx_io import DEFAULT_OPSET, OrtGraph, export_graph
from .tiers import check_tier_scales

FORMAT = 'fsdlite-deploy/1'


class ExportResult(NamedTuple):
    """What :func:`export_model` produced: ``out_dir``, ``info`` (the deploy.json dict), ``summary``
    (:class:`~fsdlite.deploy.graph_checks.GraphSummary`), ``diffs`` (ONNX Runtime vs PyTorch on the example) and
    ``tiers`` (one :class:`TierExport` per capacity tier)."""
    out_dir: Path
    info: dict
    summary: object
    diffs: list
    tiers: list = []


class TierExport(NamedTuple):
    """One exported capacity tier: ``entry`` (its deploy.json entry: scale, onnx, bounds, nodes, bytes,
    example_fits), ``summary`` (GraphSummary) and ``diffs`` (ONNX Runtime vs PyTorch on the example)."""
    entry: dict
    summary: object
    diffs: list


def as_config(config, cfg_options=None):
    """An mmengine Config from a path (with validated ``--cfg-options``) or a Config / dict."""
    if isinstance(config, (str, Path)):
        return load_config(str(config), cfg_options)
    cfg = config if isinstance(config, Config) else Config(dict(config))
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg


def build_model(model_cfg, checkpoint=None, seed=0):
    """Build a model (eval); ``checkpoint`` None or 'random' keeps seeded random weights."""
    torch.manual_seed(seed)
    model = MODELS.build(dict(model_cfg))
    if checkpoint not in (None, 'random'):
        if not Path(checkpoint).is_file():
            raise FileNotFoundError(f'checkpoint {str(checkpoint)!r} does not exist (use "random" for random weights)')
        load_weights(model, str(checkpoint), model_cfg['type'])  # strict, names what does not match
    return model.eval()


def plain_config(model_cfg):
    """A model config (mmengine ConfigDict or dict) as a plain dict."""
    return model_cfg.to_dict() if hasattr(model_cfg, 'to_dict') else dict(model_cfg)


def adapter_with_bounds(cls, model_cfg, bounds, batch_size, weights=None, host_state=None):
    """A ``cls`` adapter of the model of ``model_cfg`` in its deploy form with ``bounds`` (a folder's host, a
    capacity tier): ``weights`` (state dict, strict) or seeded random ones, ``host_state`` applied."""
    model = build_model(cls.prepare_config(plain_config(model_cfg), bounds))
    if weights is not None:
        model.load_state_dict(weights, strict=True)
    adapter = cls(model, bounds, batch_size)
    adapter.load_host_state(host_state or {})
    return adapter


def resolve_bounds(cls, cfg, model, frames, bounds_file=None, margin=1.5, bounds=None):
    """Deploy bounds and where they come from: ``bounds`` (dict) > ``bounds_file`` > the config's bounds >
    measured on ``frames``."""
    if bounds is not None:
        if not isinstance(bounds, dict) or not bounds:
            raise ValueError(f'bounds must be a non-empty dict of bound name -> int | list[int], got {bounds!r}')
        return dict(bounds), 'given'
    if bounds_file is not None:
        return load_bounds_file(bounds_file), f'file {bounds_file}'
    stated = cls.config_bounds(cfg)
    if stated:
        return stated, 'config'
    if not frames:
        raise ValueError('no bounds: pass a bounds file (tools/collect_bounds.py --out FILE) or give frames to '
                         'measure them on')
    scaled = f' x margin {margin}' if cls.bounds_have_margin else ''
    return cls.measure_bounds(model, frames, margin), (f'measured on {len(frames)} frame(s) '
                                                       f'({", ".join(f.name for f in frames)}){scaled}')


def prepare(config, checkpoint, bounds_file=None, cfg_options=None, batch_size=1, margin=1.5, data_root=None,
            frames=None, bounds=None):
    """Build the deploy adapter of a config: ``(cfg, adapter, frames, bounds_source)``.

    The model is built with its weights, bounds resolved (:func:`resolve_bounds`), and, when the family's
    deploy config differs (detectors get their ``bounds``), rebuilt in that form with the same weights.
    ``frames`` None: the adapter's verification inputs (``cls.frames``); ``bounds`` (dict) skips resolution.
    """
    cfg = as_config(config, cfg_options)
    cls = adapter_class(cfg.model['type'])
    base = plain_config(cfg.model)
    dynamic = {k: v for k, v in base.items() if k != 'bounds'}
    model = build_model(dynamic, checkpoint)
    if frames is None:
        frames = cls.frames(cfg, model, batch_size, data_root)
    bounds, source = resolve_bounds(cls, cfg, model, frames, bounds_file, margin, bounds)
    deploy_cfg = cls.prepare_config(dynamic, bounds)
    if deploy_cfg != dynamic:
        deployed = build_model(deploy_cfg)
        deployed.load_state_dict(model.state_dict(), strict=True)
        model = deployed
    cfg.model = deploy_cfg
    return cfg, cls(model, bounds, batch_size), frames, source


def export_graph_checked(adapter, example, path, opset=DEFAULT_OPSET, verbose=False):
    """Export ``adapter``'s graph module traced on ``example`` (PreOpsResult) to ``path`` with its BatchNorms folded
    (:func:`~fsdlite.deploy.folding.fold_batch_norms`), check it and, when it is deployable, compare ONNX Runtime
    with PyTorch (the unfolded module) on the example: ``(seconds, summary, diffs, outputs)``, the
    last the ONNX Runtime outputs on the example (None when the graph is not deployable)."""
    with adapter.export_context():  # BatchNorms folded into the layers before them, in a copy of the module
        seconds = export_graph(fold_batch_norms(adapter.graph_module()).module, tuple(example.inputs.values()), path,
                               list(example.inputs), list(adapter.output_meanings()), opset, verbose)
    summary = check_graph(path)
    diffs, deployed = [], None
    if summary.ok:
        deployed = OrtGraph(path)(example.inputs)
        reference = adapter.run_torch_graph(example.inputs)
        diffs = explain_diffs(adapter, adapter.compare_outputs(deployed, reference, example), deployed, reference,
                              example)
    return seconds, summary, diffs, deployed


def explain_diffs(adapter, diffs, deployed, reference, example):
    """``diffs`` with the ones beyond tolerance that decisions flipped on near-ties explain marked ``explained``
    (:func:`~fsdlite.deploy.decisions.explain_graph`)."""
    failing = [d.name for d in diffs if not d.ok]
    if not failing:
        return diffs
    explanation, explained = explain_graph(adapter, deployed, reference, example, failing)
    reason = '; '.join(line.strip() for line in explanation.lines(limit=1) if not line.startswith('UNEXPLAINED'))
    return [d._replace(explained=reason) if d.name in explained else d for d in diffs]


def export_tier(cfg, adapter, scale, example, out_dir, opset=DEFAULT_OPSET, verbose=False):
    """Export the capacity tier ``scale`` of ``adapter`` (same weights; its ``tier_bound_names`` bounds times
    ``scale``) traced on ``example`` (raw data) to ``out_dir/model_tier<scale>.onnx``; returns :class:`TierExport`."""
    bounds = scale_bounds(adapter.bounds, scale, adapter.tier_bound_names)
    tier = adapter_with_bounds(type(adapter), cfg.model, bounds, adapter.batch_size, adapter.model.state_dict(),
                               adapter.host_state())
    pre = tier.pre_ops(example)
    path = Path(out_dir) / f'model_tier{scale:g}.onnx'
    _, summary, diffs, outputs = export_graph_checked(tier, pre, path, opset, verbose)
    fits = not any(pre.dropped.values()) and not (outputs is not None and tier.tier_overflow(outputs))
    entry = dict(scale=scale, onnx=path.name, bounds=bounds, nodes=summary.num_nodes, bytes=path.stat().st_size,
                 example_fits=fits)
    return TierExport(entry, summary, diffs)


def export_model(config, checkpoint, out_dir, bounds_file=None, cfg_options=None, batch_size=1, margin=1.5,
                 data_root=None, frames=None, opset=DEFAULT_OPSET, verbose=False, bounds=None, tiers=()):
    """Export ``config`` + ``checkpoint`` to ``out_dir`` (see the module docstring).

    Args:
        config (str | Config | dict): config file or object (``model.type`` selects the adapter).
        checkpoint (str | None): weights file; None / 'random': seeded random weights (smoke tests only).
        out_dir (str | Path): output folder (created).
        bounds_file (str, optional): bounds (JSON or ``bounds = dict(...)``); default: the config's, else
            measured on the frames with ``margin``.
        cfg_options (dict, optional): config overrides (validated keys, as tools/train.py).
        batch_size (int): B, fixed in the graph.
        margin (float): factor on measured bounds.
        data_root (str, optional): folder of the real frames (default ``../shared/data``).
        frames (list[Frame], optional): example/verification inputs (default: the adapter's); the first one is
            traced.
        opset (int): ONNX opset (>= 18).
        verbose (bool): exporter progress messages.
        bounds (dict, optional): the bounds themselves (take precedence over ``bounds_file``).
        tiers (Sequence[float]): capacity tier scales in (0, 1) (:mod:`fsdlite.deploy.tiers`; detectors only).
    Returns:
        ExportResult
    Raises:
        DeployGraphError: the graph is not deployable (after writing the report).
    """
    scales = check_tier_scales(tiers)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg, adapter, frames, source = prepare(config, checkpoint, bounds_file, cfg_options, batch_size, margin,
                                           data_root, frames, bounds)
    if scales and not adapter.tier_bound_names:
        raise ValueError(f'tiers: {cfg.model["type"]} has no pre-op bounds to scale (capacity tiers are for the '
                         f'detectors), got tiers={list(tiers)}')
    if not frames:
        raise ValueError(f'no example input for {cfg.model["type"]}: the config has no dataset and no real frame '
                         'was found (pass frames / --data-root)')
    start = time.perf_counter()
    pre = adapter.pre_ops(frames[0].data)
    pre_seconds = time.perf_counter() - start
    path = out_dir / 'model.onnx'
    seconds, summary, diffs, _ = export_graph_checked(adapter, pre, path, opset, verbose)
    tier_exports = [export_tier(cfg, adapter, s, frames[0].data, out_dir, opset, verbose) for s in scales]
    info = deploy_info(cfg, adapter, checkpoint, source, summary, path, seconds, frames[0], pre, pre_seconds)
    if tier_exports:
        info['tiers'] = [t.entry for t in tier_exports]
    cfg.dump(str(out_dir / 'config.py'))
    (out_dir / 'deploy.json').write_text(json.dumps(info, indent=1))
    (out_dir / 'report.md').write_text(report_text(info, summary, diffs, tier_exports))
    problems = summary.problems + [f'{t.entry["onnx"]}: {p}' for t in tier_exports for p in t.summary.problems]
    if problems:
        raise DeployGraphError('the exported graph is not deployable:\n  - ' + '\n  - '.join(problems))
    return ExportResult(out_dir, info, summary, diffs, tier_exports)


def deploy_info(cfg, adapter, checkpoint, source, summary, path, seconds, frame, pre, pre_seconds):
    """The deploy.json dictionary."""
    import onnx
    specs = {s.name: s for s in summary.inputs + summary.outputs}
    meanings_in, meanings_out = adapter.input_meanings(), adapter.output_meanings()

    def entry(name, meaning):
        spec = specs.get(name)
        return dict(name=name, shape=list(spec.shape) if spec and spec.shape is not None else None,
                    dtype=spec.dtype if spec else None,
                    meaning=meaning, in_graph=spec is not None)

    return dict(
        format=FORMAT, family=adapter.family, model_type=cfg.model['type'], config='config.py', onnx=path.name,
        checkpoint=str(Path(checkpoint).resolve()) if checkpoint not in (None, 'random') else 'random', seed=0,
        batch_size=adapter.batch_size, bounds=adapter.bounds, bounds_source=source,
        inputs=[entry(n, m) for n, m in meanings_in.items()], outputs=[entry(n, m) for n, m in meanings_out.items()],
        dropped_names=adapter.dropped_names(), outside_graph=adapter.outside_graph(), host_state=adapter.host_state(),
        graph=dict(opset=summary.opset, nodes=summary.num_nodes, op_counts=summary.op_counts,
                   problems=summary.problems, bytes=path.stat().st_size),
        export=dict(seconds=round(seconds, 2), example=frame.name, example_pre_ops_seconds=round(pre_seconds, 3),
                    example_dropped=pre.dropped, torch=torch.__version__, onnx=onnx.__version__))


def report_text(info, summary, diffs, tier_exports=()):
    """A short human-readable export report (Markdown)."""
    lines = [f'# Deploy export: {info["model_type"]} ({info["family"]})', '',
             f'- checkpoint: {info["checkpoint"]}; batch size {info["batch_size"]}',
             f'- bounds ({info["bounds_source"]}): {json.dumps(info["bounds"])}',
             f'- graph: {info["onnx"]}, opset {summary.opset}, {summary.num_nodes} nodes, '
             f'{info["graph"]["bytes"] / 2**20:.1f} MiB, exported in {info["export"]["seconds"]} s',
             f'- deployable: {"yes" if summary.ok else "NO"}' + ''.join(f'\n  - {p}' for p in summary.problems),
             '- top ops: ' + ', '.join(f'{k} {v}' for k, v in list(summary.op_counts.items())[:12]), '',
             '## Inputs', *(f'- `{e["name"]}` {e["shape"]} {e["dtype"]}: {e["meaning"]}' for e in info['inputs']), '',
             '## Outputs', *(f'- `{e["name"]}` {e["shape"]} {e["dtype"]}: {e["meaning"]}' for e in info['outputs']),
             '', '## Outside the graph', *(f'- pre: {t}' for t in info['outside_graph']['pre_ops']),
             *(f'- post: {t}' for t in info['outside_graph']['post_ops'])]
    if info['dropped_names']:
        lines += ['', f'`dropped` entries: {", ".join(info["dropped_names"])}']
    if diffs:
        lines += ['', f'## ONNX Runtime vs PyTorch on the example ({info["export"]["example"]})', '',
                  '| output | compared | max abs | max rel | tolerance |', '|---|---|---|---|---|']
        lines += [f'| {d.name} | {d.compared} | {d.max_abs:.2e} | {d.max_rel:.2e} | {d.tolerance} |' for d in diffs]
        lines += [f'- `{d.name}` beyond its tolerance, explained by decisions that flipped on near-ties: {d.explained}'
                  for d in diffs if d.explained]
    if tier_exports:
        lines += ['', '## Capacity tiers (the runtime picks the smallest whose pre-op bounds hold)', '',
                  '| scale | graph | nodes | deployable | example fits | worst output vs PyTorch (max abs) | ok |',
                  '|---|---|---|---|---|---|---|']
        for t in tier_exports:
            worst = max(t.diffs, key=lambda d: d.max_abs, default=None)
            lines.append(f'| {t.entry["scale"]:g} | {t.entry["onnx"]} | {t.entry["nodes"]} | '
                         f'{"yes" if t.summary.ok else "NO"} | {"yes" if t.entry["example_fits"] else "no"} | '
                         f'{f"{worst.name} {worst.max_abs:.2e}" if worst else "-"} | '
                         f'{"yes" if all(d.ok for d in t.diffs) else "NO"} |')
    return '\n'.join(lines) + '\n'


__all__ = ['FORMAT', 'ExportResult', 'TierExport', 'as_config', 'build_model', 'plain_config', 'adapter_with_bounds',
           'resolve_bounds', 'prepare', 'export_graph_checked', 'explain_diffs', 'export_tier', 'export_model',
           'deploy_info', 'report_text']
