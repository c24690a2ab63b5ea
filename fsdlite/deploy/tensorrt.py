"""Build a TensorRT engine from a deploy folder's ONNX graph (``deploy/build_trt.py`` is the command line).

TensorRT is optional: :func:`unavailable_reason` says why no engine can be built here (no ``tensorrt`` package,
no CUDA device), and the command line then exits 0 after printing it.
"""
from pathlib import Path


def unavailable_reason():
    """None when TensorRT and a CUDA device are usable, else a one-line reason (str)."""
    try:
        import tensorrt  # noqa: F401
    except ImportError as exc:
        return f'TensorRT is not installed ({exc}); install the tensorrt wheel on a machine with an NVIDIA GPU'
    import torch
    if not torch.cuda.is_available():
        return 'no CUDA device is available (torch.cuda.is_available() is False); TensorRT builds need a GPU'
    return None


def build_engine(onnx_path, engine_path, fp16=False, workspace_gib=4.0):
    """Parse ``onnx_path`` with TensorRT's ONNX parser and write a serialized engine.

    Args:
        onnx_path (str | Path): the deploy graph (static shapes, standard ops).
        engine_path (str | Path): output ``.engine`` file.
        fp16 (bool): allow FP16 kernels.
        workspace_gib (float): builder workspace limit (GiB, > 0).
    Returns:
        int: engine size in bytes.
    Raises:
        RuntimeError: TensorRT is unavailable, the parser rejects the graph (its errors listed) or the build fails.
    """
    reason = unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    if not workspace_gib > 0:
        raise ValueError(f'workspace_gib must be > 0, got {workspace_gib!r}')
    import tensorrt as trt
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, 'EXPLICIT_BATCH'):  # TensorRT < 10 needs it, 10 ignores it
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(Path(onnx_path).read_bytes()):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise RuntimeError(f'TensorRT could not parse {onnx_path}:\n  ' + '\n  '.join(errors))
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gib * (1 << 30)))
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        raise RuntimeError(f'TensorRT failed to build an engine from {onnx_path} (see the log above)')
    Path(engine_path).write_bytes(bytes(engine))
    return Path(engine_path).stat().st_size


__all__ = ['unavailable_reason', 'build_engine']
