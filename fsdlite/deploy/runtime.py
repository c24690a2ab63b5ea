"""Run a deploy folder in one call: pre-ops (fsdlite.ops, eager) -> ONNX Runtime session -> post-ops.

    from fsdlite.deploy import DeployedModel
    model = DeployedModel('deploy_out/fsd')            # reads deploy.json, config.py, model.onnx
    samples = model([points])                           # list of Det3DDataSample, as the PyTorch model predicts
    out = model.run([points]); out.dropped              # also graph outputs, dropped counts, stage times
    out.tier                                            # capacity tier that ran (1.0: model.onnx's bounds)

A folder exported with capacity tiers (``--tiers``, :mod:`fsdlite.deploy.tiers`) runs each input on the smallest
tier graph whose pre-op bounds hold for it.

The pre/post-ops are the model family's own (voxel hashing, rulebooks, neighbour search, NMS), built from
``config.py`` without weights: the weights live in the graph.
"""
import json
import time
from pathlib import Path
from typing import NamedTuple

from mmengine.logging import print_log

from ..engine.tool_setup import read_config
from .adapter import adapter_class
from .exporter import FORMAT, adapter_with_bounds
from .onnx_io import OrtGraph
from .tiers import Tier, run_on_tiers


class DeployOutput(NamedTuple):
    """One deployed run: ``results`` (final predictions), ``outputs`` (graph outputs by name), ``dropped``
    (bound name -> items dropped because the bound was exceeded, pre-ops and graph; all 0 when bounds hold),
    ``seconds`` (``pre_ops``, ``graph``, ``post_ops``), ``pre`` (the pre-ops result) and ``tier`` (the capacity
    tier's scale; 1.0: ``model.onnx``)."""
    results: list
    outputs: dict
    dropped: dict
    seconds: dict
    pre: object
    tier: float = 1.0
    attempts: tuple = ()  #: tier scales whose graph ran (several: a tier's graph overflowed a bound it scales)


def read_deploy_info(directory):
    """deploy.json of a deploy folder, checked for format and files."""
    directory = Path(directory)
    path = directory / 'deploy.json'
    if not path.is_file():
        raise FileNotFoundError(f'{directory} is not a deploy folder: no deploy.json (run deploy/export_onnx.py)')
    try:
        info = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f'{path} is not valid JSON ({exc}); expected the deploy.json of deploy/export_onnx.py') \
            from None
    if not isinstance(info, dict) or info.get('format') != FORMAT:
        found = info.get('format') if isinstance(info, dict) else info
        raise ValueError(f'{path}: format {found!r} is not {FORMAT!r}; re-export the model')
    files = [(key, info[key]) for key in ('onnx', 'config')]
    files += [(f'tiers[{i}].onnx', tier['onnx']) for i, tier in enumerate(info.get('tiers', []))]
    for key, name in files:
        if not (directory / name).is_file():
            raise FileNotFoundError(f'{directory / name} is missing (deploy.json names it as {key})')
    return info


def read_deploy_config(directory, info):
    """The folder's ``config.py`` (the model config the graph was exported from); a file that does not parse raises
    ToolError naming it."""
    return read_config(str(Path(directory) / info['config']), 'deploy config')


def build_host(directory, info, bounds=None):
    """The adapter whose model provides the pre/post-ops (config of the folder, random weights: unused), for the
    folder's bounds or the given ``bounds`` (a capacity tier's)."""
    cfg = read_deploy_config(directory, info)
    return adapter_with_bounds(adapter_class(info['model_type']), cfg.model,
                               info['bounds'] if bounds is None else bounds, info['batch_size'],
                               host_state=info.get('host_state', {}))


class DeployedModel:
    """A deploy folder ready to run (see the module docstring).

    Args:
        directory (str | Path): folder written by ``deploy/export_onnx.py``.
        threads (int): ONNX Runtime intra-op threads.
    """

    def __init__(self, directory, threads=1):
        self.directory = Path(directory)
        self.info = read_deploy_info(self.directory)
        self.adapter = build_host(self.directory, self.info)
        self.graph = OrtGraph(self.directory / self.info['onnx'], threads)
        self.tiers = [Tier(t['scale'], t['bounds'], build_host(self.directory, self.info, t['bounds']),
                           OrtGraph(self.directory / t['onnx'], threads)) for t in self.info.get('tiers', [])]
        self.tiers.append(Tier(1.0, self.info['bounds'], self.adapter, self.graph))

    @property
    def batch_size(self):
        """B, the batch size fixed in the graph."""
        return self.info['batch_size']

    def run(self, data):
        """Pre-ops -> graph -> post-ops on one batch of raw data (the family's format); returns DeployOutput."""
        t0 = time.perf_counter()
        graph_seconds = []
        tier, pre, outputs, attempts = run_on_tiers(self.tiers, data, graph_seconds)
        t2 = time.perf_counter()
        results = tier.adapter.post_ops(outputs, pre)
        t3 = time.perf_counter()
        t1 = t2 - sum(graph_seconds)  # pre-ops: everything else before the post-ops (several when a tier retried)
        dropped = dict(pre.dropped, **tier.adapter.graph_dropped(outputs))
        exceeded = {k: v for k, v in dropped.items() if v}
        if exceeded:
            print_log(f'DeployedModel: bounds exceeded, items dropped: {exceeded} (raise the bounds and re-export)',
                      logger='current', level=30)
        return DeployOutput(results, outputs, dropped, dict(pre_ops=t1 - t0, graph=t2 - t1, post_ops=t3 - t2), pre,
                            tier.scale, tuple(attempts))

    def __call__(self, data):
        """Final predictions of one batch (list of data samples)."""
        return self.run(data).results


__all__ = ['DeployOutput', 'read_deploy_info', 'build_host', 'DeployedModel']
