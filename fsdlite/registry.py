"""fsdlite registries: one child of every mmengine root registry, and :data:`DEPLOY_ADAPTERS`.

Each child has ``locations`` so building a config never needs manual imports, and
configs set ``default_scope = 'fsdlite'`` (mmengine then imports this module when
switching scope).  Building an unknown ``type`` raises a :class:`KeyError` that
names the registry and suggests the closest registered names.
"""
import difflib

from mmengine.registry import DATA_SAMPLERS as MMENGINE_DATA_SAMPLERS
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import EVALUATOR as MMENGINE_EVALUATOR
from mmengine.registry import FUNCTIONS as MMENGINE_FUNCTIONS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import INFERENCERS as MMENGINE_INFERENCERS
from mmengine.registry import LOG_PROCESSORS as MMENGINE_LOG_PROCESSORS
from mmengine.registry import LOOPS as MMENGINE_LOOPS
from mmengine.registry import METRICS as MMENGINE_METRICS
from mmengine.registry import MODEL_WRAPPERS as MMENGINE_MODEL_WRAPPERS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import OPTIMIZERS as MMENGINE_OPTIMIZERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import RUNNER_CONSTRUCTORS as MMENGINE_RUNNER_CONSTRUCTORS
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import STRATEGIES as MMENGINE_STRATEGIES
from mmengine.registry import TASK_UTILS as MMENGINE_TASK_UTILS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import VISBACKENDS as MMENGINE_VISBACKENDS
from mmengine.registry import VISUALIZERS as MMENGINE_VISUALIZERS
from mmengine.registry import WEIGHT_INITIALIZERS as MMENGINE_WEIGHT_INITIALIZERS
from mmengine.registry import Registry
from mmengine.registry.build_functions import build_from_cfg, build_model_from_cfg

from .utils import compat

compat.patch_mmengine_checkpoint_loading()


def _visible_names(registry):
    """All names buildable from ``registry``: its own, its parents' and siblings' (scoped)."""
    names = set()
    root = registry
    while root.parent is not None:
        root = root.parent
    stack = [root]
    while stack:
        reg = stack.pop()
        names.update(reg.module_dict.keys())
        stack.extend(reg.children.values())
    return sorted(names)


def _with_suggestions(build, variable):
    """Wrap a build function so an unknown ``type`` names the registry and close matches."""

    def build_with_suggestions(cfg, registry, *args, **kwargs):
        obj_type = cfg.get('type') if isinstance(cfg, dict) else None
        if isinstance(obj_type, str):
            registry.import_from_location()
            if registry.get(obj_type) is None:
                key = obj_type.split('.')[-1]
                close = difflib.get_close_matches(key, _visible_names(registry), n=5, cutoff=0.5)
                hint = f' Did you mean: {", ".join(repr(c) for c in close)}?' if close else ''
                raise KeyError(
                    f"type={obj_type!r} is not registered in the '{registry.scope}::{registry.name}' "
                    f"registry (nor its parents).{hint} Register it with "
                    f"@fsdlite.registry.{variable}.register_module() or load its module through custom_imports.")
        return build(cfg, registry, *args, **kwargs)

    build_with_suggestions.__name__ = f'{build.__name__}_with_suggestions'
    return build_with_suggestions


def _child(name, parent, location, build=build_from_cfg, variable=None):
    variable = variable or next(k for k, v in globals().items() if v is parent).replace('MMENGINE_', '')
    return Registry(name, parent=parent, scope='fsdlite', locations=[f'fsdlite.{location}'],
                    build_func=_with_suggestions(build, variable))


RUNNERS = _child('runner', MMENGINE_RUNNERS, 'engine')
RUNNER_CONSTRUCTORS = _child('runner constructor', MMENGINE_RUNNER_CONSTRUCTORS, 'engine')
LOOPS = _child('loop', MMENGINE_LOOPS, 'engine')
HOOKS = _child('hook', MMENGINE_HOOKS, 'engine')
STRATEGIES = _child('strategy', MMENGINE_STRATEGIES, 'engine')
DATASETS = _child('dataset', MMENGINE_DATASETS, 'datasets')
DATA_SAMPLERS = _child('data sampler', MMENGINE_DATA_SAMPLERS, 'datasets')
TRANSFORMS = _child('transform', MMENGINE_TRANSFORMS, 'datasets')
MODELS = _child('model', MMENGINE_MODELS, 'models', build=build_model_from_cfg)
MODEL_WRAPPERS = _child('model_wrapper', MMENGINE_MODEL_WRAPPERS, 'models')
WEIGHT_INITIALIZERS = _child('weight initializer', MMENGINE_WEIGHT_INITIALIZERS, 'models')
OPTIMIZERS = _child('optimizer', MMENGINE_OPTIMIZERS, 'engine')
OPTIM_WRAPPERS = _child('optim_wrapper', MMENGINE_OPTIM_WRAPPERS, 'engine')
OPTIM_WRAPPER_CONSTRUCTORS = _child('optimizer wrapper constructor', MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS, 'engine')
PARAM_SCHEDULERS = _child('parameter scheduler', MMENGINE_PARAM_SCHEDULERS, 'engine')
METRICS = _child('metric', MMENGINE_METRICS, 'evaluation')
EVALUATOR = _child('evaluator', MMENGINE_EVALUATOR, 'evaluation')
TASK_UTILS = _child('task util', MMENGINE_TASK_UTILS, 'models')
VISUALIZERS = _child('visualizer', MMENGINE_VISUALIZERS, 'visualization')
VISBACKENDS = _child('vis_backend', MMENGINE_VISBACKENDS, 'visualization')
LOG_PROCESSORS = _child('log_processor', MMENGINE_LOG_PROCESSORS, 'engine')
INFERENCERS = _child('inferencer', MMENGINE_INFERENCERS, 'engine')
FUNCTIONS = _child('function', MMENGINE_FUNCTIONS, 'engine')

#: The deploy adapter of each model type (``cfg.model.type``), :class:`fsdlite.deploy.adapter.DeployAdapter`
#: subclasses. mmengine has no such root, so this one is a root of the fsdlite scope.
DEPLOY_ADAPTERS = _child('deploy adapter', None, 'deploy', variable='DEPLOY_ADAPTERS')
