"""Lint's cross-file pass: a helper of the script's own project, called every step from the hot loop, is
analysed as hot and its host reads are reported at the call site; without the project on disk, or for a
helper called at a boundary, nothing is reported. Reference: the same helper pasted into the script."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

from hotloop.lint import lint_source


def _lint(script: Path) -> tuple[dict[tuple[int, str], str], Callable[[str], int]]:
    """The script's findings as {(line, code): message}, and `at(text)`: the first line holding `text`."""
    found = {(f.line, f.code): f.message for f in lint_source(script.read_text(), str(script))}
    lines = script.read_text().splitlines()
    return found, lambda text: next(i + 1 for i, line in enumerate(lines) if text in line)


HELPERS = """
import torch

def grad_stats(named_params):
    return [float(torch.norm(p.grad)) for n, p in named_params if p.grad is not None]

def timed(closure):
    out = closure()
    torch.cuda.synchronize()
    return out

def batch_to_device(batch, device):
    return {k: v.to(device) for k, v in batch.items()}

def scaled(x):
    return x * 2

class Gated:
    def __init__(self, balance=False):
        self.balance = balance

    def __call__(self, loss):
        if self.balance:
            print(loss.item())
        return loss

class Criterion:
    def __call__(self, pred, y):
        loss = ((pred - y) ** 2).mean()
        return loss + self.extra(pred)

    def extra(self, pred):
        return pred.abs().sum().item() * 0.0
"""

SCRIPT = """
import torch
from src.utils.helpers import grad_stats, timed, batch_to_device, scaled
from src.utils import helpers as h
import tools

def main(model, loader, opt, device):
    model.to(device)
    crit = h.Criterion()
    gated = h.Gated()
    first, rest = grad_stats(model.named_parameters())
    params = list(model.parameters())
    for step, batch in enumerate(loader):
        batch = batch_to_device(batch, device)
        loss = crit(model(batch["x"]), batch["y"])
        loss.backward()
        opt.step()
        timed(lambda: None)
        z = scaled(loss)
        norms = tools.clip_each(model, 1.0)
        params[0].data.mul_(0.999)
        loss = gated(loss)
        if step % 100 == 0:
            print(grad_stats(model.named_parameters()))
        stats = grad_stats(model.named_parameters())
"""


def _project(tmp_path: Path) -> Path:
    tmp_path = tmp_path / "proj"
    (tmp_path / "src" / "utils").mkdir(parents=True)
    (tmp_path / "src" / "utils" / "helpers.py").write_text(textwrap.dedent(HELPERS))
    (tmp_path / "app").mkdir()
    (tmp_path / "tools.py").write_text(
        "import torch\n\ndef clip_each(model, c):\n    return [p.grad.norm().item() for p in model.parameters()]\n"
    )
    script = tmp_path / "app" / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    return script


def test_helpers_called_every_step_are_reported_at_the_call_site(tmp_path):
    script = _project(tmp_path)
    found, at = _lint(script)

    stats = (at("stats = grad_stats"), "HL001")
    assert stats in found and "helpers.py" in found[stats]  # float(norm) per parameter, inside the helper
    assert (at("timed("), "HL020") in found  # a synchronize inside the helper
    assert (at("batch = batch_to_device"), "HL012") in found  # a batch mover with blocking copies
    assert (at("loss = crit("), "HL001") in found  # the instance's __call__ -> its own extra() reads .item()
    assert (at("norms = tools.clip_each"), "HL001") in found  # `import tools` (no alias), a module beside
    assert not any(line == at("z = scaled") for line, _ in found)  # a helper that reads nothing
    assert not any(line == at("params[0].data") for line, _ in found)  # a call with no name resolves to nothing
    # the boundary call (under `step % 100`) and a read behind the helper's own option (`if self.balance:`,
    # set elsewhere) are not per step
    assert not any(line in (at("print(grad_stats"), at("loss = gated(")) for line, _ in found)


def test_a_lone_file_or_an_unresolvable_import_changes_nothing(tmp_path):
    script = _project(tmp_path)
    assert lint_source(script.read_text(), "<string>") == []
    (tmp_path / "elsewhere").mkdir()
    alone = tmp_path / "elsewhere" / "alone.py"
    alone.write_text(textwrap.dedent(SCRIPT))  # `src.utils` is not beside or above it
    assert lint_source(alone.read_text(), str(alone)) == []


LOADERS = """
import torch
from torch.utils.data import DataLoader

def build_loader(ds, workers=8):
    return DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers)

class Infinite:
    def __init__(self, ds, num_workers):
        self.loader = DataLoader(ds, batch_size=64, num_workers=num_workers, pin_memory=True)
"""

LOADER_SCRIPT = """
import torch
from data.build import build_loader, Infinite

def main(model, ds, opt, epochs):
    model.cuda()
    train_loader = build_loader(ds)
    for epoch in range(epochs):
        for x in train_loader:
            model(x.cuda(non_blocking=True)).backward()
            opt.step()
    quiet = build_loader(ds, workers=0)
    for x in quiet:
        pass
    stream = Infinite(ds, 4)
"""


def test_a_loader_built_by_a_project_helper_is_judged_at_the_call(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "build.py").write_text(textwrap.dedent(LOADERS))
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(LOADER_SCRIPT))
    found = {(f.line, f.code): f.message for f in lint_source(script.read_text(), str(script))}
    lines = script.read_text().splitlines()
    keys = ("train_loader =", "quiet =", "stream =")
    at = {key: next(i + 1 for i, t in enumerate(lines) if key in t) for key in keys}
    message = found[(at["train_loader ="], "HL011")]  # re-iterated every epoch, unpinned in CUDA code
    assert "build.py" in message and "persistent_workers" in message and "pin_memory" in message
    assert (at["quiet ="], "HL011") not in found  # the caller asks for no workers
    assert (at["stream ="], "HL011") not in found  # pinned, and kept on an object we cannot follow: no re-fork seen


def test_a_loader_helper_called_through_star_args_is_linted_without_error(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "make.py").write_text("from torch.utils.data import DataLoader\n\n"
                                               "def make(ds, num_workers):\n"
                                               "    return DataLoader(ds, num_workers=num_workers)\n")  # fmt: skip
    script = tmp_path / "train.py"
    script.write_text("import torch\nfrom data.make import make\n\ndef main(args):\n    loader = make(*args)\n")
    assert [f.code for f in lint_source(script.read_text(), str(script))] == []  # num_workers unknown: no claim


def test_a_package_reexport_is_followed(tmp_path):
    script = _project(tmp_path)
    (tmp_path / "proj" / "src" / "utils" / "__init__.py").write_text("from .helpers import grad_stats\n")
    script.write_text(script.read_text().replace("from src.utils.helpers import grad_stats, timed, batch_to_device, "
                                                 "scaled", "from src.utils import grad_stats"))  # fmt: skip
    found = {(f.line, f.code) for f in lint_source(script.read_text(), str(script))}
    stats = next(i + 1 for i, t in enumerate(script.read_text().splitlines()) if t.strip().startswith("stats ="))
    assert (stats, "HL001") in found


AGENTS = """
import torch

class TD3:
    def __init__(self, actor):
        self.actor = actor

    def train(self, buffer):
        loss = self.actor(buffer).mean()
        loss.backward()
        return loss.item()

    def evaluate_policy(self, obs):
        return self.actor(obs).argmax().item()

    def select_action(self, obs):
        return self.actor(obs).cpu().numpy()

class MetricLogger:
    def update(self, **kwargs):
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor):
                v = v.item()

def move_to_device(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    return {k: move_to_device(v, device) for k, v in batch.items()}
"""

AGENT_SCRIPT = """
import torch
import agents
from agents import MetricLogger, move_to_device

def main(actor, loader, device):
    actor.cuda()
    policy = agents.TD3(actor)
    logger = MetricLogger()
    for step, buffer in enumerate(loader):
        buffer = move_to_device(buffer, device)
        value = policy.train(buffer)
        err = torch.nn.functional.mse_loss(actor(buffer), buffer)
        logger.update(loss=value, lr=0.1)
        logger.update(err=err)
        score = policy.evaluate_policy(buffer)
        action = policy.select_action(buffer)
"""


def test_methods_of_a_project_class_instance_are_followed(tmp_path):
    """`policy = agents.TD3(...)` then `policy.train(buffer)` every step runs `TD3.train` (its `.item()` is
    reported at the call) - and, as `TD3.train` runs backward, makes the loop (no backward of its own, as
    in an RL script) a training loop. Choosing an action reads it for the environment, and an evaluation
    method's reads are its job: not reported. A metric logger's `.item()` under `isinstance(v, torch.Tensor)`
    counts only for a call passing a tensor; a batch mover's `isinstance` walks containers, so its blocking
    copy still counts."""
    (tmp_path / "agents.py").write_text(textwrap.dedent(AGENTS))
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(AGENT_SCRIPT))
    found, at = _lint(script)

    assert "agents.py" in found[(at("value = policy.train"), "HL001")]
    assert (at("logger.update(err=err)"), "HL001") in found
    assert (at("logger.update(loss=value"), "HL001") not in found  # Python floats: nothing is read
    assert not any(line in (at("score = policy.evaluate_policy"), at("action = policy.select")) for line, _ in found)
    assert (at("buffer = move_to_device"), "HL012") in found


def test_an_in_place_save_inside_a_project_helper_is_reported_at_the_call(tmp_path):
    """`policy.save(path)` (TD3) or `save_checkpoint(state)` writing a fixed file from the training loop:
    HL021 at the call, naming the helper's line. A call naming the epoch (`save_checkpoint(state, epoch)`)
    may write a new file each time: no claim when the helper's path is built from its parameters. An
    exporter's `model.bin` is an artefact, not the checkpoint."""
    (tmp_path / "agent.py").write_text(
        textwrap.dedent("""
        import os
        import torch

        class Agent:
            def __init__(self, net):
                self.net = net

            def save(self, filename):
                torch.save(self.net.state_dict(), filename + "_actor")

        def save_checkpoint(state, epoch=0):
            torch.save(state, "checkpoint.pth.tar")

        def save_epoch(state, epoch, out_dir):
            name = f"ckpt_{epoch}.pth"
            with open(os.path.join(out_dir, name), "wb") as f:
                torch.save(state, f)

        def model_export(model, path):
            torch.save(model.state_dict(), path)
    """)
    )
    script = tmp_path / "main.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from agent import Agent, save_checkpoint, save_epoch, model_export

        def main(net, loader, opt, epochs):
            net.cuda()
            policy = Agent(net)
            for epoch in range(epochs):
                for x in loader:
                    net(x.cuda(non_blocking=True)).mean().backward()
                    opt.step()
                policy.save("./models/td3")
                save_checkpoint({"model": net.state_dict()}, epoch)
                save_epoch({"model": net.state_dict()}, epoch, "runs")
                model_export(net, "model.bin")
    """)
    )
    found = {(f.line, f.code): f.message for f in lint_source(script.read_text(), str(script))}
    lines = script.read_text().splitlines()
    at = {
        k: next(i + 1 for i, t in enumerate(lines) if k in t)
        for k in ("policy.save", "save_checkpoint(", "save_epoch(", "model_export(net")
    }
    assert "agent.py" in found[(at["policy.save"], "HL021")]
    # The epoch given to save_checkpoint goes nowhere near its path ("checkpoint.pth.tar"): in place all the same.
    assert "agent.py" in found[(at["save_checkpoint("], "HL021")]
    # save_epoch names its file by the epoch it is given (through a name and an `open(...) as f`): a new file.
    assert (at["save_epoch("], "HL021") not in found and (at["model_export(net"], "HL021") not in found


MODELS = """
import numpy as np
import torch
from torch import nn

mel_basis = {}


class DecoderWithAttention(nn.Module):
    def forward(self, x, n):
        preds = torch.zeros(x.size(0), n).to(x.device)
        return self.lin(x) + preds


class Discriminator(nn.Module):
    def forward(self, x, y):
        idx = torch.LongTensor(range(y.size(0))).to(y.device)
        keep = torch.empty(0).to(x.device)
        return self.main(x)[idx, y], keep


def mel(y, fmax):
    if fmax not in mel_basis:
        mel_basis[fmax] = torch.from_numpy(np.ones((80, 513))).float().to(y.device)
    return mel_basis[fmax] @ y


def all_reduce_mean(x):
    reduced = torch.tensor(x).cuda()
    return reduced.item()


class Agent:
    def __init__(self, actor):
        self.actor = actor

    def select_action(self, state):
        state = torch.FloatTensor(state.reshape(1, -1)).to("cuda")
        return self.actor(state).cpu().numpy()
"""

MODEL_SCRIPT = """
import torch
from models import DecoderWithAttention, Discriminator, mel, all_reduce_mean, Agent

def main(actor, env, loader, opt):
    decoder = DecoderWithAttention().cuda()
    disc = Discriminator().cuda()
    agent = Agent(actor)
    state = env.reset()
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        out = decoder(x, 10)
        d_out = disc(out, y)
        spec = mel(out, 8000)
        loss = out.mean() + spec.mean() + d_out[0].mean()
        loss.backward()
        opt.step()
        value = all_reduce_mean(1.5)
        action = agent.select_action(state)
        state = env.step(action)
"""


def test_host_made_tensors_copied_inside_model_and_loss_code_are_reported_at_the_call(tmp_path):
    """A module's `forward` in another file that builds a tensor on the host and copies it to the device
    (`torch.LongTensor(range(n)).to(y.device)`, `torch.zeros(...).to(device)`) blocks every step: HL012 at
    the call, whatever the helper or its class is called (`DecoderWithAttention` is no decoding loop), and in
    an agent's `select_action` too (its `.cpu()` read of the action stays its job). Not reported: a tensor
    cached on first use (`if key not in cache:`), a zero-size `torch.empty(0)`, and a copy whose value the
    helper reads back at once (`reduced.item()`: that read, not the copy, is what waits)."""
    (tmp_path / "models.py").write_text(textwrap.dedent(MODELS))
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(MODEL_SCRIPT))
    found, at = _lint(script)

    assert "models.py:11" in found[(at("out = decoder("), "HL012")]
    assert "models.py:17" in found[(at("d_out = disc("), "HL012")]  # the LongTensor, not the empty(0)
    assert "models.py" in found[(at("action = agent.select_action"), "HL012")]
    assert (at("action = agent.select_action"), "HL007") not in found
    assert (at("spec = mel("), "HL012") not in found
    assert (at("value = all_reduce_mean"), "HL012") not in found
    assert (at("value = all_reduce_mean"), "HL001") in found


def test_a_final_save_and_a_backup_named_by_the_step_two_assignments_back_are_not_in_place(tmp_path):
    """Tacotron's `model.save(weights, opt); break` (once, on the way out) and `backup = f"syn_{k:06d}.pt"`
    with `k = step // 1000` (a new file per backup) make no HL021 claim; the periodic save over the same
    file does. `Tacotron(...).cuda()` is an instance of the project class like `Tacotron(...)`."""
    (tmp_path / "tacotron.py").write_text(
        "import torch\n\nclass Tacotron(torch.nn.Module):\n"
        "    def save(self, path, optimizer=None):\n        torch.save({'model': self.state_dict()}, path)\n"
    )
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from tacotron import Tacotron

        def train(loader, opt, weights, sessions):
            model = Tacotron().cuda()
            for session in sessions:
                if session.done:
                    model.save(weights, opt)
                    break
                for step, x in enumerate(loader):
                    model(x.cuda(non_blocking=True)).mean().backward()
                    opt.step()
                    k = step // 1000
                    if step % 500 == 0:
                        backup = f"synthesizer_{k:06d}.pt"
                        model.save(backup, opt)
                    if step % 100 == 0:
                        model.save(weights, opt)
    """)
    )
    found = {(f.line, f.code) for f in lint_source(script.read_text(), str(script))}
    saves = [i + 1 for i, t in enumerate(script.read_text().splitlines()) if "model.save(" in t]
    assert [(line, "HL021") in found for line in saves] == [False, False, True]


def test_an_epoch_loop_calling_a_project_training_function_is_a_training_loop(tmp_path):
    """`from helper.loops import train_distill as train`, called once per epoch: its loop over the data runs
    backward and steps, so the epoch loop around the call is a training loop, and saving the best model
    over the same file from it is HL021 (RepDistiller); the per-epoch file named by the epoch is not."""
    (tmp_path / "helper").mkdir()
    (tmp_path / "helper" / "loops.py").write_text(
        textwrap.dedent("""
        import torch

        def train_distill(epoch, loader, model, opt):
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x.cuda(non_blocking=True)), y.cuda(non_blocking=True))
                opt.zero_grad()
                loss.backward()
                opt.step()
    """)
    )
    script = tmp_path / "train_student.py"
    script.write_text(
        textwrap.dedent("""
        import os
        import torch
        from helper.loops import train_distill as train

        def main(model, loader, opt, opt_cfg):
            best = 0.0
            for epoch in range(1, opt_cfg.epochs + 1):
                train(epoch, loader, model, opt)
                acc = opt_cfg.evaluate(model)
                if acc > best:
                    best = acc
                    save_file = os.path.join(opt_cfg.save_folder, "{}_best.pth".format(opt_cfg.model))
                    torch.save({"model": model.state_dict()}, save_file)
                if epoch % opt_cfg.save_freq == 0:
                    torch.save({"model": model.state_dict()}, "ckpt_epoch_{}.pth".format(epoch))
    """)
    )
    found = {(f.line, f.code) for f in lint_source(script.read_text(), str(script))}
    saves = [i + 1 for i, t in enumerate(script.read_text().splitlines()) if "torch.save(" in t]
    assert [(line, "HL021") in found for line in saves] == [True, False]


def test_a_trainer_class_delegating_to_helper_objects(tmp_path):
    """guided-diffusion's TrainLoop: `self.sampler = sampler or UniformSampler(d)` is a UniformSampler (the
    default), whose `sample` is inherited from a base class in its file and copies host-made timesteps every
    micro-step (HL012); `run_step()` has no backward or step of its own but `self.mp.optimize(opt)` takes the
    step in another file, so run_step is one step per call of the loop, and the optimizer helper's `.item()`
    per parameter is reported there (HL001)."""
    (tmp_path / "resample.py").write_text(
        textwrap.dedent("""
        import numpy as np
        import torch

        class ScheduleSampler:
            def sample(self, batch_size, device):
                idx = np.random.choice(10, size=(batch_size,))
                return torch.from_numpy(idx).long().to(device)

        class UniformSampler(ScheduleSampler):
            def __init__(self, n):
                self.n = n
    """)
    )
    (tmp_path / "fp16_util.py").write_text(
        textwrap.dedent("""
        import torch

        class MixedPrecisionTrainer:
            def __init__(self, model):
                self.model = model

            def optimize(self, opt):
                norm = sum(p.grad.norm().item() ** 2 for p in self.model.parameters())
                opt.step()
                return norm
    """)
    )
    script = tmp_path / "train_util.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from fp16_util import MixedPrecisionTrainer
        from resample import UniformSampler

        class TrainLoop:
            def __init__(self, model, data, opt, sampler=None):
                self.model, self.data, self.opt = model.cuda(), data, opt
                self.sampler = sampler or UniformSampler(10)
                self.mp = MixedPrecisionTrainer(model)

            def run_loop(self):
                while True:
                    batch = next(self.data)
                    self.run_step(batch)

            def run_step(self, batch):
                self.forward_backward(batch)
                took = self.mp.optimize(self.opt)

            def forward_backward(self, batch):
                batch = batch.cuda(non_blocking=True)
                t = self.sampler.sample(batch.shape[0], "cuda")
                self.model(batch, t).mean().backward()
    """)
    )
    found, at = _lint(script)

    assert (at("t = self.sampler.sample"), "HL012") in found
    assert (at("took = self.mp.optimize"), "HL001") in found


def test_a_state_dict_naming_the_epoch_does_not_make_the_save_path_vary(tmp_path):
    """`tools.save_checkpoint({"epoch": epoch + 1, "state_dict": ...}, is_best, save_dir)`: the epoch is in the
    saved state, not in the file name, so the helper's `torch.save(state, "checkpoint.pth.tar")` is in place."""
    (tmp_path / "tools.py").write_text(
        "import os\nimport torch\n\ndef save_checkpoint(state, is_best, path):\n"
        "    torch.save(state, os.path.join(path, 'checkpoint.pth.tar'))\n"
    )
    script = tmp_path / "main.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        import tools

        def main(model, loader, opt, epochs, save_dir):
            model.cuda()
            for epoch in range(epochs):
                for x in loader:
                    model(x.cuda(non_blocking=True)).mean().backward()
                    opt.step()
                tools.save_checkpoint({"epoch": epoch + 1, "state_dict": model.state_dict()}, True, save_dir)
    """)
    )
    found = {(f.line, f.code) for f in lint_source(script.read_text(), str(script))}
    line = next(i + 1 for i, t in enumerate(script.read_text().splitlines()) if "tools.save_checkpoint" in t)
    assert (line, "HL021") in found


FACTORY = {
    "models/__init__.py": """
        import importlib

        def create_model(opt):
            lib = importlib.import_module("models." + opt.model + "_model")
            return getattr(lib, opt.model.upper() + "Model")(opt)
        """,
    "models/base_model.py": """
        import torch

        class BaseModel:
            def set_input(self, input):
                raise NotImplementedError
        """,
    "models/gan_model.py": """
        import torch
        from .base_model import BaseModel
        from .losses import tv_loss

        class GANModel(BaseModel):
            def set_input(self, input):
                self.real = input["A"].to(self.device)
                if self.world_size > 1:  # an option of the object, set elsewhere
                    print(self.real.sum().item())

            def optimize_parameters(self):
                loss = self.net(self.real).mean() + tv_loss(self.real)
                loss.backward()
                self.optimizer.step()
        """,
    "models/losses.py": """
        import torch

        def tv_loss(x, imgs=None):
            scale = x.abs().amax().item()
            assert x.amin() >= -1e9  # a branch on a reduction: a read
            if imgs is not None:  # a debug path the caller does not take
                draw(imgs.cpu())
            try:
                return (x[..., 1:] - x[..., :-1]).abs().mean() / scale
            except ZeroDivisionError:
                return torch.tensor(0.0).cuda()
        """,
    "train.py": """
        import torch
        from models import create_model

        def main(opt, dataset, helper):
            model = create_model(opt).cuda()
            for epoch in range(opt.epochs):
                for i, data in enumerate(dataset):
                    model.set_input(data)
                    try:
                        model.optimize_parameters()
                    except FloatingPointError:
                        print("skipped a step", model.loss.item())
                    helper.set_input(data)
                    if i == 0:
                        print("first loss", model.loss.item())
        """,
}


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


def test_an_object_built_by_a_factory_is_taken_for_the_project_class_its_name_says(tmp_path):
    """`model = create_model(opt)` (a class chosen by name at run time): `model.set_input(data)` runs the
    project's `GANModel.set_input` (a class with `Model` in its name and a body, not the abstract base), and
    `optimize_parameters` reaches a loss in a third file (two files deep). An object whose name matches no
    project class (`helper`) is not guessed; an `except` branch and an `i == 0` block are not per step."""
    _write(tmp_path, FACTORY)
    found, at = _lint(tmp_path / "train.py")
    assert "gan_model.py" in found[(at("model.set_input"), "HL012")]
    assert (at("model.set_input"), "HL001") not in found
    message = found[(at("model.optimize_parameters"), "HL001")]
    assert "gan_model.py" in message and "losses.py" in message and ".item()" in message
    assert "losses.py" in found[(at("model.optimize_parameters"), "HL005")]
    assert (at("model.optimize_parameters"), "HL007") not in found
    assert not any(line in (at("helper.set_input"), at("skipped a step"), at("first loss")) for line, _ in found)
    assert not any(code in ("HL012", "HL020") and line != at("model.set_input") for line, code in found), found


def test_a_read_the_helpers_own_lint_reports_is_not_repeated_in_one_run(tmp_path):
    """Linted together, the model file reports its step's read at its own call of the loss, so the script's
    call site does not repeat it; linted alone, the script gets it (the model file is not looked at)."""
    from hotloop.lint import lint_paths

    _write(tmp_path, FACTORY)
    both = lint_paths([str(tmp_path / "train.py"), str(tmp_path / "models" / "gan_model.py")], select=["HL001"])
    where = {(Path(f.path).name, f.line) for f in both}
    model = (tmp_path / "models" / "gan_model.py").read_text().splitlines()
    assert ("gan_model.py", next(i + 1 for i, t in enumerate(model) if "tv_loss(self.real)" in t)) in where
    assert not any(name == "train.py" for name, _ in where)
    alone = lint_paths([str(tmp_path / "train.py")], select=["HL001"])
    assert [Path(f.path).name for f in alone] == ["train.py"]


BATCH_Y = {
    "lib/models/model.py": """
        import torch

        def save_model(path, epoch, model, optimizer=None):
            data = {"epoch": epoch, "state_dict": model.state_dict()}
            torch.save(data, path)
    """,
    "lib/utils.py": """
        import torch

        def evaluate(model, users):
            hits = 0
            for u in users:
                scores = model.predict(u)
                hits += scores.argmax()
            return hits

        def evaluate_quietly(model, users):
            with torch.no_grad():
                return [model.predict(u) for u in users]
    """,
    "_init_paths.py": """
        import os.path as osp
        import sys
        sys.path.insert(0, osp.join(osp.dirname(__file__), "lib"))
    """,
    "main.py": """
        import _init_paths
        import os
        import torch
        from models.model import save_model
        from utils import evaluate, evaluate_quietly
        from trains.train_factory import train_factory

        def main(opt, model, optimizer, train_loader, users):
            Trainer = train_factory[opt.task]
            trainer = Trainer(opt, model, optimizer)
            for epoch in range(opt.epochs):
                mark = epoch if opt.save_all else "last"
                trainer.train(epoch, train_loader)
                save_model(os.path.join(opt.save_dir, "model_{}.pth".format(mark)), epoch, model, optimizer)
                save_model(os.path.join(opt.save_dir, "model_last.pth"), epoch, model, optimizer)
                save_model(os.path.join(opt.save_dir, "model_{}.pth".format(epoch)), epoch, model, optimizer)
                model.eval()
                scores = evaluate(model, users)
                quiet = evaluate_quietly(model, users)
                with torch.no_grad():
                    wrapped = evaluate(model, users)
    """,
}


def test_saves_and_evaluations_in_project_helpers_judged_at_the_call(tmp_path):
    """Patterns of batch Y (CenterNet, SASRec), written from scratch: `import _init_paths` puts `lib/` on the
    path, so `models.model` resolves there; `trainer.train(epoch, train_loader)` of a trainer picked from a
    table makes its loop a training loop; the helper's save path is its `path` parameter, so only the argument
    given for it decides (`"model_last.pth"` with the epoch passed into the state is in place, `model_{epoch}`
    is a new file, `mark = epoch if save_all else "last"` is in place by default); an `evaluate` in another
    file that runs the model in a loop without no_grad is HL018 at a call site without no_grad."""
    _write(tmp_path, BATCH_Y)
    found, at = _lint(tmp_path / "main.py")
    assert "lib/models/model.py" in found[(at('"model_last.pth"'), "HL021")]
    assert (at('"model_{}.pth".format(mark)'), "HL021") in found
    assert (at('"model_{}.pth".format(epoch)'), "HL021") not in found
    assert "utils.py" in found[(at("scores = evaluate("), "HL018")]
    assert (at("quiet = evaluate_quietly("), "HL018") not in found
    assert (at("wrapped = evaluate("), "HL018") not in found


def test_a_loss_in_another_file_building_device_tensors_from_host_data_every_step(tmp_path):
    """`ComputeLoss.__call__` (another file) runs `torch.tensor(p.shape, device=...)` every step: HL024 at the
    call site; the same call made once in `__init__` is not reported."""
    _write(tmp_path, {
        "loss.py": """
            import torch

            class ComputeLoss:
                def __init__(self, device):
                    self.gain = torch.tensor([1.0, 2.0], device=device)

                def __call__(self, p, targets):
                    size = torch.tensor(p.shape, device=p.device)
                    return (p.sum() - targets.sum()) * size.sum() * self.gain.sum()
        """,
        "train.py": """
            import torch
            from loss import ComputeLoss

            def main(model, loader, opt, device):
                compute_loss = ComputeLoss(device)
                for x, y in loader:
                    loss = compute_loss(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
                    loss.backward()
                    opt.step()
        """,
    })  # fmt: skip
    found, at = _lint(tmp_path / "train.py")
    assert "loss.py:9" in found[(at("loss = compute_loss("), "HL024")]
    assert "loss.py:6" not in found[(at("loss = compute_loss("), "HL024")]


STEPS_ELSEWHERE = {
    "meta.py": """
        import torch
        from torch import nn

        class Meta(nn.Module):
            def __init__(self, net):
                super().__init__()
                self.net = net
                self.meta_optim = torch.optim.Adam(net.parameters())

            def forward(self, x, y):
                loss = self.net(x, y)
                self.meta_optim.zero_grad()
                loss.backward()
                self.meta_optim.step()
                return loss.detach()
    """,
    "train_fns.py": """
        def training_function(G, opt):
            def train(x, y):
                loss = G(x, y)
                loss.backward()
                opt.step()
                return {"loss": loss.detach()}
            return train

        def eval_function(G):
            def run(x, y):
                return G(x, y)
            return run
    """,
    "main.py": """
        import torch
        from meta import Meta

        def main(net, G, loader, device, save_every, sample):
            maml = Meta(net).to(device)
            for i, (x, y) in enumerate(loader):
                x, y = x.to(device), y.to(device)
                acc = maml(x, y)
                if not (i % save_every):
                    sample(G).cpu()
    """,
    "gan.py": """
        import torch
        import train_fns

        def main(G, opt, loader, val_loader, device):
            train = train_fns.training_function(G, opt)
            run = train_fns.eval_function(G)
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                metrics = train(x, y)
            for x, y in val_loader:
                out = run(x.to(device), y.to(device))
    """,
}


def test_steps_taken_by_an_instance_forward_or_a_returned_closure_make_the_loop_hot(tmp_path):
    """MAML's `maml(x, y)` runs `Meta.forward`, which takes the optimizer step; BigGAN's `train =
    train_fns.GAN_training_function(...)` returns an inner `train(x, y)` that does. Either makes the loop the
    hot loop (the batch copies are per step); `if not (i % save_every):` is a save gate, not its negation."""
    _write(tmp_path, STEPS_ELSEWHERE)
    found, at = _lint(tmp_path / "main.py")
    assert (at("x, y = x.to(device)"), "HL012") in found
    assert (at("sample(G).cpu()"), "HL007") not in found
    found, at = _lint(tmp_path / "gan.py")
    assert (at("x, y = x.to(device)"), "HL012") in found
    assert (at("out = run("), "HL012") not in found


def test_a_model_copying_entries_of_its_input_dict_is_reported_at_the_call(tmp_path):
    """SRN: `model(model_input)` with `forward(self, input)` doing `input["pose"].cuda()`, and
    `model.get_image_loss(out, ground_truth)` doing `trgt = ground_truth["rgb"]; trgt = trgt.cuda()`: entries of
    the batch the loop hands over, copied blocking inside the project's model every step (HL012 at the calls)."""
    (tmp_path / "srns.py").write_text(
        textwrap.dedent("""
        import torch

        class SRNsModel(torch.nn.Module):
            def forward(self, input):
                pose = input["pose"].cuda()
                return self.net(pose)

            def get_image_loss(self, prediction, ground_truth):
                trgt = ground_truth["rgb"]
                trgt = trgt.cuda()
                return ((prediction - trgt) ** 2).mean()
    """)
    )
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from srns import *

        model = SRNsModel().cuda()
        for epoch in range(10):
            for model_input, ground_truth in loader:
                out = model(model_input)
                loss = model.get_image_loss(out, ground_truth)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    """)
    )
    found, at = _lint(script)
    assert (at("out = model("), "HL012") in found
    assert (at("loss = model.get_image_loss"), "HL012") in found


def test_a_step_taken_by_a_mixin_in_another_file_makes_the_loop_hot(tmp_path):
    """AtlasNet: `class Trainer(TrainerIteration)` with `TrainerIteration` imported from the project, and the
    loop calls `self.train_iteration()`, which the mixin defines (backward, step, `loss.item()`): the method is
    resolved through the base class, the loop trains, and the read inside is reported at the call."""
    (tmp_path / "trainer_iteration.py").write_text(
        textwrap.dedent("""
        import torch

        class TrainerIteration:
            def train_iteration(self):
                self.optimizer.zero_grad()
                self.loss = self.network(self.data.points).mean()
                self.loss.backward()
                self.optimizer.step()
                print(self.loss.item())
    """)
    )
    script = tmp_path / "trainer.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from trainer_iteration import TrainerIteration

        class Trainer(TrainerIteration):
            def train_loop(self):
                for data in self.loader:
                    self.data = data.cuda(non_blocking=True)
                    self.train_iteration()
    """)
    )
    found, at = _lint(script)
    assert (at("self.train_iteration()"), "HL001") in found


def test_a_parameter_every_caller_hands_a_project_model_runs_that_model(tmp_path):
    """keon's seq2seq: `def train(e, model, ...)` called only as `train(e, seq2seq, ...)` with `seq2seq =
    Seq2Seq(encoder, decoder).cuda()`: `model(src, trg)` in the loop runs `Seq2Seq.forward`, which builds
    `Variable(torch.zeros(...)).cuda()` on the host every step (HL012 at the call; the 0.3 `Variable` wrapper
    keeps the tensor where it was made)."""
    (tmp_path / "model.py").write_text(
        textwrap.dedent("""
        import torch
        from torch.autograd import Variable

        class Seq2Seq(torch.nn.Module):
            def forward(self, src, trg):
                outputs = Variable(torch.zeros(trg.size(0), trg.size(1), 10)).cuda()
                return self.net(src, outputs)
    """)
    )
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from model import Seq2Seq

        def train(e, model, optimizer, train_iter):
            for src, trg in train_iter:
                src, trg = src.cuda(non_blocking=True), trg.cuda(non_blocking=True)
                output = model(src, trg)
                loss = output.mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        def main(optimizer, train_iter):
            seq2seq = Seq2Seq().cuda()
            for e in range(10):
                train(e, seq2seq, optimizer, train_iter)
    """)
    )
    found, at = _lint(script)
    assert (at("output = model("), "HL012") in found


def test_a_project_modules_output_stays_a_tensor_whatever_its_last_arithmetic_looks_like(tmp_path):
    """attention-is-all-you-need: `train_epoch(model, ...)` called with `model = Transformer(...)`, whose
    `forward` ends `seq_logit *= self.d_model ** -0.5; return seq_logit.view(...)`: arithmetic with a number
    that the type model would call a number, but a module's output is a tensor, so `pred.eq(gold)
    .masked_select(mask)` in the step is still a data-dependent size (HL006)."""
    (tmp_path / "models.py").write_text(
        textwrap.dedent("""
        import torch

        class Transformer(torch.nn.Module):
            def forward(self, src):
                seq_logit = self.proj(src)
                seq_logit *= self.d_model ** -0.5
                return seq_logit.view(-1, seq_logit.size(2))
    """)
    )
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from models import Transformer

        def train_epoch(model, loader, optimizer):
            for src, gold in loader:
                pred = model(src.cuda(non_blocking=True))
                loss = torch.nn.functional.cross_entropy(pred, gold.cuda(non_blocking=True))
                n_correct = pred.max(1)[1].eq(gold).masked_select(gold.ne(0)).sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        def main(loader, optimizer):
            model = Transformer().cuda()
            for epoch in range(10):
                train_epoch(model, loader, optimizer)
    """)
    )
    found, at = _lint(script)
    assert (at("n_correct = "), "HL006") in found
