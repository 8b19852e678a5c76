"""Patterns found while scoring held-out batches AL and AM and the misses left from earlier batches
(PPO-PyTorch, Self-Attention-GAN, lucidrains' StyleGAN2), in our own words."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_paths, lint_source
from tests.unit.helpers import lint_project as _project


def found(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


AGENT = """
import torch
device = torch.device("cuda")

class PPO:
    def __init__(self, continuous):
        self.continuous = continuous

    def select_action(self, state):
        if self.continuous:
            with torch.no_grad():
                state = torch.FloatTensor(state).to(device)
            return self.policy.act(state)
        else:
            with torch.no_grad():
                state = torch.FloatTensor(state).{second}
            return self.policy.act(state)

    def update(self):
        loss = self.policy.loss()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
"""

RL_TRAIN = """
import torch
from ppo import PPO

agent = PPO(True)
for episode in range(1000):
    state = env.reset()
    for t in range(500):
        action = agent.select_action(state)
        state, reward, done, _ = env.step(action)
        agent.update()
"""


def test_an_option_whose_branches_both_copy_copies_either_way(tmp_path: Path):
    """PPO-PyTorch: `select_action` copies the host-made state blocking in both branches of
    `if self.has_continuous_action_space:`. The option is set elsewhere, but whichever way it is set, one
    branch runs every environment step. With only one branch copying, the option may be off: no claim."""
    both = _project(tmp_path, {"ppo.py": AGENT.format(second="to(device)")}, RL_TRAIN)
    assert (9, "HL012") in both
    one = _project(tmp_path, {"ppo.py": AGENT.format(second="to(device, non_blocking=True)")}, RL_TRAIN)
    assert (9, "HL012") not in one


UTILS = """
import torch
from torch.autograd import Variable

def tensor2var(x, grad=False):
    if torch.cuda.is_available():
        x = x.cuda()
    return Variable(x, requires_grad=grad)

def as_float(t):
    return t.to(torch.float32)
"""

GAN_TRAIN = """
import torch
from utils import *

def train(G, D, loader, opt_d, model):
    data_iter = iter(loader)
    for step in range(100000):
        real_images, _ = next(data_iter)
        real_images = tensor2var(real_images)
        z = tensor2var(torch.randn(real_images.size(0), 128))
        net = tensor2var(model)
        half = as_float(real_images)
        d_loss = D(real_images).mean() - D(G(z)).mean()
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
"""


def test_a_helper_that_moves_its_parameter_is_a_mover_whatever_its_name(tmp_path: Path):
    """Self-Attention-GAN: `tensor2var(x)` (star-imported from utils.py) does `x.cuda()` on its parameter:
    the batch and the host-drawn `z` it is given are copied blocking every step. Given a model it moves the
    model (once-per-run work, not a batch copy); a dtype cast moves nothing."""
    hits = _project(tmp_path, {"utils.py": UTILS}, GAN_TRAIN)
    assert (9, "HL012") in hits and (10, "HL012") in hits
    assert (11, "HL012") not in hits and (12, "HL012") not in hits


def test_a_local_name_bound_to_one_of_two_functions_calls_both():
    """lucidrains' StyleGAN2: `get_latents_fn = mixed_list if random() < p else noise_list`, then
    `get_latents_fn(...)` every step: both run (and `noise()` under them copies a host-drawn latent)."""
    src = """
    import torch
    from random import random

    def noise(n, dim):
        return torch.randn(n, dim).cuda()

    def noise_list(n, dim):
        return [noise(n, dim)]

    def mixed_list(n, dim):
        return noise_list(n, dim) + noise_list(n, dim)

    def train(G, D, opt, steps, p):
        for i in range(steps):
            get_latents_fn = mixed_list if random() < p else noise_list
            style = get_latents_fn(8, 512)
            loss = D(G(style)).mean()
            loss.backward()
            opt.step()
    """
    assert (6, "HL012") in found(src)
    assert (6, "HL012") not in found(src.replace("style = get_latents_fn(8, 512)", "style = None"))


def test_a_call_through_a_dict_of_methods_calls_each_of_them():
    """KnowledgeGraphEmbedding: `model_func = {'TransE': self.TransE, 'RotatE': self.RotatE}` then
    `model_func[self.model_name](head, relation, tail)` in the forward: each method may run every step, and
    `self.gamma.item()` in them reads a parameter on the host."""
    src = """
    import torch
    from torch import nn

    class KGE(nn.Module):
        def TransE(self, h, r, t):
            return self.gamma.item() - torch.norm(h + r - t, p=1, dim=2)

        def DistMult(self, h, r, t):
            return (h * r * t).sum(dim=2)

        def forward(self, h, r, t):
            model_func = {"TransE": self.TransE, "DistMult": self.DistMult}
            return model_func[self.model_name](h, r, t)

    def train(loader, opt):
        model = KGE().cuda()
        for h, r, t in loader:
            loss = model(h, r, t).mean()
            loss.backward()
            opt.step()
    """
    assert (7, "HL001") in found(src)
    assert (7, "HL001") not in found(src.replace('"TransE": self.TransE, ', ""))


STEP = """
import math
import torch

def train(model, loader, opt, scheduler, accum_iter=1):
    for i, (x, y) in enumerate(loader):
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        out = model(x)
        loss = (out - y).pow(2).mean()
        loss.backward()
        {body}
"""


def step(body: str) -> list[tuple[int, str]]:
    return found(STEP.format(body=textwrap.indent(textwrap.dedent(body), " " * 8).lstrip()))


def test_the_good_branch_of_a_nan_test_runs_every_step():
    """TabPFN: `if not torch.isnan(loss): total += losses.mean().cpu().detach().item()` is every good step, not
    the anomaly path; the `else:` of it (and the body of `if torch.isnan(loss):`) is."""
    body = """
    opt.step()
    if not torch.isnan(loss):
        total = out.mean().cpu()
    else:
        bad = out.mean().cpu()
    if torch.isnan(loss):
        bad = out.sum().cpu()
    """
    hits = step(body)
    assert (13, "HL007") in hits
    assert (15, "HL007") not in hits and (17, "HL007") not in hits


def test_an_item_after_cpu_is_one_read_reported_as_the_copy():
    """TabPFN's `losses.mean().cpu().detach().item()`: the `.cpu()` is the device-to-host copy (HL007); the
    `.item()` reads a host tensor and is not a second finding."""
    hits = step("opt.step()\ntotal = loss.mean().cpu().detach().item()")
    assert (12, "HL007") in hits and (12, "HL001") not in hits
    assert (12, "HL001") in step("opt.step()\ntotal = loss.detach().item()")


def test_a_mask_kept_in_the_batch_dict_is_a_boolean_index():
    """recurrent-ppo-truncated-bptt: `value[samples["loss_mask"]]` is boolean-mask indexing (HL006); a dict
    entry not named a mask (`samples["index"]`) is not judged."""
    hits = step(
        'opt.step()\nsamples = {"loss_mask": y > 0}\nkept = out[samples["loss_mask"]]\nidx = out[samples["index"]]'
    )
    assert (13, "HL006") in hits and (14, "HL006") not in hits


def test_indexing_a_device_tensor_with_a_host_made_index():
    """MixMatch: `idx = torch.randperm(n)` (no `device=`) then `inputs[idx]`; GCC: `out[range(b), range(b)]`;
    `out[torch.arange(b), y]`. Each copies its index to the device every step. Made with `device=`, nothing."""
    body = """
    opt.step()
    idx = torch.randperm(x.size(0))
    mixed = out[idx]
    diag = out[range(x.size(0)), range(x.size(0))]
    picked = out[torch.arange(x.size(0)), y]
    kept = out[torch.arange(x.size(0), device=x.device), y]
    """
    hits = step(body)
    assert {(13, "HL024"), (14, "HL024"), (15, "HL024")} <= set(hits)
    assert (16, "HL024") not in hits


def test_a_save_on_the_nan_path_is_a_dump_not_the_checkpoint():
    """D-FINE: `if torch.isnan(out).any(): save_on_master(state, "./NaN.pth")` writes the diverged model for
    debugging; a fixed-path save on the normal path is still in place."""
    body = """
    opt.step()
    if torch.isnan(out).any():
        torch.save(model.state_dict(), "./NaN.pth")
    torch.save(model.state_dict(), "last.pth")
    """
    hits = step(body)
    assert (14, "HL021") in hits and (13, "HL021") not in hits


def test_a_param_groups_learning_rate_is_a_number():
    """voxceleb_trainer: `max([x["lr"] for x in trainer.__optimizer__.param_groups])` compares Python floats."""
    body = """
    opt.step()
    lrs = [x["lr"] for x in trainer.__optimizer__.param_groups]
    print(max(lrs))
    top = max([out.max(), y.max()])
    """
    hits = step(body)
    assert (13, "HL004") not in hits and (14, "HL004") in hits


def test_a_scheduler_stepped_every_micro_batch_beside_an_accumulation_gate():
    """The Annotated Transformer: `scheduler.step()` every micro-batch while `optimizer.step()` runs under `if i
    % accum_iter == 0`, and a same-file call passes `accum_iter=10`. With the period 1 everywhere, or a step
    that passes its own position (`step(cur_step=i)`, MiniGPT-4), there is no claim."""
    src = """
    import torch

    def run_epoch(model, loader, opt, scheduler, accum_iter=1):
        for i, (x, y) in enumerate(loader):
            loss = model(x.cuda(non_blocking=True)).mean() / accum_iter
            loss.backward()
            if i % accum_iter == 0:
                opt.step()
                opt.zero_grad()
            scheduler.step({arg})

    def main(model, loader, opt, scheduler):
        run_epoch(model, loader, opt, scheduler, accum_iter={accum})
    """
    assert (11, "HL014") in found(src.format(arg="", accum=10))
    assert (11, "HL014") not in found(src.format(arg="", accum=1))
    assert (11, "HL014") not in found(src.format(arg="cur_step=i", accum=10))


def test_a_counter_wrapped_to_zero_marks_the_end_of_a_pass():
    """NeRF: `if i_batch >= rays.shape[0]: rays = rays[torch.randperm(n)]; i_batch = 0`: the reshuffle runs
    once per pass over the data, not every step."""
    src = """
    import torch

    def train(data, model, opt, n_rand, steps):
        rays = torch.Tensor(data).to("cuda")
        i_batch = 0
        for it in range(steps):
            batch = rays[i_batch:i_batch + n_rand]
            loss = model(batch).mean()
            loss.backward()
            opt.step()
            i_batch += n_rand
            if i_batch >= rays.shape[0]:
                rand_idx = torch.randperm(rays.shape[0])
                rays = rays[rand_idx]
                i_batch = {reset}
    """
    assert (15, "HL024") not in found(src.format(reset=0))
    assert (15, "HL024") in found(src.format(reset="i_batch - rays.shape[0]"))


def test_a_criterion_argument_does_not_name_an_iteration(tmp_path: Path):
    """FEDformer / Informer / Time-Series-Library: `early_stopping(vali_loss, model, path)` whose
    `EarlyStopping.__call__` saves over `path + "/checkpoint.pth"`; `vali_loss = self.vali(data, loader,
    criterion)` is not a per-iteration name ("crITERion" once read as one)."""
    tools = """
    import torch

    class EarlyStopping:
        def __init__(self, patience=7):
            self.best = None

        def __call__(self, val_loss, model, path):
            if self.best is None or val_loss < self.best:
                self.best = val_loss
                self.save_checkpoint(model, path)

        def save_checkpoint(self, model, path):
            torch.save(model.state_dict(), path + "/checkpoint.pth")
    """
    script = """
    import torch
    from tools import EarlyStopping

    def train(model, loader, opt, criterion, path, epochs):
        early_stopping = EarlyStopping(patience=3)
        for epoch in range(epochs):
            for x, y in loader:
                loss = criterion(model(x.cuda(non_blocking=True)), y.cuda(non_blocking=True))
                loss.backward()
                opt.step()
            vali_loss = vali(model, loader, criterion)
            early_stopping(vali_loss, model, path)
    """
    assert (13, "HL021") in _project(tmp_path, {"tools.py": tools}, script)


KGAT = """
import torch
from torch import nn

class KGAT(nn.Module):
    def calc_cf_loss(self, u, pos, neg):
        return (self.emb(u) * (self.emb(pos) - self.emb(neg))).sum()

    def update_attention(self, heads):
        att = self.att(heads)
        return att.cpu()

    def forward(self, *input, mode):
        if mode == "train_cf":
            return self.calc_cf_loss(*input)
        if mode == "update_att":
            return self.update_attention(*input)
"""

KGAT_TRAIN = """
import torch
from model import KGAT

def train(loader, opt, epochs, heads):
    model = KGAT().cuda()
    for epoch in range(epochs):
        for u, pos, neg in loader:
            loss = model(u.cuda(non_blocking=True), pos, neg, mode="{mode}")
            loss.backward()
            opt.step()
"""


def test_a_constant_mode_argument_selects_the_helpers_branch(tmp_path: Path):
    """KGAT: `model(u, pos, neg, mode='train_cf')` runs `forward`'s `if mode == 'train_cf':` branch only; the
    `.cpu()` in `update_attention` (the `update_att` branch, once per epoch) is not this call's."""
    assert (9, "HL007") not in _project(tmp_path, {"model.py": KGAT}, KGAT_TRAIN.format(mode="train_cf"))
    assert (9, "HL007") in _project(tmp_path, {"model.py": KGAT}, KGAT_TRAIN.format(mode="update_att"))


def test_a_running_average_of_read_values_is_a_number():
    """RWKV-v4: `self.avg_loss = now_loss` then `self.avg_loss = self.avg_loss * (1 - f) + now_loss * f` with
    `now_loss` summed from `.item()` reads: a Python float, whatever its name says; averaging a tensor keeps a
    tensor."""
    src = """
    import math
    import torch

    class Trainer:
        def train(self, model, loader, opt):
            for it, (x, y) in enumerate(loader):
                loss = model(x.cuda(non_blocking=True)).mean()
                loss.backward()
                opt.step()
                now_loss = {now}
                if self.avg_loss < 0:
                    self.avg_loss = now_loss
                else:
                    f = 1.0 / (it + 1)
                    self.avg_loss = self.avg_loss * (1.0 - f) + now_loss * f
                print(f"ppl {{math.exp(self.avg_loss):.4f}}")
    """
    assert all(c not in ("HL005", "HL001", "HL002") for _, c in found(src.format(now="loss.item()")) if _ != 11)
    assert (12, "HL005") in found(src.format(now="loss.detach()"))


def test_a_same_file_module_instance_returns_tensors():
    """pytorch-wgan: `self.D = Discriminator(...)` (a same-file class with a `forward`), then `d_loss_real =
    self.D(images).mean()` after `d_loss_real = 0` before the loop: the f-string prints a tensor every step."""
    src = """
    import torch
    from torch import nn

    class Discriminator(nn.Module):
        def forward(self, x):
            return self.main(x)

    class WGAN:
        def __init__(self):
            self.D = Discriminator().cuda()

        def train(self, loader, opt):
            d_loss_real = 0
            for images in loader:
                d_loss_real = self.D(images.cuda(non_blocking=True))
                d_loss_real = d_loss_real.mean()
                d_loss_real.backward()
                opt.step()
                print(f"loss_real: {d_loss_real}")
    """
    assert (20, "HL002") in found(src)
    # (without the module, and without its own `.backward()`, which would make it a tensor by itself: kinds; and
    # without the `.cuda()`, which only a module's instance has: `self.D = X().cuda()` is one, forks.module_instance)
    assert (20, "HL002") not in found(
        src.replace("class Discriminator(nn.Module)", "class Discriminator")
        .replace("Discriminator().cuda()", "Discriminator()")
        .replace("def forward", "def run")
        .replace("d_loss_real.backward()", "g_loss.backward()")
    )


def test_a_value_a_helper_hands_back_only_at_a_log_step_is_a_gate():
    """disentangling-vae: `storer = self._pre_call(is_train, storer)` returns None except when `n %
    record_every == 1`; `if storer is not None: storer['loss'].append(loss.item())` runs at that boundary, also
    inside `_kl_normal_loss(*latent_dist, storer)` that it is handed to. A helper with no gate in it decides
    nothing."""
    src = """
    import torch

    def _kl_normal_loss(mean, logvar, storer=None):
        kl = (mean.pow(2) + logvar.exp()).mean()
        if storer is not None:
            storer["kl"].append(kl.item())
        return kl

    class Loss:
        def _pre_call(self, is_train, storer):
            self.n += 1
            if {test}:
                return storer
            return None

        def __call__(self, recon, latent_dist, storer):
            storer = self._pre_call(True, storer)
            loss = recon.mean() + _kl_normal_loss(*latent_dist, storer)
            if storer is not None:
                storer["loss"].append(loss.item())
            return loss

    def train(model, loader, opt, storer):
        loss_f = Loss()
        for x in loader:
            loss = loss_f(model(x.cuda(non_blocking=True)), model.latent, storer)
            loss.backward()
            opt.step()
    """
    gated = found(src.format(test="self.n % self.record_every == 1"))
    assert (7, "HL001") not in gated and (21, "HL001") not in gated
    every = found(src.format(test="is_train"))
    assert (7, "HL001") in every and (21, "HL001") in every


XLM_TRAINER = """
import numpy as np
import torch
from utils import to_cuda

class Trainer:
    def mask_out(self, x, lengths):
        pred_mask = torch.from_numpy((np.random.rand(*x.size()) <= 0.15).astype(np.uint8))
        n = pred_mask.sum().item()
        return x, pred_mask

    def mlm_step(self, x, lengths):
        x, pred_mask = self.mask_out(x, lengths)
        x, pred_mask, lengths = to_cuda(x, pred_mask, lengths)
        loss = self.model(x, pred_mask).mean()
        self.stats.append(loss.item())
        self.optimize(loss)

    def optimize(self, loss):
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
"""

XLM_UTILS = """
def to_cuda(*args):
    return [None if x is None else x.cuda() for x in args]
"""

XLM_TRAIN = """
import torch
from trainer import Trainer

def main(params, batches):
    trainer = Trainer()
    for epoch in range(params.epochs):
        for x, lengths in batches:
            trainer.mlm_step(x, lengths)
"""


def test_a_method_another_linted_file_calls_every_step_reports_in_its_own_file(tmp_path: Path):
    """XLM: `train.py` calls `trainer.mlm_step(...)` in its loop; `xlm/trainer.py` is linted
    in the same run. The step's `loss.item()` is reported once, in trainer.py where it is written, and the
    reads `mask_out` makes on the host batch (before `to_cuda`) are not device syncs. Linted alone, train.py
    gets the read at its call site."""
    (tmp_path / "README.md").write_text("x\n")
    for name, text in {"trainer.py": XLM_TRAINER, "utils.py": XLM_UTILS, "train.py": XLM_TRAIN}.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    both = [(Path(f.path).name, f.line, f.code) for f in lint_paths([tmp_path / "train.py", tmp_path / "trainer.py"])]
    assert ("trainer.py", 16, "HL001") in both
    assert ("trainer.py", 9, "HL001") not in both
    assert not any(name == "train.py" and code == "HL001" for name, _, code in both)
    alone = [(f.line, f.code) for f in lint_paths([tmp_path / "train.py"])]
    assert (9, "HL001") in alone


DASSL_BASE = """
import torch

class TrainerXU:
    def run_epoch(self):
        train_loader_x_iter = iter(self.train_loader_x)
        for self.batch_idx in range(self.num_batches):
            batch_x = next(train_loader_x_iter)
            loss_summary = self.forward_backward(batch_x)

    def forward_backward(self, batch_x):
        raise NotImplementedError

    def parse_batch_train(self, batch_x):
        input_x = batch_x["img"].to(self.device)
        return input_x

    def model_backward_and_update(self, loss):
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
"""

DASSL_SUB = """
import torch
from base import TrainerXU

class FixMatch(TrainerXU):
    def forward_backward(self, batch_x):
        input_x = self.parse_batch_train(batch_x)
        loss_x = self.model(input_x).mean()
        self.model_backward_and_update(loss_x)
        return {"loss_x": loss_x.item()}
"""


def test_an_override_of_a_method_the_base_class_calls_every_step_is_hot(tmp_path: Path):
    """Dassl: `TrainerXU.run_epoch` (base.py) fetches `next(train_loader_x_iter)` every step and calls
    `self.forward_backward(batch)`, which FixMatch (fixmatch.py) overrides: its `loss_x.item()` is per step, and
    the base's `parse_batch_train` it calls copies the batch blocking every step."""
    (tmp_path / "README.md").write_text("x\n")
    (tmp_path / "base.py").write_text(textwrap.dedent(DASSL_BASE))
    (tmp_path / "fixmatch.py").write_text(textwrap.dedent(DASSL_SUB))
    hits = {(Path(f.path).name, f.line, f.code) for f in lint_paths([tmp_path / "base.py", tmp_path / "fixmatch.py"])}
    assert ("fixmatch.py", 10, "HL001") in hits
    assert ("base.py", 15, "HL012") in hits
    (tmp_path / "base.py").write_text(textwrap.dedent(DASSL_BASE).replace("next(train_loader_x_iter)", "None"))
    hits = {(Path(f.path).name, f.line, f.code) for f in lint_paths([tmp_path / "base.py", tmp_path / "fixmatch.py"])}
    assert ("fixmatch.py", 10, "HL001") not in hits


SCHED = """
import torch
from torch import nn

class Renderer(nn.Module):
    def sched_step(self, steps=1):
        if self.sched is None:
            return
        self.iter_idx += steps
        while self.iter_idx.item() >= self.sched[0]:
            self.n_coarse = self.sched[1]
"""


def test_an_early_return_on_an_option_switches_the_helpers_reads(tmp_path: Path):
    """pixel-nerf: `renderer.sched_step(b)` every step, whose `if self.sched is None: return` ends it unless a
    schedule was configured: the `.item()` after it is not known to run every step."""
    script = """
    import torch
    from render import Renderer

    def train(model, loader, opt):
        renderer = Renderer().cuda()
        for x in loader:
            loss = model(x.cuda(non_blocking=True)).mean()
            loss.backward()
            opt.step()
            renderer.sched_step(8)
    """
    assert (11, "HL001") not in _project(tmp_path, {"render.py": SCHED}, script)
    unguarded = SCHED.replace("        if self.sched is None:\n            return\n", "")
    assert (11, "HL001") in _project(tmp_path, {"render.py": unguarded}, script)


def test_a_flag_the_hot_call_leaves_at_its_default_gates_its_branch():
    """nanoT5: `def forward(model, batch, calc_acc=False)` is called every step as `forward(model, batch)` and
    from the evaluation with `calc_acc=True`: the accuracy `.item()` under `if calc_acc:` is the evaluation's.
    Its loss `.item()` runs every step. The file drives Accelerate (`accelerator.backward`): device code."""
    src = """
    import torch

    def forward(model, batch, calc_acc=False):
        outputs = model(**batch)
        loss = outputs.loss
        stats = {{"loss": loss.detach().float().item()}}
        if calc_acc:
            stats["acc"] = (outputs.logits.argmax(-1) == batch["labels"]).sum().item()
        return loss, stats

    def evaluate(model, loader):
        for batch in loader:
            forward(model, batch, calc_acc=True)

    def train(model, loader, optimizer, accelerator):
        for batch in loader:
            loss, stats = forward(model, batch{extra})
            accelerator.backward(loss)
            optimizer.step()
    """
    hits = found(src.format(extra=""))
    assert (7, "HL001") in hits and (9, "HL001") not in hits
    assert (9, "HL001") in found(src.format(extra=", True"))


def test_a_mask_drawn_on_the_host_in_the_step_is_no_sync_but_a_copy_when_indexing():
    """BackgroundMattingV2: `m = torch.rand(len(x)) < 0.3; if m.any(): x[m] = ...`: the test reads a host mask
    (no HL005), and indexing the device batch with it copies the mask to the device every step (HL024). Mario
    PPO: a slice of a host `torch.randperm` indexing the device rollout. A mask made once before the loop is
    not judged."""
    src = """
    import torch

    def train(model, loader, opt):
        keep = torch.arange(10) != 3
        for x in loader:
            x = x.cuda(non_blocking=True)
            m = torch.rand(len(x)) < 0.3
            if m.any():
                x[m] = x[m].flip(-1)
            idx = torch.randperm(len(x))[:4]
            sub = x[idx]
            fixed = x[keep]
            loss = model(x).mean() + model(sub).mean()
            loss.backward()
            opt.step()
    """
    hits = found(src)
    assert (9, "HL005") not in hits
    assert (10, "HL024") in hits and (12, "HL024") in hits
    assert (13, "HL024") not in hits


def test_a_callable_saver_object_is_judged_by_its_call(tmp_path: Path):
    """fasterrcnn-pytorch-training-pipeline: `save_best_model = SaveBestModel()` then `save_best_model(model,
    mAP, epoch, OUT_DIR)` in the epoch loop, whose `__call__` writes `f"{OUT_DIR}/best_model.pth"`: the epoch
    goes into the state only, the file is the same every time. A path built from the epoch is a new file."""
    saver = """
    import torch

    class SaveBestModel:
        def __init__(self, best=0.0):
            self.best = best

        def __call__(self, model, current, epoch, out_dir):
            if current > self.best:
                self.best = current
                torch.save({{"epoch": epoch, "model": model.state_dict()}}, f"{{out_dir}}/{name}")
    """
    script = """
    import torch
    from utils import SaveBestModel

    def train(model, loader, opt, out_dir, epochs):
        save_best_model = SaveBestModel()
        for epoch in range(epochs):
            for x in loader:
                loss = model(x.cuda(non_blocking=True)).mean()
                loss.backward()
                opt.step()
            save_best_model(model, evaluate(model), epoch, out_dir)
    """
    assert (12, "HL021") in _project(tmp_path, {"utils.py": saver.format(name="best_model.pth")}, script)
    assert (12, "HL021") not in _project(tmp_path, {"utils.py": saver.format(name="best_{epoch}.pth")}, script)


def test_a_method_of_a_fresh_project_object_is_followed(tmp_path: Path):
    """KoSpeech: `Checkpoint(model, optimizer, epoch).save()` in the epoch loop writes `os.path.join(os.getcwd(),
    self.MODEL_NAME)`: the epoch goes into the object, the file is the same every time."""
    ckpt = """
    import os
    import torch

    class Checkpoint:
        MODEL_NAME = "model.pt"

        def __init__(self, model, optimizer, epoch):
            self.model, self.optimizer, self.epoch = model, optimizer, epoch

        def save(self):
            torch.save(self.model, os.path.join(os.getcwd(), self.MODEL_NAME))
    """
    script = """
    import torch
    from checkpoint import Checkpoint

    def train(model, loader, opt, epochs):
        for epoch in range(epochs):
            for x in loader:
                loss = model(x.cuda(non_blocking=True)).mean()
                loss.backward()
                opt.step()
            Checkpoint(model, opt, epoch).save()
    """
    hits = _project(tmp_path, {"checkpoint.py": ckpt}, script)
    assert (11, "HL021") in hits
    assert (11, "HL021") not in _project(tmp_path, {"checkpoint.py": ckpt.replace("save(self)", "load(self)")}, script)


def test_a_save_into_a_directory_named_by_the_time_is_fresh():
    """pytorch-seq2seq: `Checkpoint.save` makes `self._path = join(root, "checkpoints", time.strftime(...))`
    and writes into it: a new directory at each save, nothing overwritten."""
    src = """
    import os
    import time
    import torch

    class Checkpoint:
        def save(self, root):
            date_time = time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime())
            self._path = os.path.join(root, "checkpoints", {stamp})
            path = self._path
            torch.save(self.model.state_dict(), os.path.join(path, "model.pt"))

    def train(model, loader, opt, root):
        for step, x in enumerate(loader):
            loss = model(x.cuda(non_blocking=True)).mean()
            loss.backward()
            opt.step()
            if step % 1000 == 0:
                Checkpoint().save(root)
    """
    assert (11, "HL021") not in found(src.format(stamp="date_time"))
    assert (11, "HL021") in found(src.format(stamp='"latest"'))
