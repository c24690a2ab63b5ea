"""``python -m fsdlite.ops [FAMILY ...] [--nvcc-check | --smoke [--diagnose]]``: build, compile-check or smoke-test
the op families (:func:`fsdlite.ops.build.main`; running the package, not ``fsdlite.ops.build``, keeps that module
imported once)."""
import sys

from .build import main

sys.exit(main())
