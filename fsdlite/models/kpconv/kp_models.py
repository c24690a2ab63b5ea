"""KPCNN (shape classification) and KPFCNN (point segmentation), mmengine BaseModels.

Both take a :class:`~fsdlite.models.kpconv.backbones.KPEncoder` config; its pyramid settings
(``first_subsampling_dl``, ``conv_radius``, number of levels) are shared with the
:class:`~fsdlite.models.kpconv.data_preprocessor.KPDataPreprocessor` so a config states them once.
Deformable layers add ``loss_deform = deform_fitting_power * (2 * fitting + repulsion)``; the loss
dict also logs the batch's truncated neighbourhoods (``truncated_neighbors``, not a loss).
"""
import copy

import torch
import torch.nn.functional as F
from mmengine.model import BaseModel

from fsdlite.registry import MODELS
from fsdlite.structures import Det3DDataSample, PointData

from .._modes import dispatch_forward
from ..layers.builder import build_module
from ..layers.mlp import build_mlp
from .blocks import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG, GlobalAverageBlock


class _KPModel(BaseModel):
    """Shared construction: preprocessor defaults from the backbone, deformable regularisers, modes."""

    def __init__(self, backbone, data_preprocessor=None, deform_fitting_power=1.0, init_cfg=None,
                 preprocessor_defaults=None):
        backbone = copy.deepcopy(dict(backbone))
        if data_preprocessor is not None:
            shared = dict(first_subsampling_dl=backbone.get('first_subsampling_dl'),
                          conv_radius=backbone.get('conv_radius', 2.5), num_levels=len(backbone.get('channels', ())),
                          **(preprocessor_defaults or {}))
            data_preprocessor = build_module(data_preprocessor, **{k: v for k, v in shared.items() if v is not None})
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.backbone = build_module(backbone)
        self.deform_fitting_power = deform_fitting_power

    def forward(self, inputs, data_samples=None, mode='tensor'):
        """``inputs``: a KPPyramid. 'loss' -> dict of losses; 'predict' -> data samples with predictions;
        'tensor' -> logits."""
        return dispatch_forward(self, inputs, data_samples, mode, self.logits)

    def extra_losses(self, pyramid):
        """Deformable-kernel regularisers of the last forward, plus truncation statistics (logged only)."""
        out = dict(truncated_neighbors=torch.tensor(float(sum(pyramid.truncated))))
        regs = [m.regularizers for m in self.modules() if getattr(m, 'regularizers', None)]
        if regs:
            fit = sum(r['fitting'] for r in regs)
            rep = sum(r['repulsion'] for r in regs)
            out['loss_deform'] = self.deform_fitting_power * (2 * fit + rep)
        return out


@MODELS.register_module()
class KPCNN(_KPModel):
    """Shape classifier: KPEncoder -> global average -> MLP head.

    Args:
        num_classes (int): number of shape classes.
        backbone (dict): KPEncoder config.
        head_channels (Sequence[int]): hidden widths of the head (Linear + norm + LeakyReLU each).
        data_preprocessor (dict): KPDataPreprocessor config (pyramid settings default to the backbone's).
        norm_cfg (dict): head norm (PyTorch BN momentum).
        label_smoothing (float): cross-entropy label smoothing.
        deform_fitting_power (float): weight of the deformable regularisers.
    Data samples carry ``gt_label`` (int); predictions set ``pred_label`` and ``pred_scores`` (num_classes,).
    """

    def __init__(self, num_classes, backbone, head_channels=(256,), data_preprocessor=None, norm_cfg=DEFAULT_NORM_CFG,
                 label_smoothing=0.0, deform_fitting_power=1.0, init_cfg=None):
        super().__init__(backbone, data_preprocessor, deform_fitting_power, init_cfg)
        self.num_classes = num_classes
        self.pool = GlobalAverageBlock()
        self.head = build_mlp(self.backbone.out_channels, head_channels, norm_cfg, DEFAULT_ACT_CFG,
                              out_channels=num_classes)
        self.label_smoothing = label_smoothing

    def logits(self, pyramid):
        """(B, num_classes) class logits."""
        feats = self.backbone(pyramid)
        return self.head(self.pool(feats[-1], pyramid, len(feats) - 1))

    def loss(self, pyramid, data_samples):
        """``loss_cls`` (cross-entropy), ``acc`` and :meth:`extra_losses` of a batch with ``gt_label`` samples."""
        if data_samples is None:
            raise ValueError("KPCNN: mode='loss' needs data_samples with gt_label")
        labels = torch.stack([torch.as_tensor(s.gt_label).long().reshape(()) for s in data_samples])
        logits = self.logits(pyramid)
        labels = labels.to(logits.device)
        losses = dict(loss_cls=F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing),
                      acc=(logits.argmax(1) == labels).float().mean().detach())
        losses.update(self.extra_losses(pyramid))
        return losses

    def predict(self, pyramid, data_samples=None):
        """Set ``pred_scores`` (num_classes,) (softmax) and ``pred_label`` on each sample (new ones if None)."""
        scores = torch.softmax(self.logits(pyramid), 1)
        if data_samples is None:
            data_samples = [Det3DDataSample() for _ in range(pyramid.batch_size)]
        for sample, score in zip(data_samples, scores):
            sample.pred_scores = score
            sample.pred_label = score.argmax()
        return data_samples


@MODELS.register_module()
class KPFCNN(_KPModel):
    """Point segmenter: KPEncoder -> KPDecoder -> per-point MLP head, predictions on every input point.

    Args:
        num_classes (int): C (labels 0..C-1; ``ignore_index`` points are skipped by the loss).
        backbone (dict): KPEncoder config.
        decoder (dict, optional): decoder config (default KPDecoder over the backbone widths).
        head_channels (Sequence[int]): hidden widths of the head.
        class_weight (Sequence[float], optional): cross-entropy class weights.
        ignore_index (int): label excluded from the loss.
    Data samples carry ``gt_pts_seg.pts_semantic_mask`` (N_i,); predictions set ``pred_pts_seg``
    (``pts_semantic_mask`` (N_i,) and ``pts_scores`` (N_i, C)), projected from level 0 to every input point.
    """

    def __init__(self, num_classes, backbone, decoder=None, head_channels=(), data_preprocessor=None,
                 norm_cfg=DEFAULT_NORM_CFG, class_weight=None, ignore_index=-1, deform_fitting_power=1.0,
                 init_cfg=None):
        super().__init__(backbone, data_preprocessor, deform_fitting_power, init_cfg,
                         preprocessor_defaults=dict(with_labels=True))
        self.num_classes, self.ignore_index = num_classes, ignore_index
        self.decoder = build_module(decoder or dict(type='KPDecoder'), channels=self.backbone.channels)
        self.head = build_mlp(self.decoder.out_channels, head_channels, norm_cfg, DEFAULT_ACT_CFG,
                              out_channels=num_classes)
        self.register_buffer('class_weight', torch.tensor(class_weight, dtype=torch.float32)
                             if class_weight is not None else None, persistent=False)

    def logits(self, pyramid):
        """(N_0, C) logits of the level-0 points."""
        return self.head(self.decoder(self.backbone(pyramid), pyramid))

    def loss(self, pyramid, data_samples=None):
        """``loss_seg`` (cross-entropy on ``pyramid.labels`` (N_0,)), ``acc`` and :meth:`extra_losses`.

        Raises:
            ValueError: the pyramid has no labels.
        """
        if pyramid.labels is None:
            raise ValueError('KPFCNN: the loss needs per-point labels (data samples with gt_pts_seg and a '
                             'KPDataPreprocessor with with_labels=True)')
        logits = self.logits(pyramid)
        labels = pyramid.labels.to(logits.device)
        losses = dict(loss_seg=F.cross_entropy(logits, labels, weight=self.class_weight,
                                               ignore_index=self.ignore_index))
        valid = labels != self.ignore_index
        losses['acc'] = ((logits.argmax(1) == labels) & valid).float().sum().detach() / valid.sum().clamp(min=1)
        losses.update(self.extra_losses(pyramid))
        return losses

    def predict(self, pyramid, data_samples=None):
        """Set ``pred_pts_seg`` (``pts_semantic_mask`` (N_i,), ``pts_scores`` (N_i, C)) on each sample (new ones if
        None), level-0 scores projected to every input point."""
        scores = torch.softmax(self.logits(pyramid), 1).index_select(0, pyramid.cells)
        if data_samples is None:
            data_samples = [Det3DDataSample() for _ in range(pyramid.batch_size)]
        for sample, score in zip(data_samples, scores.split(pyramid.num_points)):
            sample.pred_pts_seg = PointData(pts_semantic_mask=score.argmax(1), pts_scores=score)
        return data_samples
