"""Patterns found while reviewing the evaluation set in session 15 and scoring held-out batches BH and BI, in our
own words. Each test fails without the change it names."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_source
from tests.unit.helpers import lint_project


def found(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


def test_comparing_with_a_string_reads_no_tensor():
    """`if self._loss == "adaptive_hinge":` tests an option whose name ends in `_loss` (spotlight): a tensor is
    never compared with a string, so it is no host read (forks.compare_kind); the loss read beside it is."""
    src = """
    import torch

    class Model:
        def __init__(self, net, loss="pointwise"):
            self._net, self._loss = net, loss

        def fit(self, loader):
            for batch in loader:
                pred = self._net(batch.cuda(non_blocking=True))
                if self._loss == "adaptive_hinge":
                    pred = pred.max(0)[0]
                loss = self._loss_func(pred)
                print(loss.item())
                loss.backward()
                self._optimizer.step()
    """
    hits = found(src)
    assert (11, "HL005") not in hits
    assert (14, "HL001") in hits


def test_comparing_a_tensor_with_none_is_python_truth():
    """`if p.grad != None:` (DiffuSeq) gives Python's `True` for a tensor, no element-wise test and no host read
    (forks.compare_kind)."""
    src = """
    import torch

    def train(model, loader, opt):
        for x in loader:
            loss = model(x.cuda(non_blocking=True)).mean()
            loss.backward()
            for p in model.parameters():
                if p.grad != None:
                    p.grad.mul_(0.5)
            opt.step()
    """
    assert not [h for h in found(src) if h[1] == "HL005"]


def test_a_model_output_set_inside_a_with_block_is_on_the_device():
    """`with autocast(): out = self.model(batch)`, then `out["loss"].detach().to(self.rank)` (VoiceCraft): a
    module's outputs live on its device, and a `with` body always runs, so the `.to()` copies nothing
    (provenance.MODULE_CALL, syntax._last_binding). A host-made tensor's copy beside it is still found."""
    src = """
    import torch

    class Trainer:
        def train(self):
            for batch in self.loader:
                with torch.autocast("cuda"):
                    out = self.model(batch)
                loss = out["loss"].detach().to(self.rank)
                ones = torch.ones(4).to(self.rank)
                out["loss"].backward()
                self.optimizer.step()
    """
    hits = found(src)
    assert (9, "HL012") not in hits
    assert (10, "HL012") in hits


def test_zeroing_an_attack_perturbation_gradient_is_not_zero_grad():
    """`delta = torch.zeros_like(X).cuda()` ... `delta.grad.zero_()` (a PGD attack in Bag-of-Tricks-for-AT)
    zeroes an input perturbation's gradient, not a parameter's (syntax.made_here); `p.grad.zero_()` over the
    model's parameters is still HL013."""
    src = """
    import torch

    def train(model, loader, opt):
        for X, y in loader:
            X = X.cuda(non_blocking=True)
            delta = torch.zeros_like(X).cuda()
            delta.requires_grad = True
            for _ in range(10):
                model(X + delta).sum().backward()
                delta.grad.zero_()
            loss = model(X + delta).sum()
            loss.backward()
            opt.step()
            for p in model.parameters():
                p.grad.zero_()
    """
    hits = [h for h in found(src) if h[1] == "HL013"]
    assert hits == [(16, "HL013")]


def test_a_class_of_the_file_shadows_one_a_star_import_brought(tmp_path: Path):
    """`from utils import *` brings `utils.Batches`, but the file's own `class Batches` below it is what
    `Batches(...)` runs (Bag-of-Tricks-for-AT): the helper's loader options are not this call's
    (imports.Project._read_imports)."""
    files = {
        "utils.py": """
        import torch

        class Batches:
            def __init__(self, dataset, batch_size, num_workers=4):
                self.loader = torch.utils.data.DataLoader(dataset, batch_size, num_workers=num_workers)
        """,
    }
    script = """
    import torch
    from utils import *

    class Batches:
        def __init__(self, dataset, batch_size, num_workers=0):
            self.dataset = dataset

    def main(model, opt, train_set):
        batches = Batches(train_set, 128, num_workers=4)
        for epoch in range(10):
            for x in batches.dataset:
                model(x.cuda(non_blocking=True)).sum().backward()
                opt.step()
    """
    assert not [h for h in lint_project(tmp_path, files, script) if h[1] == "HL011"]


def test_a_caller_turning_gradients_off_with_set_grad_enabled_covers_its_evaluation():
    """`with torch.set_grad_enabled(False): self.eval_epoch(loader)` (PointRCNN's trainer): the evaluation
    function needs no `no_grad` of its own (structure._caller_has)."""
    src = """
    import torch

    class Trainer:
        def eval_epoch(self, loader):
            self.model.eval()
            for x in loader:
                self.model(x.cuda(non_blocking=True))

        def train(self, loader, test_loader):
            for epoch in range(10):
                for x in loader:
                    self.model(x.cuda(non_blocking=True)).sum().backward()
                    self.optimizer.step()
                with torch.set_grad_enabled(False):
                    self.eval_epoch(test_loader)
    """
    assert not [h for h in found(src) if h[1] == "HL018"]


def test_an_element_of_a_host_tensor_zipped_in_a_loop_is_read_without_a_sync():
    """`for idx, (seq, seqlen) in enumerate(zip(words, lengths)): seqlen.item()` with `lengths =
    torch.LongTensor(...)` built on the host (NCRFpp's batchify): no device read (provenance._loop_source);
    the same loop over a device tensor is still HL001."""
    src = """
    import torch

    def train(model, batches, opt):
        for words in batches:
            lengths = torch.LongTensor([len(w) for w in words])
            on_gpu = lengths.cuda(non_blocking=True)
            for idx, (seq, seqlen) in enumerate(zip(words, lengths)):
                n = seqlen.item()
            for idx, (seq, on_gpu_len) in enumerate(zip(words, on_gpu)):
                m = on_gpu_len.item()
            model(on_gpu).sum().backward()
            opt.step()
    """
    hits = [h for h in found(src) if h[1] == "HL001"]
    assert hits == [(11, "HL001")]


def test_a_tuple_of_numbers_returned_by_a_same_file_step_is_no_tensor():
    """`outputs = train(epoch)` with `return (loss.item(), acc.item(), lr, t)`, then `"{:.4f}".format(outputs[0])`
    (DropEdge): a tuple of Python numbers is a number's container, whichever function's kinds were worked out
    first (kinds.return_kind is not kept when it read a provisional info)."""
    src = """
    import time
    import torch

    def train(epoch, feats):
        t = time.time()
        optimizer.zero_grad()
        outputs = model(feats.cuda(non_blocking=True))
        loss = outputs.sum()
        loss.backward()
        optimizer.step()
        return (loss.item(), outputs.mean().item(), time.time() - t)

    for epoch in range(100):
        outputs = train(epoch, feats)
        print("loss {:.4f} acc {:.4f} t {:.2f}".format(outputs[0], outputs[1], outputs[2]))
    """
    hits = found(src)
    assert not [h for h in hits if h[1] == "HL002"]
    assert (12, "HL001") in hits


def test_reads_on_the_validation_side_of_a_phase_test_are_not_per_step():
    """`for split in splits:` running a train and a valid pass over one loop body, and `if split == 'valid':`
    reading the batch for its sentences (Sentence-VAE): only evaluation takes that side (gates._phase_branch).
    The same read under `if split == 'train':` runs every training step."""
    src = """
    import torch

    def fit(model, loaders, opt):
        for epoch in range(10):
            for split in ("train", "valid"):
                for batch in loaders[split]:
                    loss = model(batch.cuda(non_blocking=True)).sum()
                    if split == "train":
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
                        a = loss.item()
                    if split == "valid":
                        b = loss.item()
                    if split != "train":
                        c = loss.item()
    """
    hits = [h for h in found(src) if h[1] == "HL001"]
    assert hits == [(13, "HL001")]


def test_a_loader_handed_once_to_an_evaluation_is_one_pass():
    """`test_loader` given to `utils.validate(...)` once, after the epochs (TLlib's DANN): one pass, so its
    workers are forked once and `persistent_workers` is not asked for (loaders.ONE_PASS); a loader handed to an
    unknown `trainer.fit(...)` may still run epochs."""
    src = """
    import torch
    from torch.utils.data import DataLoader
    import utils

    def main(model, test_set, train_set, trainer):
        test_loader = DataLoader(test_set, batch_size=64, num_workers=4, pin_memory=True)
        train_loader = DataLoader(train_set, batch_size=64, num_workers=4, pin_memory=True)
        trainer.fit(model.cuda(), train_loader)
        acc = utils.validate(test_loader, model)
    """
    hits = [h for h in found(src) if h[1] == "HL011"]
    assert hits == [(8, "HL011")]


def test_an_agents_act_and_step_run_every_environment_step():
    """An agent class whose `learn` is a step, with `act(state)` and `step(...)` called by a notebook elsewhere
    (Udacity's DQN): `act`'s host-made state copy and the replay sample `step` reaches through `if self.t_step ==
    0: self.learn(...)` (an update cadence, not the first step only) are per step (analysis.AGENT_STEP,
    gates.is_update_gate). The action's trip to the host that `act` returns is the environment's input."""
    src = """
    import numpy as np
    import torch

    device = torch.device("cuda:0")

    class Agent:
        def step(self, state, action, reward):
            self.memory.add(state, action, reward)
            self.t_step = (self.t_step + 1) % 4
            if self.t_step == 0:
                states = torch.from_numpy(np.vstack(self.memory.sample())).float().to(device)
                self.learn(states)

        def act(self, state):
            state = torch.from_numpy(state).float().unsqueeze(0).to(device)
            with torch.no_grad():
                action = self.qnetwork(state).cpu().data.numpy()
            return np.clip(action, -1, 1)

        def learn(self, states):
            loss = self.qnetwork(states).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
    """
    hits = found(src)
    assert (12, "HL012") in hits and (16, "HL012") in hits
    assert not [h for h in hits if h[1] == "HL007"]


def test_a_save_helper_named_by_the_step_through_a_helper_beside_it(tmp_path: Path):
    """`save_checkpoint(model, opt, global_step, out, scaler=s.state_dict() if amp else None)` whose helper
    builds `checkpoint_{}.pth.tar`.format(current_step) and hands it to `save_model(..., path)` (Mozilla TTS):
    a new file each save; its `save_best_model` writing `best_model.pth.tar` through the same `save_model` is in
    place (saves.path_params follows the helper beside the called one; a `None` branch names no file)."""
    files = {
        "io_utils.py": """
        import os
        import torch

        def save_model(model, optimizer, step, path):
            torch.save({"model": model.state_dict(), "step": step}, path)

        def save_checkpoint(model, optimizer, current_step, output_folder, scaler=None):
            file_name = "checkpoint_{}.pth.tar".format(current_step)
            checkpoint_path = os.path.join(output_folder, file_name)
            save_model(model, optimizer, current_step, checkpoint_path)

        def save_best_model(model, optimizer, current_step, output_folder):
            checkpoint_path = os.path.join(output_folder, "best_model.pth.tar")
            save_model(model, optimizer, current_step, checkpoint_path)
        """,
    }
    script = """
    import torch
    from io_utils import save_best_model, save_checkpoint

    def train(model, loader, optimizer, scaler, amp, out):
        step = 0
        for epoch in range(10):
            for x in loader:
                model(x.cuda(non_blocking=True)).sum().backward()
                optimizer.step()
                step += 1
                if step % 1000 == 0:
                    save_checkpoint(model, optimizer, step, out, scaler=scaler.state_dict() if amp else None)
            save_best_model(model, optimizer, step, out)
    """
    hits = [h for h in lint_project(tmp_path, files, script) if h[1] == "HL021"]
    assert hits == [(14, "HL021")]


def test_a_save_path_with_a_counter_or_a_step_directory_is_new_each_time():
    """`"/SuperSloMo" + str(checkpoint_counter) + ".ckpt"` with the counter advanced after each save, and
    `checkpoint_dir = get_step_checkpoint_dir(out, steps, step)` (LeRobot): a new file each save (saves.VARYING,
    formats_a_counter)."""
    src = """
    import torch

    def train(model, loader, opt, out, steps):
        checkpoint_counter = 0
        step = 0
        for epoch in range(10):
            for x in loader:
                model(x.cuda(non_blocking=True)).sum().backward()
                opt.step()
                step += 1
            torch.save(model.state_dict(), out + "/SuperSloMo" + str(checkpoint_counter) + ".ckpt")
            checkpoint_counter += 1
            checkpoint_dir = get_step_checkpoint_dir(out, steps, step)
            torch.save(model.state_dict(), checkpoint_dir / "model.pt")
    """
    assert not [h for h in found(src) if h[1] == "HL021"]


def test_a_loader_batch_the_loop_never_moves_is_on_the_host():
    """`data = next batch`; `y_len = data["len"]` sorted and read with `.numpy().tolist()` while only `x` is
    moved with `.cuda()` (GraphRNN): the loader yields host tensors, so the reads are no syncs
    (provenance._unmoved_batch, syntax.chained_read). Read after the batch is moved, the same is a sync."""
    src = """
    import torch

    def train_epoch(model, data_loader, opt):
        for batch_idx, data in enumerate(data_loader):
            y_len, sort_index = torch.sort(data["len"], 0, descending=True)
            lengths = y_len.numpy().tolist()
            x = torch.index_select(data["x"], 0, sort_index).cuda()
            model(x, lengths).sum().backward()
            opt.step()
        for batch_idx, batch in enumerate(data_loader):
            batch = batch.cuda()
            n = batch.sum().cpu()
            model(batch).sum().backward()
            opt.step()
    """
    hits = [h for h in found(src) if h[1] == "HL007"]
    assert hits == [(13, "HL007")]


def test_tensorboard_loggers_log_value_formats_what_it_is_given():
    """`log_value(name, z_mu_mean, step)` (tensorboard_logger, GraphRNN) given a device tensor every step is a
    library logger's formatting read (HL002); given `loss.data[0]`, PyTorch 0.3's `.item()`, it is that read
    (HL001) and not a second finding (formats.LOG_FUNCS)."""
    src = """
    import torch
    from tensorboard_logger import log_value

    def train(model, loader, opt):
        for i, x in enumerate(loader):
            z = model(x.cuda(non_blocking=True))
            loss = z.sum()
            loss.backward()
            opt.step()
            z_mu_mean = torch.mean(z.data)
            log_value("z_mu_mean", z_mu_mean, i)
            log_value("loss", loss.data[0], i)
    """
    hits = found(src)
    assert (12, "HL002") in hits and (13, "HL001") in hits
    assert (13, "HL002") not in hits


def test_a_dict_literal_of_losses_reduced_and_logged_is_read_by_the_meter(tmp_path: Path):
    """`loss_dict = {"loss_mask": loss_mask, "loss_dice": loss_dice}`, `reduce_dict(loss_dict)`, then the
    project's `metric_logger.update(**loss_dict_reduced)` whose `update` calls `.item()` (SAM-HQ): one read per
    step at the call (kinds: a dict of tensors is indexed and reduced like a tensor)."""
    files = {
        "misc.py": """
        import torch

        def reduce_dict(d):
            return d

        class MetricLogger:
            def update(self, **kwargs):
                for k, v in kwargs.items():
                    if isinstance(v, torch.Tensor):
                        v = v.item()
                    self.meters[k].update(v)
        """,
    }
    script = """
    import torch
    import misc

    def train(model, loader, optimizer):
        metric_logger = misc.MetricLogger()
        for x, y in loader:
            out = model(x.cuda(non_blocking=True))
            loss_mask, loss_dice = out.mean(), out.sum()
            loss = loss_mask + loss_dice
            loss_dict = {"loss_mask": loss_mask, "loss_dice": loss_dice}
            loss_dict_reduced = misc.reduce_dict(loss_dict)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            metric_logger.update(**loss_dict_reduced)
    """
    assert (16, "HL001") in lint_project(tmp_path, files, script)


def test_building_an_optimizer_wrapper_is_not_taking_its_step(tmp_path: Path):
    """`self._model_opt = tools.Optimizer(...)` in a model's `__init__`, whose `__call__` runs backward and the
    step with host reads (Dreamer): constructing it runs none of that, so `__init__` is not a step and the
    reads are not reported there (imports.remote_steps); calling the instance in `_train` is."""
    files = {
        "tools.py": """
        import torch

        class Optimizer:
            def __init__(self, params, lr):
                self._opt = torch.optim.Adam(params, lr)

            def __call__(self, loss, params):
                self._opt.zero_grad()
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(params, 100)
                self._opt.step()
                return {"grad_norm": norm.item()}
        """,
    }
    script = """
    import torch
    import tools

    class WorldModel(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.net = torch.nn.Linear(4, 4).cuda()
            self._model_opt = tools.Optimizer(self.parameters(), config.lr)

        def _train(self, data):
            loss = self.net(data.cuda(non_blocking=True)).sum()
            return self._model_opt(loss, self.parameters())

    def main(config, batches):
        wm = WorldModel(config)
        for data in batches:
            metrics = wm._train(data)
    """
    hits = lint_project(tmp_path, files, script)
    assert not [h for h in hits if h[0] == 9]
    assert (13, "HL001") in hits


def test_a_batch_unpacked_in_the_loop_header_and_never_moved_is_on_the_host():
    """`for src, target, euler in tqdm(train_loader):` moving `src` and `target` but not `euler` (DCP): `euler`
    is the loader's host tensor, and `euler.numpy()` copies nothing from the device (provenance._loop_source)."""
    src = """
    import torch
    from tqdm import tqdm

    def train_one_epoch(net, train_loader, opt):
        for src, target, euler in tqdm(train_loader):
            src = src.cuda()
            target = target.cuda()
            loss = net(src, target).sum()
            loss.backward()
            opt.step()
            angles = euler.numpy()
            pred = target.cpu().numpy()
    """
    hits = [h for h in found(src) if h[1] == "HL007"]
    assert hits == [(13, "HL007")]


def test_as_tensor_of_a_device_tensor_stays_on_the_device():
    """`torch.as_tensor(v).reshape(-1).float().cpu().numpy().tolist()` of a metric computed on the GPU (HALOs):
    `as_tensor` of a tensor keeps its device, so `.cpu()` is a sync (provenance: only of a list or number is it
    made on the host); `torch.as_tensor([1, 2])` is a host tensor."""
    src = """
    import torch

    def train(model, loader, opt):
        for x in loader:
            loss = model(x.cuda(non_blocking=True)).mean()
            loss.backward()
            opt.step()
            kept = torch.as_tensor(loss).reshape(-1).float().cpu().numpy().tolist()
            made = torch.as_tensor([1, 2]).cpu().numpy()
    """
    hits = [h for h in found(src) if h[1] == "HL007"]
    assert hits == [(9, "HL007")]


def test_a_loader_class_of_the_file_that_moves_its_batches_yields_device_tensors():
    """`class Batches` whose `__iter__` yields `x.to(device)` (Bag-of-Tricks-for-AT): its batches are on the
    device though the loop never moves them, so indexing with `y` copies no host index (provenance.
    _unmoved_batch); a plain loader's unmoved batch is still a host tensor."""
    loop = """
    def train(model, batches, opt, delta):
        for batch in batches:
            X, y = batch["input"], batch["target"]
            out = model(X + delta.cuda())
            loss = out[:, y].sum()
            loss.backward()
            opt.step()
    """
    own_loader = """
    import torch

    class Batches:
        def __iter__(self):
            return ({"input": x.to("cuda"), "target": y.to("cuda")} for (x, y) in self.dataloader)
    """
    assert (7, "HL024") in found("import torch\n" + textwrap.dedent(loop))
    assert not [h for h in found(own_loader + loop) if h[1] == "HL024"]


def test_an_agents_evaluation_action_and_its_returned_action_are_not_per_step_reads():
    """Beside `sample_action`, CURL's `select_action` is the evaluation's (analysis: not an entry), while
    `sample_action` copies its observation every environment step; `explore` returning `action.cpu().numpy()`
    (SLAC) hands the environment its input (drivers.feeds_env)."""
    src = """
    import torch

    class Agent:
        def select_action(self, obs):
            obs = torch.FloatTensor(obs).to(self.device)
            return self.actor(obs).cpu().data.numpy().flatten()

        def sample_action(self, obs):
            obs = torch.FloatTensor(obs).to(self.device)
            return self.actor(obs).cpu().data.numpy().flatten()

        def explore(self, ob):
            action = self.actor(torch.tensor(ob, device=self.device))
            return action.cpu().numpy()[0]

        def update(self, replay_buffer):
            loss = self.critic(replay_buffer.sample()).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
    """
    hits = found(src)
    assert (10, "HL012") in hits and (6, "HL012") not in hits
    assert not [h for h in hits if h[1] == "HL007"]


def test_masks_of_a_moved_models_outputs_index_with_a_data_dependent_size():
    """`pointpillars = PointPillars(...).cuda()` is a module, so what its call returns are tensors (kinds.
    _module_instance); `pos_idx = (labels >= 0) & (labels < n)` and `x[w > 0]` index them by a mask even where
    `labels` and `w` come out of an unknown dict (PointPillars); `~torch.eye(n, dtype=torch.bool)` is a mask too
    (VICRegL's `cov[..., non_diag_mask]`)."""
    src = """
    import torch

    def train(loader, args, opt):
        pointpillars = PointPillars(nclasses=3).cuda()
        for data in loader:
            pred, targets = pointpillars(data["pts"])
            labels = targets["labels"].reshape(-1)
            weights = targets["weights"].reshape(-1)
            pos_idx = (labels >= 0) & (labels < args.nclasses)
            a = pred[pos_idx]
            b = pred[weights > 0]
            non_diag = ~torch.eye(4, device=pred.device, dtype=torch.bool)
            c = pred[..., non_diag]
            (a.sum() + b.sum() + c.sum()).backward()
            opt.step()
    """
    hits = [h for h in found(src) if h[1] == "HL006"]
    assert hits == [(11, "HL006"), (12, "HL006"), (14, "HL006")]


def test_pin_memory_false_written_out_is_not_pinned():
    """`DataLoader(ds, num_workers=4, pin_memory=False)` in CUDA code (baby-llama2): the keyword is there, but it
    says unpinned (loaders.loader_missing)."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    def main(model, ds, opt):
        loader = DataLoader(ds, batch_size=8, num_workers=4, pin_memory=False, persistent_workers=True)
        for epoch in range(10):
            for x in loader:
                model(x.cuda(non_blocking=True)).sum().backward()
                opt.step()
    """
    assert (6, "HL011") in found(src)


def test_a_project_logger_that_writes_only_under_its_own_period(tmp_path: Path):
    """`logger.log_step(phase, step, losses, {"mags": Z[:1]})` whose `log_step` writes only under `if step % 1000
    == 0:` (dc-tts): the call formats nothing every step (effects.quiet_logger); a logger writing every call
    is still HL002."""
    files = {
        "logger.py": """
        class Logger:
            def log_step(self, step, image_dict):
                if step % 1000 == 0:
                    for key in sorted(image_dict):
                        self.writer.add_image(key, image_dict[key], step)

            def log_now(self, step, image_dict):
                for key in sorted(image_dict):
                    self.writer.add_image(key, image_dict[key], step)
        """,
    }
    script = """
    import torch
    from logger import Logger

    def train(model, loader, opt):
        logger = Logger()
        for step, x in enumerate(loader):
            Z = model(x.cuda(non_blocking=True))
            Z.sum().backward()
            opt.step()
            logger.log_step(step, {"mags": Z[:1]})
            logger.log_now(step, {"mags": Z[:1]})
    """
    hits = [h for h in lint_project(tmp_path, files, script) if h[1] == "HL002"]
    assert hits == [(12, "HL002")]
