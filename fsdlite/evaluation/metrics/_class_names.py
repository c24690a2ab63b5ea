"""Class names of a metric: the config value, else the evaluated dataset's ``metainfo['classes']``."""


class ClassNamesMixin:
    """Gives a :class:`mmengine.evaluator.BaseMetric` a ``classes`` property (tuple of C names in label order).

    Call :meth:`_set_classes` in ``__init__``; the property raises a ValueError naming the metric when neither
    the config nor ``dataset_meta`` gives class names.
    """

    def _set_classes(self, classes):
        self._classes = tuple(classes) if classes is not None else None

    @property
    def classes(self):
        """Class names in label order (config value, else ``dataset_meta['classes']``)."""
        if self._classes is not None:
            return self._classes
        meta = self.dataset_meta or {}
        if not meta.get('classes'):
            raise ValueError(f'{type(self).__name__} needs class names: pass classes=[...] or evaluate through a '
                             "dataset whose metainfo has 'classes'")
        return tuple(meta['classes'])
