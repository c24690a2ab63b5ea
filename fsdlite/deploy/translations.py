"""ONNX translations the torch exporter lacks, written with standard-domain ops only.

* ``aten.index_reduce`` (``amax`` / ``amin`` along dim 0, ``include_self=True``) -> ``ScatterND`` with
  ``reduction='max'/'min'`` (opset >= 18) and one index per row.  :func:`fsdlite.models.layers.static_ops.
  static_segment_reduce` uses it for segment max/min: ORT's ScatterND copies whole rows, where the element-wise
  ScatterElements that ``scatter_reduce`` exports to costs far more on CPU.
* ``aten.index_select`` of a 1-D tensor -> ``GatherElements`` (``Gather`` otherwise): ONNX Runtime's ``Gather`` of
  scalar rows is several times slower on CPU -- the label propagation, coordinate and key-table lookups of the
  static grouping and the rulebook ops' export form;
* ``aten.gelu`` -> ``(x * (1 + erf(x / sqrt 2))) * 0.5`` (``approximate='tanh'``: the tanh formula), the arrangement
  ONNX Runtime fuses into one Gelu kernel; the exporter's own ``(0.5 * (1 + erf)) * x`` stays five element-wise
  ops.

The measurements behind these choices are in docs/benchmarks.md.
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


def _index_select_translation():
    from onnxscript import opset18 as op

    def index_select(self, dim: int, index):
        rank = len(self.shape) if self.shape is not None else None
        if rank == 1 and dim in (0, -1):
            return op.GatherElements(self, index, axis=0)
        if rank == 0 or rank is None:
            raise NotImplementedError(f'index_select: the rank of the source must be known and >= 1, got {rank}')
        return op.Gather(self, index, axis=dim)

    return index_select


def _gelu_translation():
    from onnxscript import opset18 as op

    def gelu(self, approximate: str = 'none'):
        def const(value):
            return op.CastLike(op.Constant(value_float=value), self)

        if approximate == 'tanh':
            cube = op.Mul(op.Mul(self, self), self)
            inner = op.Mul(op.Add(self, op.Mul(cube, const(0.044715))), const(0.7978845608028654))
            return op.Mul(op.Mul(self, op.Add(op.Tanh(inner), const(1.0))), const(0.5))
        if approximate != 'none':
            raise NotImplementedError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return op.Mul(op.Mul(self, op.Add(op.Erf(op.Div(self, const(1.4142135623730951))), const(1.0))),
                      const(0.5))

    return gelu


def custom_translations():
    """``{aten overload: onnxscript function}`` for ``torch.onnx.export(custom_translation_table=...)``."""
    return {torch.ops.aten.index_reduce.default: _index_reduce_translation(),
            torch.ops.aten.gelu.default: _gelu_translation(),
            torch.ops.aten.index_select.default: _index_select_translation()}


__all__ = ['custom_translations']
