"""fsdlite.slim: channel and depth slimming with weight transfer, and an honest cost counter.

The engine derives coupled channels from the model (a dispatch-level trace of one sample forward,
:mod:`~fsdlite.slim.trace`), finds which config integers are widths by perturbation
(:mod:`~fsdlite.slim.entries`), keeps the most important channels of every coupled group
(:mod:`~fsdlite.slim.select`) and writes a config + checkpoint (:mod:`~fsdlite.slim.api`). Layers declare how
they slim with a ``slim_spec`` class attribute or :func:`fsdlite.slim.specs.register_spec`; custom ops with
:func:`fsdlite.slim.rules.register_op_rule`.

Nothing heavy is imported here: import the submodules you need (``fsdlite.slim.api``, ``fsdlite.slim.engine``).
"""
