"""Patterns found while scoring held-out batches AR and AS (RIFE, Time-LLM, img2img-turbo, ENAS,
ForwardTacotron), in our own words. Each test fails without the change it names."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_source
from tests.unit.helpers import lint_project


def found(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


MODEL = """
import torch

class Model:
    def update(self, imgs, gt, lr=0, training=True):
        pred = self.net(imgs)
        loss = (pred - gt).abs().mean()
        if training:
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()
        return pred, {"loss": loss}
"""

EVALUATE = """
import torch
from model import Model

model = Model()

def evaluate(model, val_data):
    for imgs, gt in val_data:
        imgs = imgs.to("cuda", non_blocking=True)
        with torch.no_grad():
            pred, info = model.update(imgs, gt, training={flag})
        errors.append(info["loss"].cpu().numpy())

for epoch in range(100):
    for imgs, gt in train_data:
        imgs = imgs.to("cuda", non_blocking=True)
        pred, info = model.update(imgs, gt, 1e-4)
    evaluate(model, val_data)
"""


def test_a_call_asking_for_the_evaluation_path_is_no_training_step(tmp_path: Path):
    """RIFE: `evaluate` calls the same `model.update(...)` as the training loop, with `training=False`, and
    `update` steps the optimizer only `if training:`. Its loop is an evaluation loop: the `.cpu()` reads of
    the validation losses are not per training step. Called as a step (`training=True`), the loop trains."""
    assert (12, "HL007") not in lint_project(tmp_path, {"model.py": MODEL}, EVALUATE.format(flag="False"))
    assert (12, "HL007") in lint_project(tmp_path / "b", {"model.py": MODEL}, EVALUATE.format(flag="True"))


STOPPER = """
import torch

class EarlyStopping:
    def __init__(self, patience=7):
        self.patience = patience
        self.best = None

    def __call__(self, val_loss, model, path):
        if self.best is None or val_loss < self.best:
            self.best = val_loss
            torch.save(model.state_dict(), path + "/" + "checkpoint")
"""

RUNS = """
import os
import torch
from tools import EarlyStopping

for ii in range(args.itr):
    setting = "{}_{}_{}".format(args.model, args.data, ii)
    path = os.path.join(args.checkpoints, setting)
    early_stopping = EarlyStopping(patience=args.patience)
    for epoch in range(args.train_epochs):
        for x, y in train_loader:
            loss = model(x.to("cuda", non_blocking=True), y)
            loss.backward()
            optimizer.step()
        vali_loss = vali(model, vali_loader)
        early_stopping(vali_loss, model, path)
"""


def test_a_callable_saver_is_reported_where_it_is_called_not_where_it_is_built(tmp_path: Path):
    """Time-LLM: `EarlyStopping(...)` is built once per run (inside `for ii in range(args.itr)`, a loop over
    whole runs) and called every epoch; its `__call__` saves over `<path>/checkpoint`. Building it runs only
    `__init__`: the finding belongs on the call (line 16), and the run's `path` (named after `ii`) is the same
    at every save of that run, so it is no fresh name."""
    hits = lint_project(tmp_path, {"tools.py": STOPPER}, RUNS)
    assert (16, "HL021") in hits
    assert (9, "HL021") not in hits


def test_a_flag_default_is_read_from_the_project_module_that_parses_the_arguments(tmp_path: Path):
    """img2img-turbo: `zero_grad(set_to_none=args.set_grads_to_none)` with `args` from the project's
    `parse_args_paired_training()`, where the flag is `store_true`: by default zeros are written into every
    gradient. A flag defaulting to True there is no finding."""
    parser = """
    import argparse

    def parse_args_paired_training():
        parser = argparse.ArgumentParser()
        parser.add_argument("--set_grads_to_none", action="{action}")
        return parser.parse_args()
    """
    script = """
    import torch
    from training_utils import parse_args_paired_training

    args = parse_args_paired_training()
    for step, batch in enumerate(loader):
        loss = model(batch.to("cuda", non_blocking=True))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=args.set_grads_to_none)
    """
    off = lint_project(tmp_path, {"training_utils.py": parser.format(action="store_true")}, script)
    assert (10, "HL013") in off
    on = lint_project(tmp_path / "b", {"training_utils.py": parser.format(action="store_false")}, script)
    assert (10, "HL013") not in on


def test_python_max_and_abs_of_tensors_are_tensors():
    """ENAS's gradient tracker: `max([g.max() for g in grads])` is the largest tensor, `max(a, abs(b))` of
    two tensors compares them on the host (HL004), and the `if` on the result reads it (HL005). Over Python
    numbers, neither."""
    src = """
    import torch

    def check(abs_max_grad, model):
        grads = [p.grad.data for p in model.parameters() if p.grad is not None]
        new_max = max([g.max() for g in grads])
        new_min = min([g.min() for g in grads])
        new_abs = max(new_max, abs(new_min))
        if new_abs > abs_max_grad:
            return new_abs
        return abs_max_grad

    def train(model, loader, opt):
        model.cuda()
        best = 0
        for x, y in loader:
            loss = model(x.cuda(non_blocking=True), y)
            loss.backward()
            best = check(best, model)
            opt.step()
    """
    hits = found(src)
    assert (8, "HL004") in hits and (9, "HL005") in hits
    numbers = found(src.replace("g.max() for g in grads", "1.0, 2.0").replace("g.min() for g in grads", "3.0, 4.0"))
    assert (8, "HL004") not in numbers and (9, "HL005") not in numbers


CHECKPOINTS = """
import torch

def save_checkpoint(kind, paths, model, optimizer, *, name=None):
    def helper(path_dict, is_named):
        torch.save(model.state_dict(), path_dict["w"])
        torch.save(optimizer.state_dict(), path_dict["o"])

    latest = {"w": paths.root / f"{kind}_weights.pt", "o": paths.root / f"{kind}_optim.pt"}
    helper(latest, False)
    if name:
        helper({"w": paths.root / f"{name}_weights.pt", "o": paths.root / f"{name}_optim.pt"}, True)
"""

TRAINER = """
import torch
from checkpoints import save_checkpoint

for step, (x, y) in enumerate(loader, 1):
    loss = model(x.to("cuda", non_blocking=True), y)
    loss.backward()
    optimizer.step()
    if step % 1000 == 0:
        save_checkpoint("forward", paths, model, optimizer, name=f"forward_step{step // 1000}K")
"""


def test_a_nested_save_helper_called_with_fixed_paths_overwrites_whatever_the_name(tmp_path: Path):
    """ForwardTacotron: `save_checkpoint(..., name=f"step{k}K")` writes the named files through its inner
    `helper`, and also, every time, the fixed "latest" files: those are saved in place. With only the named
    save, each call writes new files: no finding."""
    assert (10, "HL021") in lint_project(tmp_path, {"checkpoints.py": CHECKPOINTS}, TRAINER)
    named_only = CHECKPOINTS.replace("    helper(latest, False)\n", "")
    assert (10, "HL021") not in lint_project(tmp_path / "b", {"checkpoints.py": named_only}, TRAINER)


def test_a_method_of_an_object_held_by_an_instance_is_followed_and_the_action_it_returns_is_the_envs():
    """Popular-RL-Algorithms' SAC: the episode loop calls `sac_trainer.policy_net.get_action(state)`, and the
    trainer's `__init__` made `self.policy_net = PolicyNetwork(...)`: `PolicyNetwork.get_action` runs every
    environment step, so its blocking copy of the host-made state counts. The action it returns as numpy is
    the environment's input, not a sync to remove."""
    src = """
    import torch
    device = torch.device("cuda")

    class PolicyNetwork(torch.nn.Module):
        def get_action(self, state):
            state = torch.FloatTensor(state).unsqueeze(0).to(device)
            mean = self.forward(state)
            action = torch.tanh(mean).detach().cpu().numpy()[0]
            return action

    class Trainer:
        def __init__(self):
            self.policy_net = PolicyNetwork().to(device)

        def update(self, batch):
            loss = self.policy_net(batch).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

    sac_trainer = Trainer()
    for eps in range(1000):
        state = env.reset()
        for step in range(200):
            action = sac_trainer.policy_net.get_action(state)
            state, reward, done, _ = env.step(action)
            sac_trainer.update(buffer.sample(64))
    """
    hits = found(src)
    assert (7, "HL012") in hits
    assert not [h for h in hits if h[0] == 9]


# VITS' `commons.slice_segments`, shared by the two slice-bound tests below (line 8 is the slice)
SLICE_SEGMENTS = """
    import torch

    def slice_segments(x, ids_str, size=4):
        ret = torch.zeros_like(x[:, :, :size])
        for i in range(x.size(0)):
            idx_str = ids_str[i]
            ret[i] = x[i, :, idx_str:idx_str + size]
        return ret
"""


def test_a_device_tensor_as_a_slice_bound_is_read_on_the_host():
    """VITS/so-vits-svc's `slice_segments`: `x[i, :, idx_str:idx_end]` with `idx_str = ids_str[i]` of random
    device offsets calls `__index__` on a CUDA tensor, one host read per sample every step. Python int bounds
    (`ids_str = [0] * b`) read nothing."""
    src = (
        SLICE_SEGMENTS
        + """
    def train(model, loader, opt):
        for x, lengths in loader:
            x = x.cuda(non_blocking=True)
            ids = (torch.rand([x.size(0)], device=x.device) * (lengths.cuda(non_blocking=True) - 4)).long()
            loss = model(slice_segments(x, ids)).mean()
            loss.backward()
            opt.step()
    """
    )
    assert (8, "HL001") in found(src)
    assert (8, "HL001") not in found(
        src.replace("ids = (torch.rand", "ids = [0] * x.size(0)\n            _ = (torch.rand")
    )


def test_a_tensor_computed_from_host_tensors_by_a_torch_function_stays_on_the_host():
    """DINO's multi-crop wrapper: `idx_crops = torch.cumsum(torch.unique_consecutive(torch.tensor(sizes),
    return_counts=True)[1], 0)` is computed on the host from a host tensor, so slicing the crops list with
    its elements reads nothing from the device. The same boundaries moved to the GPU first would be reads."""
    src = """
    import torch

    class MultiCrop(torch.nn.Module):
        def forward(self, x):
            idx_crops = torch.cumsum(torch.unique_consecutive(
                torch.tensor([inp.shape[-1] for inp in x]), return_counts=True)[1], 0){move}
            start_idx, output = 0, []
            for end_idx in idx_crops:
                output.append(self.backbone(torch.cat(x[start_idx:end_idx])))
                start_idx = end_idx
            return torch.cat(output)

    model = MultiCrop().cuda()
    for crops in loader:
        crops = [c.cuda(non_blocking=True) for c in crops]
        loss = model(crops).mean()
        loss.backward()
        opt.step()
    """
    assert not [h for h in found(src.format(move="")) if h[1] == "HL001"]
    assert (10, "HL001") in found(src.format(move=".cuda()"))


def test_what_a_function_is_asked_first_does_not_change_its_kinds():
    """The kind model caches each function's kinds. Worked out while its caller was itself half-way (the
    caller's info still empty), VITS' `slice_segments` took its `ids_str` for unknown, and kept that: the
    slice-bound read was found when the script called `slice_segments` itself but lost once the model's
    forward had reached it first through `rand_slice_segments`. Asked in either order, `idx_str` is a tensor."""
    import ast

    from hotloop.lint.callers import parse

    src = textwrap.dedent(
        SLICE_SEGMENTS
        + """
    def rand_slice_segments(x, lengths, size=4):
        ids_str = (torch.rand([x.size(0)], device=x.device) * (lengths - size)).long()
        ret = slice_segments(x, ids_str, size)
        return ret, ids_str
    """
    )
    for first in ("rand_slice_segments", "slice_segments"):
        mi = parse(src, "<commons>")
        mi.info_of(mi.functions[first][0])
        bound = next(n for n in mi.nodes if isinstance(n, ast.Name) and n.id == "idx_str" and n.lineno == 8)
        assert mi.kind(bound, mi.function_info(bound)) == "tensor", first


def test_a_trainer_method_named_for_parsing_a_training_batch_runs_every_step():
    """Dassl's `TrainerX.parse_batch_train(batch)` moves the batch with blocking `.to(self.device)`; its
    callers are the subclasses' `forward_backward` in other files, but the name says it runs per batch,
    like BasicSR's `feed_data`."""
    src = """
    import torch

    class TrainerX:
        def parse_batch_train(self, batch):
            input = batch["img"].to(self.device)
            label = batch["label"].to(self.device)
            return input, label
    """
    assert (6, "HL012") in found(src) and (7, "HL012") in found(src)


def test_a_cache_filled_on_first_use_is_built_once_not_every_step():
    """Real-ESRGAN's training-pair queue (`if not hasattr(self, "queue_lr"): self.queue_lr = torch.zeros(...)
    .cuda()`) and the PyTorch example Transformer's causal mask (`if self.src_mask is None or
    self.src_mask.size(0) != len(src): ... self.src_mask = mask`) are made on the first call and kept. The
    same copy without the guard, or a guard whose body does not fill what it tests, runs every step."""
    src = """
    import torch

    class Model:
        def step(self, lq):
            {guard}
                self.queue_lr = torch.zeros(self.queue_size, *lq.shape[1:]).cuda()
            if self.src_mask is None or self.src_mask.size(0) != len(lq):
                {mask} = torch.triu(torch.ones(len(lq), len(lq))).to("cuda")
            loss = self.net(lq).mean()
            loss.backward()
            self.optimizer.step()
    """
    hits = found(src.format(guard='if not hasattr(self, "queue_lr"):', mask="self.src_mask"))
    assert (7, "HL012") not in hits and (9, "HL012") not in hits
    hits = found(src.format(guard="if True:", mask="mask"))
    assert (7, "HL012") in hits and (9, "HL012") in hits


def test_tensors_passed_through_a_transform_and_assigned_back_stay_tensors():
    """BackgroundMattingV2: `true_pha, true_fgr, true_bgr = random_crop(true_pha, true_fgr, true_bgr)` (a
    same-file helper returning a list of kornia results) keeps the CUDA batch; indexing it with a mask made on
    the host every step copies the mask to the device. A call that turns them into something else under
    another name says nothing."""
    src = """
    import random
    import torch

    def random_crop(*imgs):
        results = []
        for img in imgs:
            results.append(kornia.center_crop(img, (256, 256)))
        return results

    for true_pha, true_bgr in loader:
        true_pha = true_pha.cuda(non_blocking=True)
        true_bgr = true_bgr.cuda(non_blocking=True)
        {target} = random_crop(true_pha, true_bgr)
        aug_idx = torch.rand(len(true_bgr)) < 0.3
        shadow = true_pha[aug_idx].mul(0.3 * random.random())
        loss = model(true_bgr, shadow).mean()
        loss.backward()
        optimizer.step()
    """
    assert (16, "HL024") in found(src.format(target="true_pha, true_bgr"))
    assert (16, "HL024") not in found(src.format(target="crops").replace("true_pha[aug_idx]", "crops[aug_idx]"))


def test_a_reshaped_mask_and_a_mask_named_comparison_index_with_a_data_dependent_size():
    """RAFT's `sequence_loss`: `epe.view(-1)[valid.view(-1)]` with `valid = (valid >= 0.5) & (mag < max)`;
    the Decision Transformer's trainer: `action_preds.reshape(-1, d)[attention_mask.reshape(-1) > 0]` on the
    outputs of `self.model.forward(...)`. Both are boolean-mask indexing (HL006) every step; indexing with
    the reshaped integer positions is not."""
    src = """
    import torch

    class Trainer:
        def train_step(self):
            states, actions, attention_mask = self.get_batch(self.batch_size)
            states = states.to("cuda", non_blocking=True)
            state_preds, action_preds = self.model.forward(states, actions, attention_mask=attention_mask)
            valid = (state_preds.abs() >= 0.5) & (state_preds < 400)
            epe = state_preds.view(-1)[{index}]
            action_preds = action_preds.reshape(-1, 4)[attention_mask.reshape(-1) > 0]
            loss = ((action_preds - actions) ** 2).mean() + epe.mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
    """
    hits = found(src.format(index="valid.view(-1)"))
    assert (10, "HL006") in hits and (11, "HL006") in hits
    assert (10, "HL006") not in found(src.format(index="positions.view(-1)"))


LOGGER = """
import torch

class Logger:
    def log(self, key, value, step, n=1):
        if type(value) == torch.Tensor:
            value = value.{conv}
        self._meters[key].update(value, n)
"""

AGENT_UPDATE = """
import torch
from logger import Logger

class SACAgent:
    def update_critic(self, obs, target_q, logger, step):
        obs = obs.to("cuda", non_blocking=True)
        critic_loss = (self.critic(obs) - target_q).pow(2).mean()
        logger.log("train_critic/loss", critic_loss, step)
        logger.log("train_critic/q", self.critic(obs).mean(), step)
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()
"""


def test_a_logger_that_reads_what_it_is_given_is_a_host_read_not_formatting(tmp_path: Path):
    """pytorch-sac's `logger.log("train_critic/loss", critic_loss, step)`: the project's `Logger.log` does
    `value.item()` every update (HL001), found through the receiver's name although `logger` is a parameter.
    A logger that keeps the tensor (`value.detach()`) reads nothing there: then the call is judged as before
    (HL002, a tensor handed to a logging call)."""
    hits = lint_project(tmp_path, {"logger.py": LOGGER.format(conv="item()")}, AGENT_UPDATE)
    assert (9, "HL001") in hits and (10, "HL001") in hits
    kept = lint_project(tmp_path / "b", {"logger.py": LOGGER.format(conv="detach()")}, AGENT_UPDATE)
    assert (9, "HL001") not in kept and (9, "HL002") in kept


def test_a_truth_test_of_a_parameter_named_like_a_loss_is_an_option_not_a_tensor():
    """bubbliiiing's U-Net `fit_one_epoch(..., dice_loss, focal_loss, ...)`: `if focal_loss:` tests an option
    the training script passes as `False`; nothing in the function makes it a tensor, and a name is no evidence
    for a truth test. A loss computed in the step and then tested is still a read."""
    src = """
    import torch

    def fit_one_epoch(model, optimizer, loader, dice_loss, focal_loss):
        model.cuda()
        for imgs, labels in loader:
            imgs = imgs.cuda(non_blocking=True)
            outputs = model(imgs)
            {test}
                loss = focal(outputs, labels)
            else:
                loss = ce(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert (9, "HL005") not in found(src.format(test="if focal_loss:"))
    assert (10, "HL005") in found(src.format(test="focal_loss = outputs.mean()\n            if focal_loss:"))


def test_a_reshaped_mask_assigned_to_a_name_is_still_a_mask():
    """RAFT-Stereo's `sequence_loss`: `valid = ((valid >= 0.5) & (mag < max_flow)).unsqueeze(1)`, then
    `epe.view(-1)[valid.view(-1)]`: boolean-mask indexing every step (HL006)."""
    src = """
    import torch

    def sequence_loss(flow_preds, flow_gt, valid, max_flow=700):
        mag = torch.sum(flow_gt ** 2, dim=1).sqrt()
        valid = ((valid >= 0.5) & (mag < max_flow)).unsqueeze(1)
        epe = torch.sum((flow_preds[-1] - flow_gt) ** 2, dim=1).sqrt()
        epe = epe.view(-1)[valid.view(-1)]
        return (flow_preds[-1] - flow_gt).abs().mean(), epe

    def train(model, loader, opt):
        model.cuda()
        for image, flow, valid in loader:
            image, flow, valid = [x.cuda(non_blocking=True) for x in (image, flow, valid)]
            loss, epe = sequence_loss(model(image), flow, valid)
            loss.backward()
            opt.step()
    """
    assert (8, "HL006") in found(src)


def test_a_host_made_index_inside_a_helper_of_another_file_is_reported_at_the_call(tmp_path: Path):
    """Fast AutoAugment's `mixup` (aug_mixup.py) indexes the CUDA batch with `torch.randperm(n)` made on the
    host, every step: the cross-file pass carries HL024 to the call, as it carries the helper's reads. Made
    with `device=`, nothing to report."""
    helper = """
    import torch

    def mixup(inputs, targets, alpha):
        indices = torch.randperm(inputs.size(0){device})
        return inputs * alpha + inputs[indices] * (1 - alpha), targets
    """
    script = """
    import torch
    from aug_mixup import mixup

    for data, targets in loader:
        data, targets = data.cuda(non_blocking=True), targets.cuda(non_blocking=True)
        data, targets = mixup(data, targets, 0.2)
        loss = model(data).mean()
        loss.backward()
        optimizer.step()
    """
    assert (7, "HL024") in lint_project(tmp_path, {"aug_mixup.py": helper.format(device="")}, script)
    on_device = helper.format(device=", device=inputs.device")
    assert (7, "HL024") not in lint_project(tmp_path / "b", {"aug_mixup.py": on_device}, script)


def test_a_loader_whose_worker_count_defaults_to_zero_elsewhere_has_no_workers_to_keep(tmp_path: Path):
    """LXMERT: `num_workers=args.num_workers` with the options module declaring `--numWorkers` under
    `dest="num_workers"`, default 0; TorchDrug: `num_workers=self.num_worker` with `__init__(..., num_worker=0)`.
    Neither loader has workers to keep alive. A default of 4 has."""
    param = """
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--numWorkers", dest="num_workers", default={n})
    args = parser.parse_args()
    """
    script = """
    import torch
    from torch.utils.data import DataLoader
    from param import args

    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=args.num_workers, pin_memory=True)
    model = model.cuda()
    for epoch in range(10):
        for x, y in loader:
            loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
            loss.backward()
            optimizer.step()
    """
    assert (6, "HL011") not in lint_project(tmp_path, {"param.py": param.format(n=0)}, script)
    assert (6, "HL011") in lint_project(tmp_path / "b", {"param.py": param.format(n=4)}, script)
    engine = """
    import torch
    from torch.utils import data

    class Engine:
        def __init__(self, model, train_set, batch_size=1, num_worker={n}):
            self.model, self.train_set, self.batch_size = model.cuda(), train_set, batch_size
            self.num_worker = num_worker

        def train(self, num_epoch=1):
            loader = data.DataLoader(self.train_set, self.batch_size, pin_memory=True, num_workers=self.num_worker)
            for epoch in range(num_epoch):
                for batch in loader:
                    loss = self.model(batch.cuda(non_blocking=True))
                    loss.backward()
                    self.optimizer.step()
    """
    assert not [h for h in found(engine.format(n=0)) if h[1] == "HL011"]
    assert [h for h in found(engine.format(n=4)) if h[1] == "HL011"]
