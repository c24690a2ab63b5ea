"""Training-loop extensions (hooks) registered in fsdlite.registry.HOOKS."""
