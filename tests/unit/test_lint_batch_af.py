"""Patterns of held-out batch AF (WaveRNN, minDiffusion, Occupancy Networks), in our own words: `np.isnan` of a
device grad norm is a host read every step; `if ema is None: ema = loss.item()` runs on the first step only;
a save helper from another file handed `'model_%d.pt' % it` writes a new file each time."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_paths, lint_source

LOOP = """
import numpy as np
import torch

def train(model, loader, opt):
    loss_ema = None
    for x, y in loader:
        loss = model(x.cuda(non_blocking=True)).mean()
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        {line}
        opt.step()
"""


def found(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


def test_numpy_isnan_of_a_device_tensor_reads_it_every_step():
    assert (12, "HL001") in found(LOOP.format(line="if np.isnan(grad_norm): print('nan')"))
    assert found(LOOP.format(line="if np.isnan(1.0): print('nan')")) == []


def test_a_value_set_when_still_none_is_read_on_the_first_step_only():
    first = "if loss_ema is None: loss_ema = loss.item()"
    assert found(LOOP.format(line=first)) == []
    every = "if loss_ema is None: other = loss.item()"  # the body does not set the tested name: every step
    assert (12, "HL001") in found(LOOP.format(line=every))


def test_a_percent_formatted_name_handed_to_a_save_helper_is_a_new_file(tmp_path: Path):
    (tmp_path / "README.md").write_text("x\n")
    (tmp_path / "checkpoints.py").write_text(
        textwrap.dedent("""
        import os
        import torch

        class CheckpointIO:
            def __init__(self, checkpoint_dir, **modules):
                self.checkpoint_dir, self.modules = checkpoint_dir, modules

            def save(self, filename, **kwargs):
                filename = os.path.join(self.checkpoint_dir, filename)
                torch.save({k: m.state_dict() for k, m in self.modules.items()}, filename)
        """)
    )
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from checkpoints import CheckpointIO

        checkpoint_io = CheckpointIO("out", model=model)
        it = 0
        for epoch in range(100):
            for batch in loader:
                it += 1
                loss = model(batch.cuda(non_blocking=True)).mean()
                loss.backward()
                optimizer.step()
                if it % 1000 == 0:
                    checkpoint_io.save("model_%d.pt" % it, it=it)
            checkpoint_io.save("model.pt", it=it)
        """)
    )
    hits = [(f.line, f.code) for f in lint_paths([script])]
    assert (15, "HL021") in hits  # the fixed name, overwritten every epoch
    assert (14, "HL021") not in hits, hits  # a new file per save


def test_the_loop_of_a_generator_a_training_loop_iterates_runs_every_item():
    """OpenNMT's `_accum_batches`: the trainer's loop iterates a same-file generator; the generator's loop around
    its `yield` runs once per batch (a read there is per step), what it does before that loop runs once."""
    src = """
    import torch

    class Trainer:
        def _accum_batches(self, iterator):
            batches, normalization = [], 0
            first = self.stats.total.item()
            for batch in iterator:
                batches.append(batch)
                normalization += batch.num_tokens.item()
                if len(batches) == 4:
                    yield batches, normalization
                    batches, normalization = [], 0

        def train(self, train_iter):
            for i, (batches, norm) in enumerate(self._accum_batches(train_iter)):
                for b in batches:
                    loss = self.model(b.src.cuda(non_blocking=True)).sum() / norm
                    loss.backward()
                self.optim.step()
    """
    hits = found(src)
    assert (10, "HL001") in hits
    assert (7, "HL001") not in hits, hits


def test_a_parameter_annotated_with_a_project_class_runs_that_class(tmp_path: Path):
    """WaveRNN: `def voc_train_loop(paths, model: WaveRNN, ...)` calls `model.get_step()` every step; the
    annotation names the project class whose method reads a device buffer."""
    (tmp_path / "README.md").write_text("x\n")
    (tmp_path / "models.py").write_text(
        textwrap.dedent("""
        import torch

        class WaveRNN(torch.nn.Module):
            def get_step(self):
                return self.step.data.item()
        """)
    )
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from models import WaveRNN

        def voc_train_loop(model: WaveRNN, optimizer, loader):
            for x, y in loader:
                loss = model(x.cuda(non_blocking=True)).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step = model.get_step()
        """)
    )
    assert (11, "HL001") in [(f.line, f.code) for f in lint_paths([script])]


def test_a_function_that_sets_eval_mode_and_loops_over_data_evaluates_whatever_its_name():
    """TabNet's `predict` and a `score_dataset` helper: eval mode, a loop over a loader, no no_grad."""
    src = """
    import torch

    def {name}(network, loader):
        network.eval()
        results = []
        for x, y in loader:
            results.append(network(x.cuda(non_blocking=True)).detach())
        return results
    """
    for name in ("predict", "score_dataset"):
        assert (4, "HL018") in found(src.format(name=name)), name
    inner = "            with torch.no_grad():\n                results.append"
    with_grad_off = src.replace("            results.append", inner)
    assert (4, "HL018") not in found(with_grad_off.format(name="score_dataset"))


def test_a_function_that_freezes_one_module_and_trains_is_not_an_evaluation():
    src = """
    import torch

    def fit(model, teacher, loader, opt):
        teacher.eval()
        for x, y in loader:
            loss = (model(x.cuda(non_blocking=True)) - teacher(x.cuda(non_blocking=True))).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """
    assert all(code != "HL018" for _, code in found(src)), found(src)


def test_what_a_project_helper_returns_with_item_is_a_number(tmp_path: Path):
    """Occupancy Networks: `loss = trainer.train_step(batch)` returns `loss.item()`: the script's `loss` is a
    Python float (logging it reads nothing), although its name says tensor."""
    import ast

    from hotloop.lint.imports import load_module

    (tmp_path / "README.md").write_text("x\n")
    (tmp_path / "training.py").write_text(
        textwrap.dedent("""
        class Trainer:
            def train_step(self, data):
                self.optimizer.zero_grad()
                loss = self.model(data.cuda(non_blocking=True)).mean()
                loss.backward()
                self.optimizer.step()
                return loss.item()

            def eval_step(self, data):
                return self.model(data.cuda(non_blocking=True)).mean()
        """)
    )
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        from training import Trainer

        trainer = Trainer()
        for batch in loader:
            loss = trainer.train_step(batch)
            val_loss = trainer.eval_step(batch)
            log(loss, val_loss)
        """)
    )
    mi = load_module(script, script.stat().st_mtime)
    assert mi is not None
    used = {n.id: n for n in mi.nodes if isinstance(n, ast.Name) and n.lineno == 8 and n.id != "log"}
    assert mi.kind(used["loss"], mi.function_info(used["loss"])) == "scalar"
    assert mi.kind(used["val_loss"], mi.function_info(used["val_loss"])) == "tensor"  # a tensor comes back


def test_a_helper_loader_with_workers_from_a_flag_that_defaults_to_zero_has_none(tmp_path: Path):
    """DLRM: `dp.make_loaders(args)` builds `DataLoader(..., num_workers=args.num_workers)` and the script's
    `--num-workers` defaults to 0: no workers to keep alive. With a default of 4 they are re-forked."""
    (tmp_path / "README.md").write_text("x\n")
    (tmp_path / "data.py").write_text(
        textwrap.dedent("""
        from torch.utils.data import DataLoader

        def make_loaders(args, ds):
            return DataLoader(ds, batch_size=args.batch_size, num_workers=args.num_workers, pin_memory=True)
        """)
    )
    script = tmp_path / "train.py"
    template = textwrap.dedent("""
        import argparse
        import torch
        import data

        parser = argparse.ArgumentParser()
        parser.add_argument("--num-workers", type=int, default={n})
        args = parser.parse_args()
        loader = data.make_loaders(args, ds)
        for epoch in range(10):
            for x, y in loader:
                loss = model(x.cuda(non_blocking=True)).mean()
                loss.backward()
                opt.step()
        """)
    script.write_text(template.format(n=0))
    assert all(f.code != "HL011" for f in lint_paths([script]))
    script.write_text(template.format(n=4))
    assert (9, "HL011") in [(f.line, f.code) for f in lint_paths([script])]


def test_a_loop_fetching_training_batches_is_hot_when_its_step_is_out_of_sight():
    """mammoth: `while True: data = next(train_iter)`, the batch moved blocking, the step inside a model built by
    a factory in another file (`model.meta_observe(...)`). Under no_grad the same loop computes statistics."""
    src = """
    import torch

    def train_epoch(model, train_loader, device):
        train_iter = iter(train_loader)
        while True:
            try:
                data = next(train_iter)
            except StopIteration:
                break
            inputs = data[0].to(device)
            loss = model.meta_observe(inputs, data[1])

    def init_center(model, train_loader, device):
        with torch.no_grad():
            for inputs, _ in train_loader:
                inputs = inputs.to(device)
                c = model(inputs).sum(0)
    """
    hits = found(src)
    assert (11, "HL012") in hits, hits
    assert (17, "HL012") not in hits, hits


def test_save_names_built_by_repr_or_by_a_same_file_helper_change_each_save():
    """ssd.pytorch: `'weights/ssd300_COCO_' + repr(iteration) + '.pth'`; motion-diffusion-model:
    `filename = self.ckpt_file_name()` returning `f"model{step:09d}.pt"`. A helper returning a fixed name is HL021."""
    src = """
    import torch

    class Loop:
        def ckpt_file_name(self):
            return {name}

        def run(self, loader):
            for step, batch in enumerate(loader):
                loss = self.model(batch.cuda(non_blocking=True)).mean()
                loss.backward()
                self.opt.step()
                if step % 1000 == 0:
                    filename = self.ckpt_file_name()
                    torch.save(self.model.state_dict(), filename)
                    torch.save(self.model.state_dict(), "weights/ssd_" + repr(step) + ".pth")
    """
    hits = found(src.format(name='f"model{(self.step):09d}.pt"'))
    assert (15, "HL021") not in hits and (16, "HL021") not in hits, hits
    alone = src.replace('torch.save(self.model.state_dict(), "weights/ssd_" + repr(step) + ".pth")', "pass")
    assert (15, "HL021") in found(alone.format(name='"model.pt"'))  # (no per-step copy beside it)


def test_a_conditional_expression_testing_a_flag_or_a_tensor_is_a_branch_not_a_crash():
    """Found by linting every file of 265 checkouts (YOLOv9): `a if flag or torch.isnan(t) else b` crashed the
    latched-flag check, which expected an `if` statement's body."""
    src = """
    import torch

    def train(model, loader, opt, started):
        for x in loader:
            loss = model(x.cuda(non_blocking=True)).mean()
            loss.backward()
            opt.step()
            y = loss.float() if started or torch.isnan(loss) else loss
    """
    assert (9, "HL005") in found(src)
