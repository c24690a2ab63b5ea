"""selftest: diagnostics of error propagation from the op libraries (used by :mod:`fsdlite.ops.smoke`; no user op).

``torch.ops.fsdlite._raise_error(x, mode)`` raises in six ways (selftest.h): a ``c10::Error`` or a
``std::runtime_error`` thrown across the library boundary, one caught inside the library, one thrown inside
``at::parallel_for``, a ``c10::ValueError``; the CUDA dispatch throws from nvcc-compiled host code. When the smoke
test finds a crash, :func:`fsdlite.ops.smoke.diagnose` runs each mode in its own process to tell which breaks.
"""

__all__ = []
