"""Import every module of a package, so registry ``locations`` see all registered components."""
import importlib
import pkgutil


def import_submodules(package_name, package_path):
    """Recursively import the submodules of a package (names starting with '_' are skipped).

    Args:
        package_name (str): dotted name of the package (``__name__`` in its ``__init__``).
        package_path (list[str]): its ``__path__``.
    Returns:
        list[str]: the imported module names.
    """
    imported = []
    for info in pkgutil.walk_packages(package_path, prefix=package_name + '.'):
        if info.name.rsplit('.', 1)[-1].startswith('_'):
            continue
        importlib.import_module(info.name)
        imported.append(info.name)
    return imported
