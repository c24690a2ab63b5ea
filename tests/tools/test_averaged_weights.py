"""use_averaged_weights: after runner.train() the model in memory holds what the checkpoint holds (mmengine's
EMAHook averages), so a tool that goes on with the trained model scores the weights validation scored."""
import torch
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch import nn

from fsdlite.engine.averaged_weights import use_averaged_weights


class LineModel(BaseModel):
    """y = w x + b fitted by squared error; 'tensor' returns the prediction."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1, 1)
        self.register_buffer('seen', torch.zeros(()))

    def forward(self, x, y, mode='tensor'):
        x, y = torch.stack(x) if isinstance(x, list) else x, torch.stack(y) if isinstance(y, list) else y
        if mode == 'loss':
            self.seen += 1
            return dict(loss=((self.fc(x) - y) ** 2).mean())
        return self.fc(x)


def run(tmp_path, hooks):
    data = [(torch.tensor([v]), torch.tensor([2.0 * v + 1.0])) for v in torch.linspace(-1, 1, 8).tolist()]
    runner = Runner(model=LineModel(), work_dir=str(tmp_path),
                    train_dataloader=dict(dataset=data, sampler=dict(type='DefaultSampler', shuffle=True),
                                          batch_size=2, collate_fn=dict(type='default_collate')),
                    optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
                    train_cfg=dict(by_epoch=False, max_iters=12), custom_hooks=hooks,
                    default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=12, by_epoch=False)),
                    randomness=dict(seed=0), default_scope='fsdlite', experiment_name=tmp_path.name)
    runner.train()
    return runner


def test_the_model_holds_the_checkpoints_averaged_weights(tmp_path):
    runner = run(tmp_path, [dict(type='EMAHook', momentum=0.2, begin_iter=2, update_buffers=True)])
    last = {k: v.clone() for k, v in runner.model.state_dict().items()}
    saved = torch.load(tmp_path / 'iter_12.pth', map_location='cpu', weights_only=False)['state_dict']
    assert not torch.equal(last['fc.weight'], saved['fc.weight'])  # the raw weights are not the average
    assert use_averaged_weights(runner)
    for key, value in runner.model.state_dict().items():
        torch.testing.assert_close(value, saved[key], rtol=0, atol=0)


def test_without_an_ema_hook_the_model_is_left_alone(tmp_path):
    runner = run(tmp_path, [])
    before = {k: v.clone() for k, v in runner.model.state_dict().items()}
    assert not use_averaged_weights(runner)
    for key, value in runner.model.state_dict().items():
        assert torch.equal(value, before[key])
