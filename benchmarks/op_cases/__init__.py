"""Op benchmark cases of ``benchmarks/ops.py``, one module per op family (format in its docstring)."""
