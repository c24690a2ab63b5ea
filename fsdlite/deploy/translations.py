"""ONNX translations the torch exporter lacks, written with standard-domain ops only.

* ``aten.index_reduce`` (``amax`` / ``amin`` along dim 0, ``include_self=True``) -> ``ScatterND`` with
  ``reduction='max'/'min'`` (opset >= 18) and one index per row.  :func:`fsdlite.models.layers.static_ops.
  static_segment_reduce` uses it for segment max/min: ORT's ScatterND copies whole rows, where the element-wise
  ScatterElements that ``scatter_reduce`` exports to costs ~40x more on CPU.
"""
import torch


def _index_reduce_translation():
    from onnxscript import opset18 as op

    def index_reduce(self, dim: int, index, source, reduce: str, include_self: bool = True):
        if dim != 0 or not include_self or reduce not in ('amax', 'amin'):
            raise NotImplementedError(f'index_reduce: only dim=0, include_self=True and amax/amin export '
                                      f'(got dim={dim}, include_self={include_self}, reduce={reduce!r})')
        rows = op.Unsqueeze(index, op.Constant(value_ints=[-1]))
        return op.ScatterND(self, rows, source, reduction='max' if reduce == 'amax' else 'min')

    return index_reduce


def custom_translations():
    """``{aten overload: onnxscript function}`` for ``torch.onnx.export(custom_translation_table=...)``."""
    return {torch.ops.aten.index_reduce.default: _index_reduce_translation()}


__all__ = ['custom_translations']
