"""The layering contract of fsdlite, checked on the source (AST; nothing is imported).

Every ``import`` statement counts, at module level or inside a function: a function-level import is as much a
dependency as a top-level one, it only runs later.

* (a) a package imports only packages of a lower rank (ranks in :data:`LAYERS`); ``fsdlite.ops`` (``ops/``)
  imports nothing of fsdlite; the top-level folders of scripts (``tools/``, ``benchmarks/``, ``deploy/``,
  ``examples/``) are never imported by the library;
* (b) no import cycle between the modules of ``fsdlite`` and ``fsdlite.ops``.

A failure prints the offending edges as ``importer:line -> imported``.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Rank of each package, low to high: a package may import packages of a lower rank only (same rank: no import).
LAYERS = {
    'fsdlite.ops': 0,
    'fsdlite.utils': 1, 'fsdlite.structures': 1,
    'fsdlite.registry': 2,
    'fsdlite.datasets': 3, 'fsdlite.models': 3, 'fsdlite.visualization': 3,
    'fsdlite.evaluation': 4, 'fsdlite.engine': 4,
    'fsdlite.slim': 5, 'fsdlite.deploy': 5, 'fsdlite.apis': 5,
}
#: Folders of scripts beside the package: never imported by it.
SCRIPT_FOLDERS = ('tools', 'benchmarks', 'deploy', 'examples')


def source_modules():
    """``{module name: path}`` of every module of fsdlite and of ``ops/`` (installed as ``fsdlite.ops``)."""
    modules = {}
    for top, name in ((ROOT / 'fsdlite', 'fsdlite'), (ROOT / 'ops', 'fsdlite.ops')):
        for path in sorted(top.rglob('*.py')):
            parts = list(path.relative_to(top).with_suffix('').parts)
            if parts[-1] == '__init__':
                parts.pop()
            modules['.'.join([name, *parts])] = path
    return modules


def _is_package(path):
    return path.name == '__init__.py'


def _resolve(importer, path, node):
    """Absolute names a statement imports (``from a import b`` gives ``a.b`` and ``a``; the caller keeps the
    longest name that is a module)."""
    if isinstance(node, ast.Import):
        return [[alias.name] for alias in node.names]
    base = node.module or ''
    if node.level:
        package = importer.split('.') if _is_package(path) else importer.split('.')[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = '.'.join(package + ([base] if base else []))
    return [[f'{base}.{alias.name}', base] for alias in node.names]


def import_edges(modules=None):
    """``[(importer, imported, line)]``: every import of a module of ``modules`` (the most specific module named),
    plus imports of the script folders as ``(importer, '<tools>', line)``."""
    modules = modules or source_modules()
    edges = []
    for importer, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for candidates in _resolve(importer, path, node):
                top = candidates[-1].split('.')[0]
                if top in SCRIPT_FOLDERS:
                    edges.append((importer, f'<{top}>', node.lineno))
                    continue
                target = next((c for c in candidates if c in modules), None)
                if target is not None and target != importer:
                    edges.append((importer, target, node.lineno))
    return list(dict.fromkeys(edges))


def layer_of(module):
    """The package of :data:`LAYERS` that holds ``module`` (None for ``fsdlite`` itself)."""
    return next((p for p in sorted(LAYERS, key=len, reverse=True) if module == p or module.startswith(p + '.')),
                None)


def layering_violations(edges):
    """Edges that go to a higher or equal rank (other package), or out of the package into a script folder."""
    bad = []
    for importer, imported, line in edges:
        source, target = layer_of(importer), layer_of(imported)
        if imported.startswith('<'):
            bad.append((importer, imported, line, 'imports a script folder'))
        elif source == 'fsdlite.ops' and target != source:
            bad.append((importer, imported, line, 'fsdlite.ops imports nothing of fsdlite'))
        elif source is None or target is None or source == target:
            continue
        elif LAYERS[target] > LAYERS[source]:
            bad.append((importer, imported, line, f'rank {LAYERS[source]} imports rank {LAYERS[target]}'))
        elif LAYERS[target] == LAYERS[source]:
            bad.append((importer, imported, line, f'same rank {LAYERS[source]}, other package'))
    return bad


def import_cycles(edges):
    """Strongly connected components (more than one module) of the import graph, each a sorted list."""
    graph = {}
    for importer, imported, _ in edges:
        graph.setdefault(importer, set()).add(imported)
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(start):  # iterative Tarjan
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _format_edges(edges):
    return '\n'.join(f'  {a}:{line} -> {b}' + (f'  ({why})' if why else '') for a, b, line, why in edges)


def test_packages_import_only_lower_layers():
    bad = layering_violations(import_edges())
    assert not bad, 'imports against the layering (importer:line -> imported):\n' + _format_edges(bad)


def test_no_import_cycles():
    edges = import_edges()
    cycles = import_cycles(edges)
    report = []
    for component in cycles:
        members = set(component)
        report.append(f'cycle of {len(component)} modules:')
        report.append(_format_edges(sorted((a, b, line, '') for a, b, line in edges if a in members and b in members)))
    assert not cycles, 'import cycles (importer:line -> imported):\n' + '\n'.join(report)


def test_every_module_has_a_layer():
    unranked = sorted(m for m in source_modules() if m != 'fsdlite' and layer_of(m) is None)
    assert not unranked, f'modules outside every layer of LAYERS (give their package a rank): {unranked}'


# ------------------------------------------------------------------------------------ the checker itself
def _write(tmp_path, files):
    modules = {}
    for name, text in files.items():
        parts = name.split('.')
        path = tmp_path.joinpath(*parts[:-1], parts[-1] + '.py') if not name.endswith('__init__') else \
            tmp_path.joinpath(*parts[:-1], '__init__.py')
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        modules[name.removesuffix('.__init__')] = path
    return modules


def test_checker_finds_cycles_through_function_level_imports(tmp_path):
    modules = _write(tmp_path, {
        'fsdlite.__init__': '',
        'fsdlite.engine.__init__': '',
        'fsdlite.engine.a': 'from .b import f\n',
        'fsdlite.engine.b': 'def f():\n    from . import a\n',
        'fsdlite.engine.c': 'from fsdlite.engine import a\n',
    })
    edges = import_edges(modules)
    assert ('fsdlite.engine.b', 'fsdlite.engine.a', 2) in edges
    assert import_cycles(edges) == [['fsdlite.engine.a', 'fsdlite.engine.b']]


def test_checker_flags_upward_same_rank_and_script_imports(tmp_path):
    modules = _write(tmp_path, {
        'fsdlite.__init__': '',
        'fsdlite.models.__init__': 'from ..engine import x\nfrom fsdlite.datasets import y\nimport tools.train\n',
        'fsdlite.engine.__init__': '',
        'fsdlite.engine.x': 'from ..models import z\n',
        'fsdlite.datasets.__init__': '',
        'fsdlite.datasets.y': '',
        'fsdlite.ops.__init__': 'import fsdlite\n',
        'fsdlite.ops.k': 'from . import _c\nfrom fsdlite.datasets import y\n',
        'fsdlite.ops._c': 'import deploy.export_onnx\n',
    })
    bad = {(a, b) for a, b, _, _ in layering_violations(import_edges(modules))}
    assert bad == {('fsdlite.models', 'fsdlite.engine.x'), ('fsdlite.models', 'fsdlite.datasets.y'),
                   ('fsdlite.models', '<tools>'), ('fsdlite.ops', 'fsdlite'), ('fsdlite.ops.k', 'fsdlite.datasets.y'),
                   ('fsdlite.ops._c', '<deploy>')}


@pytest.mark.parametrize('module, layer', [('fsdlite.ops.scatter._core', 'fsdlite.ops'),
                                           ('fsdlite.registry', 'fsdlite.registry'),
                                           ('fsdlite.models.fsd.sir', 'fsdlite.models')])
def test_layer_of(module, layer):
    assert layer_of(module) == layer


def test_scripts_do_not_edit_sys_path():
    """Scripts import the installed package (and benchmarks/ helpers from their own folder): no sys.path edits."""
    edits = [f'{path.relative_to(ROOT)}:{number}' for folder in SCRIPT_FOLDERS
             for path in sorted((ROOT / folder).rglob('*.py'))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if 'sys.path.insert' in line or 'sys.path.append' in line]
    assert not edits, f'scripts that edit sys.path: {edits}'
