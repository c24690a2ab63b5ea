"""Checks that an exported ONNX graph is deployable: standard ops, no data-dependent ops, static shapes.

The rules (DESIGN.md "Fixed shapes", reference/fsd.md §5.2): only operators of the default ONNX domain
(no custom domain, which ONNX Runtime and TensorRT cannot load without a plugin library), opset >= 18
(ScatterElements max/min), no operator whose output shape depends on the data (Unique, NonZero, ...) or
that hides control flow (Loop, If, Scan), and every graph input and output with a fixed shape.
"""
from collections import Counter
from typing import NamedTuple

MIN_OPSET = 18
STANDARD_DOMAINS = ('', 'ai.onnx')
#: operators whose output shape depends on input values, or control flow: none may appear in a deploy graph
DATA_DEPENDENT_OPS = ('Unique', 'NonZero', 'Compress', 'Loop', 'If', 'Scan', 'NonMaxSuppression', 'StringSplit',
                      'SequenceConstruct', 'SequenceInsert', 'SequenceAt', 'SplitToSequence', 'ConcatFromSequence',
                      'RandomNormal', 'RandomUniform', 'RandomNormalLike', 'RandomUniformLike', 'Multinomial',
                      'Bernoulli')


class DeployGraphError(RuntimeError):
    """The exported graph breaks a deploy rule (the message lists every problem)."""


class TensorSpec(NamedTuple):
    """Name, shape (ints; strings for symbolic dimensions; None when even the rank is unknown) and ONNX element
    type name of a graph input/output."""
    name: str
    shape: tuple
    dtype: str


class GraphSummary(NamedTuple):
    """What :func:`check_graph` found.

    ``opset`` default-domain opset; ``op_counts`` {op_type: count}; ``inputs`` / ``outputs`` lists of
    :class:`TensorSpec`; ``problems`` list of str (empty when deployable); ``num_nodes``.
    """
    opset: int
    op_counts: dict
    inputs: list
    outputs: list
    problems: list
    num_nodes: int

    @property
    def ok(self):
        """True when no problems were found."""
        return not self.problems


def _spec(value_info):
    import onnx
    t = value_info.type.tensor_type
    if not t.HasField('shape'):
        return TensorSpec(value_info.name, None, onnx.TensorProto.DataType.Name(t.elem_type).lower())
    dims = tuple(d.dim_value if d.HasField('dim_value') else (d.dim_param or '?') for d in t.shape.dim)
    return TensorSpec(value_info.name, dims, onnx.TensorProto.DataType.Name(t.elem_type).lower())


def _nodes(graph):
    """Every node of the graph, including those of subgraphs (If/Loop bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.g is not None and attr.g.node:
                yield from _nodes(attr.g)
            for sub in attr.graphs:
                yield from _nodes(sub)


def check_graph(model, min_opset=MIN_OPSET):
    """Inspect an ONNX model against the deploy rules (see the module docstring).

    Args:
        model (onnx.ModelProto | str | Path): the model or its file.
        min_opset (int): lowest accepted default-domain opset.
    Returns:
        GraphSummary (``problems`` empty when every rule holds).
    """
    import onnx
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    problems = []
    opset = max((o.version for o in model.opset_import if o.domain in STANDARD_DOMAINS), default=0)
    if opset < min_opset:
        problems.append(f'opset {opset} < {min_opset} (ScatterElements max/min need opset 18)')
    custom_imports = sorted(o.domain for o in model.opset_import if o.domain not in STANDARD_DOMAINS)
    if custom_imports:
        problems.append(f'custom opset domains imported: {custom_imports}')
    if len(model.functions):
        problems.append(f'{len(model.functions)} local functions '
                        f'({sorted({f.domain + "::" + f.name for f in model.functions})[:5]}); expected a flat graph')
    counts, custom, forbidden = Counter(), Counter(), Counter()
    for node in _nodes(model.graph):
        counts[node.op_type] += 1
        if node.domain not in STANDARD_DOMAINS:
            custom[f'{node.domain}::{node.op_type}'] += 1
        elif node.op_type in DATA_DEPENDENT_OPS:
            forbidden[node.op_type] += 1
    if custom:
        problems.append(f'operators outside the standard ONNX domain: {dict(custom)}')
    if forbidden:
        problems.append(f'data-dependent or control-flow operators: {dict(forbidden)}')
    inputs = [_spec(v) for v in model.graph.input]
    outputs = [_spec(v) for v in model.graph.output]
    for kind, specs in (('input', inputs), ('output', outputs)):
        for spec in specs:
            if spec.shape is None:
                problems.append(f'graph {kind} {spec.name!r} has no shape (unknown rank)')
            elif any(not isinstance(d, int) for d in spec.shape):
                problems.append(f'graph {kind} {spec.name!r} has a non-static shape {spec.shape}')
    return GraphSummary(opset, dict(counts.most_common()), inputs, outputs, problems, sum(counts.values()))


def require_deployable(model, min_opset=MIN_OPSET):
    """:func:`check_graph`, raising :class:`DeployGraphError` listing the problems; returns the summary."""
    summary = check_graph(model, min_opset)
    if summary.problems:
        raise DeployGraphError('the exported graph is not deployable:\n  - ' + '\n  - '.join(summary.problems))
    return summary


__all__ = ['MIN_OPSET', 'STANDARD_DOMAINS', 'DATA_DEPENDENT_OPS', 'DeployGraphError', 'TensorSpec', 'GraphSummary',
           'check_graph', 'require_deployable']
