"""Channel tracing on small hand-written modules: which channels end up coupled, frozen or free."""
import pytest
import torch
from torch import nn

from fsdlite.slim.graph import ChannelGraph
from fsdlite.slim.trace import LABEL_ATTR, TraceError, trace_channels


@pytest.fixture
def graph_of(slim_kit):
    """``(body, x) -> (ChannelGraph, tracer)`` of ``body`` traced on input ``x``."""
    def trace(body, x):
        tracer = trace_channels(slim_kit.Wrap(body), dict(inputs=x))
        return ChannelGraph.from_tracer(tracer), tracer
    return trace


def units(graph, leaf, role):
    return graph.dim_of(f'body.{leaf}', role).units


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Linear(3, 6), nn.Linear(3, 6), nn.Linear(6, 2)

    def forward(self, x):
        return self.head(torch.relu(self.a(x)) + self.b(x))


def test_residual_sum_couples_channels_position_by_position(graph_of):
    g, _ = graph_of(Residual(), torch.randn(5, 3))
    assert units(g, 'a', 'out') == units(g, 'b', 'out') == units(g, 'head', 'in')
    assert len(set(units(g, 'a', 'out'))) == 6                  # six independent units
    assert set(units(g, 'head', 'out')) <= g.frozen              # model outputs keep their width
    assert not set(units(g, 'a', 'out')) & g.frozen
    assert units(g, 'a', 'in') == [None] * 3                     # raw input columns are constants


class CatGather(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Linear(2, 3), nn.Linear(2, 4), nn.Linear(10, 1)

    def forward(self, x):
        a = self.a(x)
        pooled = a.max(0, keepdim=True).values.expand(x.shape[0], -1)       # reduction over rows: per column
        return self.head(torch.cat([a, self.b(x)[torch.tensor([1, 0, 2, 3])], pooled], 1))


def test_concat_and_row_ops_keep_each_channel(graph_of):
    g, _ = graph_of(CatGather(), torch.randn(4, 2))
    ua, ub = units(g, 'a', 'out'), units(g, 'b', 'out')
    assert units(g, 'head', 'in') == ua + ub + ua              # the pooled copy belongs to a's units
    assert len(set(ua + ub)) == 7


class GroupedSum(nn.Module):
    """The sparse UNet's shortcut: (N, 8) -> view(N, 4, 2).sum(2) added to a 4-channel layer."""

    def __init__(self):
        super().__init__()
        self.wide, self.narrow, self.head = nn.Linear(3, 8), nn.Linear(3, 4), nn.Linear(4, 1)

    def forward(self, x):
        wide = self.wide(x)
        return self.head(self.narrow(x) + wide.view(-1, 4, 2).sum(2))


def test_grouped_reshape_sum_ties_channel_pairs_to_one_unit(graph_of):
    g, _ = graph_of(GroupedSum(), torch.randn(5, 3))
    wide, narrow = units(g, 'wide', 'out'), units(g, 'narrow', 'out')
    assert [wide[2 * j] for j in range(4)] == [wide[2 * j + 1] for j in range(4)] == narrow
    assert len(set(narrow)) == 4


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.out = nn.Linear(4, 3), nn.Linear(4, 3), nn.Linear(4, 5), nn.Linear(5, 2)

    def forward(self, x):
        attn = torch.softmax(self.q(x) @ self.k(x).t(), -1)
        score = self.q(x).norm(dim=1, keepdim=True)             # full reduction over channels: no coupling
        return self.out(attn @ self.v(x) * score)


def test_contraction_couples_query_key_and_keeps_value_channels(graph_of):
    g, _ = graph_of(Attention(), torch.randn(6, 4))
    assert units(g, 'q', 'out') == units(g, 'k', 'out')
    assert len(set(units(g, 'q', 'out'))) == 3
    assert units(g, 'v', 'out') == units(g, 'out', 'in') and len(set(units(g, 'v', 'out'))) == 5
    assert not set(units(g, 'q', 'out')) & g.frozen            # consumed by the product: prunable


class Depthwise(nn.Module):
    slim_spec = dict(kind='params', params={'scale': 0})

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x * self.scale


class WithDepthwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.dw, self.head = nn.Linear(2, 4), Depthwise(), nn.Linear(4, 1)
        self.fixed = nn.Parameter(torch.ones(4))      # no spec: its channels are frozen

    def forward(self, x):
        return self.head(self.dw(self.a(x))) + self.fixed.sum()


def test_declared_parameter_dims_join_the_channels_they_scale(graph_of):
    g, tracer = graph_of(WithDepthwise(), torch.randn(3, 2))
    assert g.dim_of('body.dw', 'param').units == units(g, 'a', 'out')
    assert not set(units(g, 'a', 'out')) & g.frozen
    model_params = list(tracer.leaves['body.dw'].module.parameters())
    assert all(LABEL_ATTR not in p.__dict__ for p in model_params)   # shadows removed after the trace


class FrozenByParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.head = nn.Linear(2, 4), nn.Linear(4, 1)
        self.gain = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return self.head(self.a(x) * self.gain)


def test_parameter_without_spec_freezes_the_channels_it_touches(graph_of):
    g, _ = graph_of(FrozenByParam(), torch.randn(3, 2))
    assert set(units(g, 'a', 'out')) <= g.frozen


@torch.library.custom_op('slimtest::mix', mutates_args=())
def _mix(x: torch.Tensor) -> torch.Tensor:
    return x.flip(1).clone()


class UnknownOp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.head = nn.Linear(2, 4), nn.Linear(4, 1)

    def forward(self, x):
        return self.head(_mix(self.a(x)))


def test_op_without_rule_freezes_its_channels_and_is_reported(graph_of):
    g, _ = graph_of(UnknownOp(), torch.randn(3, 2))
    assert set(units(g, 'a', 'out')) <= g.frozen
    assert g.conservative_ops == {'slimtest::mix': 1}


def test_segment_reduce_keeps_columns(graph_of):
    from fsdlite.ops import segment_reduce

    class Seg(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.head = nn.Linear(2, 3), nn.Linear(6, 1)

        def forward(self, x):
            h = self.a(x)
            pooled = segment_reduce(h, torch.tensor([0, 1, 1, 0]), 2, 'max')
            return self.head(torch.cat([h, pooled[torch.tensor([0, 1, 1, 0])]], 1))

    g, _ = graph_of(Seg(), torch.randn(4, 2))
    assert units(g, 'head', 'in') == units(g, 'a', 'out') * 2


class Starved(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(2, 3), nn.Linear(3, 1)

    def forward(self, x):
        h = self.a(x)
        return self.b(h[h[:, 0] > 1e9])          # no row passes: b never sees data


def test_layer_reached_without_rows_is_a_clear_error(graph_of):
    with pytest.raises(TraceError, match=r"reached layers \['body.b'\] with no rows"):
        graph_of(Starved(), torch.randn(4, 2))
