"""Least-squares compensation of dropped input channels (calibrated weight transfer)."""
import pytest
import torch
from torch import nn

from fsdlite.slim.api import write_slim
from fsdlite.slim.compensate import InputMoments, compensate_state, input_moments
from fsdlite.slim.errors import SlimError
from fsdlite.slim.graph import ChannelGraph
from fsdlite.slim.sample import calibration_batches
from fsdlite.slim.trace import trace_channels
from fsdlite.slim.transfer import kept_indices, slice_state_dict


def _two_layer(hidden_relation):
    """Linear(5, 8) -> Linear(8, 3) whose hidden channels 4..7 are ``hidden_relation`` of channels 0..3."""
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(5, 8), nn.Linear(8, 3))
    with torch.no_grad():
        scale, shift = hidden_relation
        body[0].weight[4:] = scale * body[0].weight[:4]
        body[0].bias[4:] = scale * body[0].bias[:4] + shift
    return body


def _calibrated(slim_kit, body, leaf, drop_cols):
    """Trace ``body`` (float64), drop the hidden columns ``drop_cols`` of ``leaf``'s input and measure the moments
    on 300 random inputs. Returns (inputs, graph, kept indices, state, moments, the hidden 'in' dim)."""
    x = torch.randn(300, 5, dtype=torch.float64)
    model = slim_kit.Wrap(body.double())
    graph = ChannelGraph.from_tracer(trace_channels(model, dict(inputs=x[:4])))
    hidden = graph.dim_of(leaf, 'in')
    indices = kept_indices(graph, set(graph.members) - {hidden.units[c] for c in drop_cols})
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return x, graph, indices, state, input_moments(model, graph.dims, [dict(inputs=x)]), hidden


def _slim_two_layer(slim_kit, body, keep_hidden, ridge):
    """(sliced state without compensation, with compensation, the calibration inputs, the report)."""
    x, graph, indices, state, moments, hidden = _calibrated(
        slim_kit, body, 'body.1', [c for c in range(8) if c not in keep_hidden])
    assert indices[hidden.id].tolist() == sorted(keep_hidden)
    compensated, report = compensate_state(state, graph, indices, moments, ridge)
    assert [r[0] for r in report] == ['body.1']
    return slice_state_dict(state, graph, indices), slice_state_dict(compensated, graph, indices), x, report


def _run_slim(state, x):
    small = nn.Sequential(nn.Linear(5, 4), nn.Linear(4, 3)).double()
    small.load_state_dict({k.removeprefix('body.'): v for k, v in state.items()}, strict=True)
    with torch.no_grad():
        return small(x)


@pytest.mark.parametrize('relation', [(2.0, 0.0), (-0.5, 0.3)])
def test_exactly_predictable_dropped_channels_are_recovered(relation, slim_kit):
    """Dropped hidden channels that are an affine function of kept ones: the compensated slim layer reproduces
    the original output (the bias takes the constant part); plain slicing does not."""
    body = _two_layer(relation)
    plain, comp, x, report = _slim_two_layer(slim_kit, body, keep_hidden=[0, 1, 2, 3], ridge=1e-12)
    with torch.no_grad():
        ref = body(x)
    assert (_run_slim(plain, x) - ref).abs().max() > 1e-2
    assert (_run_slim(comp, x) - ref).abs().max() < 1e-6
    assert report[0][3] < 1e-9                                         # nothing left unexplained


def test_compensation_never_increases_the_layer_error(slim_kit):
    """Unrelated channels: least squares over the kept columns is at most as wrong as slicing, on the
    calibration data; the ridge only shrinks the correction."""
    torch.manual_seed(1)
    body = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    x, graph, indices, state, moments, hidden = _calibrated(slim_kit, body, 'body.2', (1, 4, 6))
    with torch.no_grad():
        h = body[1](body[0](x))
        ref = body[2](h)
    kept = indices[hidden.id]
    errors = []
    for ridge in (None, 1e-6, 1e-2, 10.0):
        new = state if ridge is None else compensate_state(state, graph, indices, moments, ridge)[0]
        w, b = new['body.2.weight'][:, kept], new['body.2.bias']
        errors.append(float(((h[:, kept] @ w.T + b - ref) ** 2).mean()))
    plain, tiny, default, large = errors
    assert tiny <= default <= large <= plain
    assert tiny < 0.9 * plain


def test_input_moments_accumulate_mean_and_covariance():
    m = InputMoments(3)
    x = torch.randn(50, 3)
    m.add(x[:20])
    m.add(x[20:])
    mean, cov = m.mean_cov()
    assert torch.allclose(mean, x.double().mean(0))
    assert torch.allclose(cov, torch.cov(x.double().T, correction=0))


@pytest.mark.parametrize('name', ['fsd', 'voxelnet', 'kpcnn', 'fsdv2'])
def test_calibrated_slim_is_closer_to_the_original(name, families, slim_kit, tmp_path):
    """Real families, calibrated on their own sample: compensation lowers the slim model's output error
    against the original's, and an identity request stays exact."""
    from fsdlite.slim.api import prepare

    torch.manual_seed(0)
    path, opts = families[name]
    p = prepare(path, None, opts, split='val', calibration=2, calibration_split='val')
    assert p.analysis.moments
    comp = write_slim(p, slim_kit.Request(width=0.5), tmp_path / 'comp')
    assert comp.result.compensation and all(0 <= r[3] <= 1 + 1e-9 for r in comp.result.compensation)
    res = comp.result
    lossy = {d.leaf for d in res.graph.dims if d.role == 'in' and res.indices[d.id].numel() < d.size}
    assert {r[0] for r in res.compensation} == lossy                  # every layer that loses inputs is compensated
    assert not any('without compensation' in n for n in res.notes)
    moments = p.analysis.moments

    def slim_observing(observed, out):
        p.analysis.moments = {k: v for k, v in moments.items() if k in observed}
        try:
            return write_slim(p, slim_kit.Request(width=0.5), tmp_path / out)
        finally:
            p.analysis.moments = moments

    plain = slim_observing((), 'plain')
    assert not plain.result.compensation
    victim = sorted(lossy)[0]                                          # a lossy layer the calibration never saw
    notes = slim_observing(set(moments) - {victim}, 'partial').result.notes
    assert any('without compensation' in n and repr(victim) in n for n in notes)
    with torch.no_grad():
        full = p.model(**p.data, mode='tensor')
        outs = [m(**p.data, mode='tensor') for m in (comp.slim_model, plain.slim_model)]
    if isinstance(full, dict):
        keys = [k for k, v in outs[0].items() if isinstance(v, torch.Tensor) and isinstance(full[k], torch.Tensor)
                and v.shape == full[k].shape and v.is_floating_point()]
        assert keys
        full, outs = [full[k] for k in keys], [[o[k] for k in keys] for o in outs]
    err_comp, err_plain = (slim_kit.max_abs_diff(full, o) for o in outs)
    assert err_comp < err_plain
    same = write_slim(p, slim_kit.Request(width=1.0), tmp_path / 'same')
    assert same.identical == 0 and not same.result.compensation


def test_calibration_count_is_checked(families):
    from fsdlite.engine.tool_setup import load_config
    from fsdlite.registry import MODELS

    path, opts = families['kpcnn']
    cfg = load_config(path, opts)
    model = MODELS.build(cfg.model)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(SlimError, match='--calibration-items'):
            calibration_batches(cfg, model, bad, 'val')
    batches, items = calibration_batches(cfg, model, 99, 'val', batch_size=1)
    assert items == 2 and len(list(batches)) == 2                      # clipped to the dataset, and said so


def test_compensation_ridge_must_be_positive():
    with pytest.raises(SlimError, match='ridge'):
        compensate_state({}, None, {}, {}, ridge=0.0)
