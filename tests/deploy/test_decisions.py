"""Verification explains differences by decisions that flipped on near-ties (fsdlite.deploy.decisions), and still
fails a real mismatch; end to end: a tiny FSD-lite whose score_thr sits between ONNX Runtime's and PyTorch's score
of one box is verified (what deploy/verify_onnx.py exits 0 on) with the flip printed."""
import torch

from fsdlite.deploy import export_model
from fsdlite.deploy.adapter import PreOpsResult
from fsdlite.deploy.compare import OutputDiff
from fsdlite.deploy.decisions import (NmsOverlap, RankCutoff, ScoreThreshold, SelectionDecision, detections_of,
                                      explain_detections)
from fsdlite.deploy.runtime import DeployedModel
from fsdlite.deploy.verify import FrameCheck, format_checks, reference_adapter, verify_deploy
from fsdlite.ops import boxes_iou_bev

BOX = [10.0, 2.0, -1.0, 4.0, 1.8, 1.5, 0.3]
CHECKS = (ScoreThreshold(0.1), NmsOverlap(0.25), RankCutoff(100, 'post_max'))


def dets(side, rows):
    """Detections of ``(x, score, label)`` rows: the same box shifted along x."""
    boxes = torch.tensor([[x] + BOX[1:] for x, _, _ in rows])
    scores = torch.tensor([s for _, s, _ in rows])
    labels = torch.tensor([c for _, _, c in rows])
    return detections_of(boxes, scores, labels, torch.zeros(len(rows), dtype=torch.long), side)


def test_a_box_whose_score_sits_on_score_thr_is_explained_one_far_from_it_is_not():
    common = [(0.0, 0.9, 0), (20.0, 0.5, 1)]
    reference = dets('PyTorch', common)
    near = explain_detections(CHECKS, dets('deployed', common + [(40.0, 0.10000003, 0)]), reference, 1e-4)
    assert near.ok and len(near.flips) == 1
    assert near.flips[0].decision == 'score_thr' and near.flips[0].margin < 1e-7
    assert 'score 0.10000003 vs score_thr 0.1 (|margin| 3.1e-08 <= tol 1e-05)' in '\n'.join(near.lines())

    far = explain_detections(CHECKS, dets('deployed', common + [(40.0, 0.35, 0)]), reference, 1e-4)
    assert not far.ok and not far.flips
    assert 'deployed box (sample 0, label 0) at x 40.00' in far.unexplained[0]
    assert 'closest decision' in far.unexplained[0]
    # a matched box whose score differs beyond atol is a difference on both sides, not explained either
    moved = explain_detections(CHECKS, dets('deployed', [(0.0, 0.8, 0), (20.0, 0.5, 1)]), reference, 1e-4)
    assert not moved.ok and len(moved.unexplained) == 2


def bev_iou(shift):
    """BEV IoU of BOX and BOX shifted by ``shift`` along x."""
    a, b = torch.tensor([BOX]), torch.tensor([[BOX[0] + shift] + BOX[1:]])
    return float(boxes_iou_bev(a, b))


def test_nms_near_tie_iou_explains_a_box_kept_on_one_side():
    low, high = 0.0, 4.0  # the IoU falls with the shift: bisect for a second box at IoU 0.25 with the first
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if bev_iou(mid) > 0.25 else (low, mid)
    assert abs(bev_iou(high) - 0.25) < 1e-6
    reference = dets('PyTorch', [(10.0, 0.9, 0)])
    found = explain_detections(CHECKS, dets('deployed', [(10.0, 0.9, 0), (10.0 + high, 0.8, 0)]), reference, 1e-4)
    assert found.ok and found.flips[0].decision == 'nms_iou_thr', found
    wide = explain_detections(CHECKS, dets('deployed', [(10.0, 0.9, 0), (11.0 + high, 0.8, 0)]), reference, 1e-4)
    assert not wide.ok


def test_a_foreground_point_at_its_threshold_covers_the_outputs_downstream():
    seg = torch.tensor([[0.0], [2.0], [-3.0], [1.0]])  # logits; class 0 threshold 0.5 (logit 0)
    pre = PreOpsResult({'batch': torch.zeros(4, dtype=torch.long)}, dict(num_points=4), {})
    decision = SelectionDecision('foreground', lambda out, pre: out['seg'].sigmoid(), lambda pre: pre.inputs['batch'],
                                 [0.5], [3], ('cls_logits', 'detections'))
    flips = decision.flips({'seg': seg + torch.tensor([[2e-7], [0], [0], [0]])}, {'seg': seg}, pre)
    assert len(flips) == 1 and flips[0].explained and 'item 0' in flips[0].item
    # budget of 1: the second best point flips in at a near-equal score, the cut-off explains it
    close = torch.tensor([[2.0], [2.0 - 1e-6], [-3.0], [1.0]])
    budget = SelectionDecision('foreground', decision.scores, decision.groups, [0.5], [1], ())
    swapped = budget.flips({'seg': close + torch.tensor([[0], [2e-6], [0], [0]])}, {'seg': close},
                           pre)
    assert len(swapped) == 2 and all(f.explained for f in swapped), swapped
    assert 'budget cut-off' in swapped[0].decision
    far = decision.flips({'seg': seg + torch.tensor([[0], [0], [3.5], [0]])}, {'seg': seg}, pre)
    assert len(far) == 1 and not far[0].explained


def test_frame_check_passes_explained_differences_and_prints_them():
    class Differ:
        same, detail = False, 'boxes deployed/PyTorch per sample [3/2]'

    count = OutputDiff('num_boxes', 1, 1.0, 0.5, 0)
    near = explain_detections(CHECKS, dets('deployed', [(0.0, 0.9, 0), (40.0, 0.10000003, 0)]),
                              dets('PyTorch', [(0.0, 0.9, 0)]), 1e-4)
    check = FrameCheck('kitti', 'frame', [count], Differ(), {}, {'graph': 0.1}, explanation=near,
                       explained=frozenset({'num_boxes', 'detections'}))
    assert check.ok
    text = format_checks([check])
    assert 'yes (a decision flipped on a near-tie, below)' in text
    assert 'no, explained by decisions that flipped on near-ties (below)' in text
    assert '1 flipped at score_thr' in text and text.endswith('1 inputs: 1 verified, 0 exceeded a bound '
                                                                '(reported), 0 failed')
    assert not check._replace(explained=frozenset({'num_boxes'})).ok        # final predictions unexplained
    assert not check._replace(explained=frozenset({'detections'})).ok       # num_boxes unexplained


def box_score_gap(out_dir, frame):
    """The (lower, higher) of one box's ONNX Runtime and PyTorch graph scores that differ (None if all equal)."""
    deployed = DeployedModel(out_dir)
    adapter, _ = reference_adapter(deployed.directory, deployed.info, frames=[frame])
    out = deployed.run(frame.data)
    torch_out = adapter.run_torch_graph(out.pre.inputs)
    n = int(torch_out['num_boxes'])
    for i in range(n):
        dist = (out.outputs['boxes'][i][None] - torch_out['boxes'][:n]).abs().amax(1)
        dist[torch_out['labels'][:n] != out.outputs['labels'][i]] = float('inf')
        a, b = float(out.outputs['scores'][i]), float(torch_out['scores'][int(dist.argmin())])
        if a != b:
            return min(a, b), max(a, b)
    return None


def test_a_score_on_score_thr_is_verified_end_to_end(tiny, kitti_frame, tmp_path, capsys):
    first = export_model(tiny.configs['fsd'], 'random', tmp_path / 'all', cfg_options=tiny.options['fsd'],
                         frames=[kitti_frame])
    gap = box_score_gap(first.out_dir, kitti_frame)
    assert gap is not None, 'every box score equal in ONNX Runtime and PyTorch: no threshold to put between them'
    options = dict(tiny.options['fsd'], **{'model.bbox_head.test_cfg.score_thr': gap[0]})  # score > thr: one side
    result = export_model(tiny.configs['fsd'], 'random', tmp_path / 'thr', cfg_options=options, frames=[kitti_frame],
                          bounds=first.info['bounds'])
    flipped = [d for d in result.diffs if d.max_abs > (d.tolerance or 0)]
    assert flipped and all(d.explained and 'score_thr' in d.explained for d in flipped), result.diffs
    checks = verify_deploy(result.out_dir, frames=[kitti_frame])
    text = format_checks(checks)
    assert all(c.ok for c in checks), text  # deploy/verify_onnx.py's exit status 0
    assert 'flipped at score_thr' in text and 'all explained' in text and 'UNEXPLAINED' not in text
    assert text.endswith('1 inputs: 1 verified, 0 exceeded a bound (reported), 0 failed')
