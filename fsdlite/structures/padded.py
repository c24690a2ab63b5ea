"""Padded tensors of fixed-shape (static) models: fixed-size buffers with ``num_valid`` and a dump slot.

Conventions (DESIGN.md "Fixed shapes"):

* a padded tensor has ``M`` rows (its bound); rows ``[0, num_valid)`` hold data, the rest is padding whose
  content is unspecified (coordinate padding produced by fsdlite is 0) -- use :func:`valid_mask`;
* ``num_valid`` is a 0-d int64 tensor (an exported graph computes it; it is never a Python int there);
* an index that may point at padding points at a **dump slot** instead: buffers written through such indices
  have ``M + 1`` rows and row ``M`` is discarded; buffers read through them get one extra row (zeros) at ``M``.
  ``-1`` is never used as an index (ONNX wraps it to the last row).
"""
from typing import NamedTuple

import torch

from .bounds import check_bound


def valid_mask(num_valid, size, device=None):
    """(size,) bool mask of the rows ``< num_valid``.

    Args:
        num_valid (int | Tensor): number of valid rows (0-d tensor inside graphs).
        size (int): M, the padded size.
        device: device of the result (default: that of ``num_valid`` when a tensor, else CPU).
    """
    if isinstance(num_valid, torch.Tensor):
        return torch.arange(size, device=device or num_valid.device) < num_valid.reshape(())
    return torch.arange(size, device=device) < int(num_valid)


def dump_index(index, valid, dump):
    """``index`` where ``valid``, else the dump slot ``dump`` (same shape; int64).

    Args:
        index (Tensor): integer indices.
        valid (Tensor): bool, broadcastable to ``index``.
        dump (int): the dump slot (the number of real rows M of the target buffer).
    """
    return torch.where(valid, index.long(), torch.full_like(index, dump, dtype=torch.long))


def with_dump_row(tensor, fill=0.0):
    """(M, *F) -> (M + 1, *F): append the dump row (filled with ``fill``) used by dump-slot indices."""
    return torch.cat([tensor, tensor.new_full((1,) + tuple(tensor.shape[1:]), fill)], 0)


class Padded(NamedTuple):
    """A tensor padded to its bound: ``data`` (M, *F) whose rows ``< num_valid`` are valid."""
    data: torch.Tensor
    num_valid: torch.Tensor  #: () int64

    @property
    def bound(self):
        """M, the number of rows."""
        return self.data.shape[0]

    def mask(self):
        """(M,) bool valid-row mask."""
        return valid_mask(self.num_valid, self.bound, self.data.device)

    def masked(self, fill=0):
        """``data`` with the padding rows set to ``fill``."""
        m = self.mask().view(-1, *([1] * (self.data.dim() - 1)))
        return torch.where(m, self.data, torch.full_like(self.data, fill))

    def unpad(self):
        """The valid rows ``data[:num_valid]`` (a data-dependent shape: eager use only)."""
        return self.data[:int(self.num_valid)]


def pad_to_bound(tensor, bound, name, fill=0, strict=None):
    """Pad a dynamic (N, *F) tensor to ``bound`` rows.

    Args:
        tensor (Tensor): (N, *F).
        bound (int): M.
        name (str): bound name for the overflow error (``'max_points'``).
        fill: value of the padding rows.
        strict (bool | None): raise when N > M (default: in eager mode; while exporting the first M rows are
            kept).
    Returns:
        tuple: (:class:`Padded` with ``num_valid = min(N, M)``, () int64 number of rows dropped).
    Raises:
        BoundExceededError: strict and N > M.
    """
    n = tensor.shape[0]
    dropped = check_bound(n, bound, name, strict=strict).to(tensor.device)
    kept = tensor[:bound]
    pad = tensor.new_full((bound - kept.shape[0],) + tuple(tensor.shape[1:]), fill)
    num_valid = torch.tensor(min(n, bound), dtype=torch.long, device=tensor.device)
    return Padded(torch.cat([kept, pad], 0), num_valid), dropped


__all__ = ['valid_mask', 'dump_index', 'with_dump_row', 'Padded', 'pad_to_bound']
