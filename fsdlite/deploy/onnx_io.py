"""Export a module to a single-file ONNX graph and run graphs in ONNX Runtime with named tensors.

Exporter facts on torch 2.13 (reference/environment.md §7): the dynamo exporter (``dynamo=True``) is the
default; it writes external weight files unless ``external_data=False``; opset 18 is the lowest it emits.
"""
import contextlib
import io
import time
import warnings
from pathlib import Path

import torch

from ..utils import compat
from ..utils.errors import ToolError
from .translations import custom_translations

DEFAULT_OPSET = 18


def export_graph(module, args, path, input_names, output_names, opset=DEFAULT_OPSET, verbose=False):
    """Export ``module(*args)`` to ``path`` (one self-contained .onnx file, static shapes).

    Args:
        module (nn.Module): in eval mode; ``forward(*args)`` returns a tuple of tensors.
        args (tuple[Tensor]): example inputs (their shapes become the graph's fixed shapes).
        path (str | Path): output file.
        input_names, output_names (Sequence[str]): graph names, in ``args`` / output order (all distinct).
        opset (int): >= 18.
        verbose (bool): show the exporter's progress messages.
    Returns:
        float: export seconds.
    """
    names = list(input_names) + list(output_names)
    if len(set(names)) != len(names):
        raise ValueError(f'export_graph: input and output names must be distinct, got {names}')
    if len(input_names) != len(args):
        raise ValueError(f'export_graph: {len(args)} inputs but {len(input_names)} input names')
    if int(opset) < DEFAULT_OPSET:
        raise ValueError(f'export_graph: opset must be >= {DEFAULT_OPSET} (ScatterElements max/min), got {opset}')
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    sink = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    with torch.no_grad(), sink, warnings.catch_warnings(), compat.onnx_export_rules():
        if not verbose:
            warnings.simplefilter('ignore')
        torch.onnx.export(module, tuple(args), str(path), dynamo=True, opset_version=int(opset),
                          external_data=False, input_names=list(input_names), output_names=list(output_names),
                          optimize=True, verbose=verbose, custom_translation_table=custom_translations())
    return time.perf_counter() - start


class OrtGraph:
    """An ONNX Runtime CPU session fed and read by name.

    Args:
        path (str | Path): the .onnx file.
        threads (int): intra-op threads (default 1, the tests' and benchmarks' setting).
        profile_prefix (str, optional): profile every node (``SessionOptions.enable_profiling``) into a JSON file
            starting with this prefix; ``self.session.end_profiling()`` closes it and returns its path.
    """

    def __init__(self, path, threads=1, profile_prefix=None):
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(threads)
        options.inter_op_num_threads = 1
        # every graph-level fusion ORT has (Gemm + activation, LayerNormalization, Gelu, ...), nodes run in order
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Idle intra-op workers would otherwise spin for a while after each run and take the cores from the
        # host pre-/post-ops that run between graph calls (docs/benchmarks.md has the measurement).
        options.add_session_config_entry('session.intra_op.allow_spinning', '0')
        options.log_severity_level = 3  # constant-folding notices about CastLike are harmless
        if profile_prefix is not None:
            options.enable_profiling, options.profile_file_prefix = True, str(profile_prefix)
        self.path = str(path)
        try:
            self.session = ort.InferenceSession(self.path, options, providers=['CPUExecutionProvider'])
        except Exception as exc:  # onnxruntime's errors (InvalidProtobuf, InvalidArgument, ...) subclass Exception
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ToolError(f'ONNX model {self.path!r} could not be loaded by ONNX Runtime ({detail}); expected a '
                            'graph written by deploy/export_onnx.py (re-export it)') from exc
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, inputs):
        """Run the graph.

        Args:
            inputs (dict): name -> Tensor for (at least) every graph input; names the exporter pruned (inputs
                the graph does not read) are ignored.
        Returns:
            dict: output name -> CPU Tensor.
        """
        missing = [n for n in self.input_names if n not in inputs]
        if missing:
            raise KeyError(f'OrtGraph({self.path}): missing inputs {missing}; the graph takes {self.input_names}')
        feeds = {n: inputs[n].detach().cpu().contiguous().numpy() for n in self.input_names}
        outputs = self.session.run(self.output_names, feeds)
        return {n: torch.from_numpy(o) for n, o in zip(self.output_names, outputs)}


__all__ = ['DEFAULT_OPSET', 'export_graph', 'OrtGraph']
