"""Config-level entry points used by ``tools/slim.py`` and ``benchmarks/slim.py``.

* :func:`prepare` -- load config + checkpoint + sample, trace and probe once
  (:class:`~fsdlite.slim.engine.SlimAnalysis`);
* :func:`write_slim` -- slim for one request, write ``<out>/<name>_slim.py`` and ``<name>_slim.pth``, rebuild the
  written config, load the written weights with ``strict=True`` and run it on the sample;
* :func:`slim_config` -- both;
* :func:`cost_report` -- parameters, multiply-accumulates, latency (and peak memory through a callback) of
  the original and the slimmed model on the same sample.
"""
import math
import os.path as osp
from dataclasses import dataclass

import torch
from mmengine.config import Config

from ..engine.tool_setup import load_config
from ..registry import MODELS
from .configio import config_overrides, load_into, load_state_dict, save_checkpoint, write_slim_config
from .cost import count_macs, count_params, measure_latency
from .engine import SlimAnalysis
from .errors import SlimError
from .sample import build_sample, calibration_batches


@dataclass
class SlimOutput:
    """Files written by :func:`slim_config` and the objects a caller may reuse."""

    config_path: str
    checkpoint_path: str
    result: object          # SlimResult
    model: object           # original model (weights loaded)
    slim_model: object      # model built from the written config, written weights loaded
    data: dict              # the sample batch
    identical: object       # max |difference| of the outputs for an identity request, else None


def max_abs_diff(a, b):
    """Largest absolute difference between two nested output structures (inf if they differ in structure)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return math.inf
        if not a.numel():
            return 0.0
        if not a.is_floating_point():
            return math.inf if bool((a != b).any()) else 0.0
        return float((a.double() - b.double()).abs().max())
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return math.inf
        return max([max_abs_diff(a[k], b[k]) for k in a] or [0.0])
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return math.inf
        return max([max_abs_diff(x, y) for x, y in zip(a, b)] or [0.0])
    return 0.0 if a == b else math.inf


def _is_identity(request):
    return request.width >= 1 and not request.depth and all(r >= 1 for r in request.ratios.values())


@dataclass
class Prepared:
    """A loaded config, its model (checkpoint weights), the sample batch and the reusable analysis."""

    config_path: str
    checkpoint: object
    cfg: object
    model: object
    data: dict
    analysis: object
    cfg_options: dict


def prepare(config_path, checkpoint, cfg_options=None, sample_indices=(0,), split='val', log=None, calibration=0,
            calibration_split='train'):
    """Load ``config_path`` (+ ``--cfg-options``), its checkpoint (None: fresh weights) and a sample, then trace.

    With ``calibration`` > 0 the original model also runs on the first ``calibration`` items of
    ``calibration_split`` and every later :meth:`~fsdlite.slim.engine.SlimAnalysis.slim` compensates the dropped
    input channels of each layer by least squares (:mod:`fsdlite.slim.compensate`).

    Returns:
        Prepared
    Raises:
        SlimError: the checkpoint does not belong to the config, the trace fails; DataError: the sample is missing.
    """
    cfg = load_config(config_path, cfg_options)
    model = MODELS.build(cfg.model)
    if checkpoint:
        load_into(model, load_state_dict(checkpoint), checkpoint, config_path)
    model.eval()
    data = build_sample(cfg, model, sample_indices, split)
    analysis = SlimAnalysis(model, cfg.model.to_dict(), data, log)
    if calibration:
        batches, items = calibration_batches(cfg, model, calibration, calibration_split)
        layers = analysis.calibrate(model, batches)
        analysis.log(f'calibrated the inputs of {layers} layers on {items} {calibration_split} items')
    return Prepared(config_path, checkpoint, cfg, model, data, analysis, dict(cfg_options or {}))


def write_slim(prepared, request, out_dir, name=None):
    """Slim for ``request``, write ``<out_dir>/<name>_slim.{py,pth}``, rebuild and check the written files.

    The written config is rebuilt from disk, the written weights are loaded with ``strict=True`` and the model
    is run on the sample; for an identity request (width 1, no depth change) its outputs must equal the
    original's exactly.

    Returns:
        SlimOutput
    """
    p = prepared
    result = p.analysis.slim(request)
    name = name or osp.splitext(osp.basename(p.config_path))[0]
    full = p.cfg.to_dict()
    full['model'] = result.model_cfg
    overrides = config_overrides(Config.fromfile(p.config_path).to_dict(), full)
    header = [f'{name} slimmed by tools/slim.py: width={request.width}, depth={request.depth or {}}, '
              f'keep ratios={request.ratios or {}}, divisor={request.divisor}',
              f'source checkpoint: {p.checkpoint}'] + [f'{n}: {old} -> {new} ({kind})'
                                                       for n, old, new, kind in result.changes]
    cfg_path = write_slim_config(osp.join(out_dir, f'{name}_slim.py'), p.config_path, overrides, header)
    small = MODELS.build(Config.fromfile(cfg_path).model)
    load_into(small, result.state_dict, '<slimmed weights>', cfg_path)
    small.eval()
    with torch.no_grad():
        slim_out = small(**p.data, mode='tensor')
        identical = max_abs_diff(p.model(**p.data, mode='tensor'), slim_out) if _is_identity(request) else None
    if identical is not None and identical != 0:
        raise SlimError(f'internal: an identity request changed the outputs (max difference {identical})')
    meta = dict(slim=dict(source_config=osp.abspath(p.config_path), source_checkpoint=p.checkpoint,
                          width=request.width, depth=dict(request.depth), ratios=dict(request.ratios),
                          divisor=request.divisor, changes=[list(c) for c in result.changes]))
    ckpt_path = save_checkpoint(osp.join(out_dir, f'{name}_slim.pth'), result.state_dict, meta)
    return SlimOutput(cfg_path, ckpt_path, result, p.model, small, p.data, identical)


def slim_config(config_path, checkpoint, request, out_dir, cfg_options=None, sample_indices=(0,), split='val',
                log=None, calibration=0):
    """:func:`prepare` + :func:`write_slim` for one request (see those for the arguments)."""
    request.validate()
    return write_slim(prepare(config_path, checkpoint, cfg_options, sample_indices, split, log, calibration),
                      request, out_dir)


def model_cost(model, data, latency_repeat=5):
    """dict(params, macs, macs_by_op, uncounted_ops, latency_s) of ``model`` on ``data`` (predict mode)."""
    macs, by_op, uncounted = count_macs(model, data)
    return dict(params=count_params(model), macs=int(macs), macs_by_op={k: int(v) for k, v in by_op.items()},
                uncounted_ops=dict(uncounted), latency_s=measure_latency(model, data, repeat=latency_repeat))


def cost_report(models, data, memory=None, latency_repeat=5):
    """Cost of each named model on the same sample.

    Args:
        models (dict): name -> model.
        data (dict): the sample batch.
        memory (callable, optional): ``name -> peak bytes`` (measured in a fresh process by the caller).
        latency_repeat (int): timed runs per model (median reported).
    Returns:
        dict: name -> cost dict (see :func:`model_cost`, plus ``peak_bytes``).
    """
    out = {}
    for name, model in models.items():
        out[name] = model_cost(model, data, latency_repeat)
        out[name]['peak_bytes'] = memory(name) if memory is not None else None
    return out


def format_report(costs, baseline='original'):
    """Text table of :func:`cost_report` with ratios to ``baseline``."""
    base = costs.get(baseline)
    rows = [('model', 'params', 'MMACs', 'latency ms', 'peak MiB', 'speed-up')]
    for name, c in costs.items():
        mem = c.get('peak_bytes')
        speed = base['latency_s'] / c['latency_s'] if base and c['latency_s'] else math.nan
        rows.append((name, f"{c['params']:,}", f"{c['macs'] / 1e6:.1f}", f"{c['latency_s'] * 1e3:.1f}",
                     f'{mem / 2 ** 20:.1f}' if isinstance(mem, (int, float)) and mem == mem else 'n/a',
                     f'{speed:.2f}x'))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ['  '.join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, '  '.join('-' * w for w in widths))
    return '\n'.join(lines)


__all__ = ['SlimOutput', 'Prepared', 'prepare', 'write_slim', 'slim_config', 'cost_report', 'model_cost',
           'format_report', 'max_abs_diff']
