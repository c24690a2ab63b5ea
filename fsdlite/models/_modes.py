"""The mmengine ``forward(inputs, data_samples, mode)`` contract shared by the segmentors and kernel-point nets."""

MODES = ('loss', 'predict', 'tensor')


def dispatch_forward(model, inputs, data_samples, mode, tensor_fn):
    """Route ``mode`` to ``model.loss`` / ``model.predict`` / ``tensor_fn(inputs)``.

    Args:
        model: a model with ``loss(inputs, data_samples)`` and ``predict(inputs, data_samples)``.
        inputs, data_samples: as given to ``forward``.
        mode (str): one of :data:`MODES`; anything else raises a ValueError naming the model and the value.
        tensor_fn (callable): computes the raw outputs for ``mode='tensor'``.
    """
    if mode not in MODES:
        raise ValueError(f'{type(model).__name__}: mode must be one of {MODES}, got {mode!r}')
    if mode == 'loss':
        return model.loss(inputs, data_samples)
    if mode == 'predict':
        return model.predict(inputs, data_samples)
    return tensor_fn(inputs)
