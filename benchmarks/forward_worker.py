"""Worker for peak-memory measurement in a fresh process (``_harness.run_isolated``, run as a script).

Used by ``benchmarks/slim.py`` and the memory column of ``tools/slim.py``. :func:`forward_work` builds a model from
a config (+ checkpoint) and a sample batch, and returns the measured call: one ``predict`` forward without
gradients.
"""


def forward_work(config, checkpoint=None, cfg_options=None, sample_indices=(0,), split='val', threads=1):
    """Return a callable running one predict forward of the model of ``config`` on its sample batch."""
    import torch

    from fsdlite.engine.tool_setup import load_config
    from fsdlite.registry import MODELS

    from fsdlite.slim.configio import load_into, load_state_dict
    from fsdlite.slim.sample import build_sample

    torch.set_num_threads(int(threads))
    cfg = load_config(config, cfg_options, allow_new_keys=True)
    model = MODELS.build(cfg.model)
    if checkpoint:
        load_into(model, load_state_dict(checkpoint), checkpoint, config)
    model.eval()
    data = build_sample(cfg, model, sample_indices, split)

    def work():
        with torch.inference_mode():
            model(**data, mode='predict')
    return work


__all__ = ['forward_work']
