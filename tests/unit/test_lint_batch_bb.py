"""Patterns found while scoring held-out batches BB, BC, BD and BE (ddpm-torch, DBNet, lemniscate, TD-MPC, CURL,
partialconv, TorchBeast, EAST, Point-MAE, UGATIT, HuBERT), in our own words. Each test fails without the change
it names."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_source
from tests.unit.helpers import lint_project


def found(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


def test_the_first_element_of_a_list_batch_is_still_data():
    """`if isinstance(x, (list, tuple)): x = x[0]` takes the images out of an (images, labels) pair: `x` is data
    after it, and its blocking copy is found (forks.narrowed_away with containers; it used to make `x` a number)."""
    src = """
    import torch

    class Trainer:
        def train(self):
            for e in range(10):
                for i, x in enumerate(self.trainloader):
                    if isinstance(x, (list, tuple)):
                        x = x[0]
                    self.step(x.to(self.device))

        def step(self, x):
            loss = self.model(x).mean()
            loss.backward()
            self.optimizer.step()
    """
    assert (10, "HL012") in found(src)


def test_a_dict_entry_set_from_item_just_above_is_a_number():
    """`loss_dict[key] = value.item()` then `'{:.4f}'.format(loss_dict[key])` (DBNet): the read is the `.item()`,
    the formatting reads nothing (forks.entry_kind)."""
    src = """
    import torch

    def train(model, loader, optimizer, criterion):
        for batch in loader:
            loss_dict = criterion(model(batch["img"].cuda(non_blocking=True)), batch)
            optimizer.zero_grad()
            loss_dict["loss"].backward()
            optimizer.step()
            text = ""
            for key, value in loss_dict.items():
                loss_dict[key] = value.item()
                text += "{}: {:.4f}".format(key, loss_dict[key])
    """
    assert found(src) == [(12, "HL001")]


def test_a_meter_object_is_not_a_tensor_by_its_name():
    """`train_loss = AverageMeter()` fed `loss.item()` and formatted as `{train_loss.avg:.4f}` (lemniscate): the
    `_loss` suffix does not make a meter a tensor (kinds: a `*Meter`/`*Average` constructor gives a Python value)."""
    src = """
    import torch

    class AverageMeter:
        def update(self, v):
            self.avg = v

    def train(net, loader, optimizer, criterion):
        train_loss = AverageMeter()
        for inputs, targets in loader:
            inputs = inputs.cuda(non_blocking=True)
            loss = criterion(net(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            train_loss.update(loss.item())
            print("Loss: {train_loss.avg:.4f}".format(train_loss=train_loss))
    """
    assert found(src) == [(16, "HL001")]


def test_a_numeric_default_tested_before_it_becomes_a_tensor_is_a_number():
    """`def pi(self, z, std=0): if std > 0: std = torch.ones_like(mu) * std` (TD-MPC) and `if compute_pi:` with
    `compute_pi=True` (CURL): the test reads a Python value; the tensor made below it does not reach back."""
    src = """
    import torch

    class Agent(torch.nn.Module):
        def pi(self, z, std=0, sample=True):
            mu = torch.tanh(self.head(z))
            if std > 0:
                std = torch.ones_like(mu) * std
                return mu + std
            if sample:
                return mu * 2
            return mu

    def train(loader, optimizer, cfg):
        agent = Agent()
        for z in loader:
            loss = agent.pi(z.cuda(non_blocking=True), cfg.min_std).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert not [h for h in found(src) if h[1] == "HL005"]
    tensor_first = src.replace("            if std > 0:\n", "            std = mu.std()\n            if std > 0:\n")
    assert (8, "HL005") in found(tensor_first)  # once made a tensor above the test, the test reads the device


def test_a_save_helper_given_a_name_formatted_with_the_step_writes_a_new_file(tmp_path: Path):
    """`save_ckpt('{:s}/ckpt/{:d}.pth'.format(args.save_dir, i + 1), ...)` (partialconv): one file per save, no
    in-place overwrite (saves._save_helper_in_place reads `str.format` counters too)."""
    helper = """
    import torch

    def save_ckpt(ckpt_name, models, n_iter):
        torch.save({"n_iter": n_iter, **{k: m.state_dict() for k, m in models}}, ckpt_name)
    """
    script = """
    import torch
    from util.io import save_ckpt

    model = torch.nn.Linear(2, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(100):
        loss = model(torch.randn(2, 2, device="cuda")).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (i + 1) % 10 == 0:
            save_ckpt("{:s}/ckpt/{:d}.pth".format("out", i + 1), [("model", model)], i + 1)
    """
    files = {"util/__init__.py": "", "util/io.py": helper}
    assert not [h for h in lint_project(tmp_path / "a", files, script) if h[1] == "HL021"]
    fixed = script.replace('"{:s}/ckpt/{:d}.pth".format("out", i + 1)', '"out/ckpt/last.pth"')
    assert [h for h in lint_project(tmp_path / "b", files, fixed) if h[1] == "HL021"]


def test_a_numpy_only_helper_called_every_step_reads_the_tensors_it_is_given(tmp_path: Path):
    """DBNet's `cal_text_score(preds, ...)` lives in a utils module that imports NumPy, not torch, and does
    `texts.data.cpu().numpy()` on what it is given: a host copy every step, reported at the call
    (effects._called analyses such a helper when it reads its arguments)."""
    util = """
    import numpy as np

    def cal_text_score(texts, gt_texts):
        pred_text = texts.data.cpu().numpy()
        return float(np.mean(pred_text > 0.5))
    """
    script = """
    import torch
    from utils import cal_text_score

    def train(model, loader, optimizer, device):
        for batch in loader:
            preds = model(batch["img"].to(device, non_blocking=True))
            loss = preds.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            score = cal_text_score(preds[:, 0], batch["gt"])
    """
    files = {"utils/__init__.py": "from .util import *\n", "utils/util.py": util}
    assert (12, "HL007") in lint_project(tmp_path, files, script)


def test_an_rl_batch_indexed_by_its_done_entry_is_a_boolean_mask():
    """`batch["episode_return"][batch["done"]]` and `env_outputs.episode_return[env_outputs.done]` (TorchBeast):
    the episode ends select a data-dependent number of returns, a sync every learner step (indexing.MASK_KEY)."""
    src = """
    import torch

    def learn(model, optimizer, batch, env_outputs, stats):
        for _ in range(100):
            loss = model(batch["frame"].cuda(non_blocking=True)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            stats["a"] = batch["episode_return"][batch["done"]]
            stats["b"] = env_outputs.episode_return[env_outputs.done]
            stats["c"] = batch["episode_return"][batch["step"]]
    """
    assert [h for h in found(src) if h[1] == "HL006"] == [(10, "HL006"), (11, "HL006")]


def test_a_loss_that_prints_its_terms_reports_at_the_call(tmp_path: Path):
    """EAST's `Loss.forward` prints its three loss tensors with `.format` every step: a host read reported at
    `criterion(...)`; a warning printed under a value test (`if torch.min(y) < -1.: print(...)`, HiFi-GAN's
    mel_spectrogram) is not (effects: HL002 carried only when shown every time)."""
    loss = """
    import torch

    class Loss(torch.nn.Module):
        def forward(self, pred, gt):
            cls_loss = (pred - gt).abs().mean()
            iou_loss = (pred * gt).mean()
            print("classify loss is {:.8f}, iou loss is {:.8f}".format(cls_loss, iou_loss))
            return cls_loss + iou_loss

    def mel(y):
        if torch.min(y) < -1.0:
            print(f"min value is {torch.min(y)}")
        return y * 2
    """
    script = """
    import torch
    from loss import Loss, mel

    def train(model, loader, optimizer):
        criterion = Loss()
        for img, gt in loader:
            pred = model(mel(img.cuda(non_blocking=True)))
            loss = criterion(pred, gt.cuda(non_blocking=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    hits = lint_project(tmp_path, {"loss.py": loss}, script)
    assert (9, "HL002") in hits and (8, "HL002") not in hits


def test_a_reduce_helper_returns_the_tensor_it_is_given(tmp_path: Path):
    """Point-MAE's `dist_utils.reduce_tensor(tensor, args)` clones, all-reduces and divides in place: a tensor, so
    the `.item()` after it is a read (kinds.TENSOR_NAME: a parameter named `tensor`; `rt /= n` of an unknown
    clone used to make it a Python number)."""
    dist = """
    import torch

    def reduce_tensor(tensor, args):
        rt = tensor.clone()
        torch.distributed.all_reduce(rt)
        rt /= args.world_size
        return rt
    """
    script = """
    import torch
    from utils import dist_utils

    def run(model, loader, optimizer, args, losses):
        for data in loader:
            loss = model(data.cuda(non_blocking=True))
            loss.backward()
            optimizer.step()
            if args.distributed:
                loss = dist_utils.reduce_tensor(loss, args)
                losses.update([loss.item() * 1000])
            else:
                losses.update([loss.item() * 1000])
    """
    hits = lint_project(tmp_path, {"utils/__init__.py": "", "utils/dist_utils.py": dist}, script)
    assert (12, "HL001") in hits and (14, "HL001") in hits


def test_targets_made_like_a_module_output_are_on_its_device():
    """UGATIT's `MSE(real_logit, torch.ones_like(real_logit).to(self.device))` with `real_logit, cam, _ =
    self.disGA(real_A)`: `ones_like` of a device tensor is made on the device, the `.to()` copies nothing
    (provenance.on_device follows an unpacking to the module call; a same-file helper's tuple may hold host
    tensors and is not followed)."""
    src = """
    import torch

    class Trainer:
        def aggregate(self, features):
            return features, torch.ones(features.shape[0])

        def train(self):
            for real_A, _ in self.loader:
                real_A = real_A.to(self.device, non_blocking=True)
                real_logit, cam_logit, _ = self.disGA(real_A)
                loss = self.mse(real_logit, torch.ones_like(real_logit).to(self.device))
                pairs, target = self.aggregate(real_logit)
                loss = loss + self.bce(pairs, target.to(self.device))
                self.D_optim.zero_grad()
                loss.backward()
                self.D_optim.step()
    """
    assert [h for h in found(src) if h[1] == "HL012"] == [(14, "HL012")]


def test_a_mask_returned_by_the_model_indexes_with_a_data_dependent_size():
    """HuBERT's `logits, mask = hubert(wavs)` then `F.cross_entropy(logits[mask], codes[mask])`: a boolean mask
    named so and given by a call (indexing: a `*mask` name bound by a call)."""
    src = """
    import torch
    import torch.nn.functional as F

    def train(hubert, loader, optimizer):
        for wavs, codes in loader:
            wavs, codes = wavs.cuda(non_blocking=True), codes.cuda(non_blocking=True)
            logits, mask = hubert(wavs)
            loss = F.cross_entropy(logits[mask], codes[mask])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert (9, "HL006") in found(src)


def test_a_synchronize_when_distributed_is_every_step_not_an_opt_in():
    """`if args.distributed: torch.cuda.synchronize()` after each step (Point-MAE, Point-BERT): the run mode, not a
    flag the user turns on to time things (checks._deliberate); `if args.sync:` still is one."""
    src = """
    import torch

    def run(model, loader, optimizer, args):
        for data in loader:
            loss = model(data.cuda(non_blocking=True))
            loss.backward()
            optimizer.step()
            if args.distributed:
                torch.cuda.synchronize()
    """
    assert (10, "HL020") in found(src)
    assert (10, "HL020") not in found(src.replace("args.distributed", "args.sync"))


def test_the_values_of_a_loss_dict_are_tensors_until_read_back_by_key():
    """`for k, v in loss_dict.items(): meters[k].update(float(v))` with `loss_dict = criterion(...)` (Moment-DETR):
    each `float(v)` reads a device tensor; one entry set to a float beside them does not change that. After
    `loss_dict[key] = value.item()` for every key (DBNet), the values are numbers (forks.read_back)."""
    src = """
    import torch

    def train(model, loader, optimizer, criterion, meters):
        for batch in loader:
            loss_dict = criterion(model(batch.cuda(non_blocking=True)), batch)
            losses = sum(loss_dict.values())
            optimizer.zero_grad()
            losses.backward()
            optimizer.step()
            loss_dict["overall"] = float(losses)
            for k, v in loss_dict.items():
                meters[k].update(float(v))
    """
    assert (13, "HL001") in found(src)
    by_key = src.replace('loss_dict["overall"] = float(losses)', "for k, v in loss_dict.items():\n"
                         "                loss_dict[k] = v.item()")  # fmt: skip
    assert not [h for h in found(by_key) if h[0] == 14]


def test_an_options_object_with_a_prefix_holds_python_values():
    """`Q.repeat_interleave(self.colbert_config.nway, dim=0)` (ColBERT): a count from the run's options, not a tensor
    of repeats, so no sync (kinds.CONFIG_NAME takes `*_config`, `*_args`, ... too)."""
    src = """
    import torch

    class Model(torch.nn.Module):
        def forward(self, q):
            return q.repeat_interleave(self.colbert_config.nway, dim=0)

    def train(loader, optimizer):
        model = Model()
        for q in loader:
            loss = model(q.cuda(non_blocking=True)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert not [h for h in found(src) if h[1] == "HL022"]
    assert [h for h in found(src.replace("self.colbert_config.nway", "self.counts")) if h[1] == "HL022"]
