"""Patterns found while scoring held-out batch AH and the misses left from earlier batches (Swin, pycls,
SimMIM, GraphMAE, tabular-dl), in our own words."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_paths
from tests.unit.helpers import lint_project as _project

TRAIN = """
import torch
from data import build_loader

def main(cfg):
    train_loader, val_loader = build_loader(cfg)
    {extra}
    for epoch in range(cfg.epochs):
        for x, y in train_loader:
            loss = model(x.cuda(non_blocking=True)).mean()
            loss.backward()
            opt.step()
"""


BUILD = """
import torch

def build_loader(cfg):
    train = torch.utils.data.DataLoader(cfg.ds, batch_size=8, num_workers=cfg.workers, pin_memory=True)
    val = torch.utils.data.DataLoader(cfg.val, batch_size=8, num_workers=cfg.workers, pin_memory=True)
    return train, val
"""


def test_a_builder_that_returns_another_files_builder_builds_its_loaders(tmp_path: Path):
    """Swin: `data/__init__.py`'s `build_loader` only returns `.build`'s `build_loader(cfg)`: the loaders it
    hands back are that helper's, re-iterated every epoch without persistent workers."""
    package = {
        "data/__init__.py": """
            from .build import build_loader as _build_loader

            def build_loader(cfg, simmim=False):
                if not simmim:
                    return _build_loader(cfg)
                return None
            """,
        "data/build.py": BUILD,
    }
    assert (6, "HL011") in _project(tmp_path, package, TRAIN.format(extra=""))


def test_a_builder_returning_a_same_file_helper_builds_its_loaders(tmp_path: Path):
    """pycls: `construct_train_loader()` returns `_construct_loader(...)` of the same file."""
    files = {
        "data/__init__.py": """
            import torch

            def _construct(ds, workers):
                return torch.utils.data.DataLoader(ds, batch_size=8, num_workers=workers, pin_memory=True)

            def build_loader(cfg):
                return _construct(cfg.ds, cfg.workers)
            """
    }
    assert (6, "HL011") in _project(tmp_path, files, TRAIN.format(extra=""))
    nothing = {"data/__init__.py": "def build_loader(cfg):\n    return list(cfg.ds)\n"}
    assert all(code != "HL011" for _, code in _project(tmp_path, nothing, TRAIN.format(extra="")))


def test_a_loader_only_handed_to_a_timing_helper_is_not_re_iterated(tmp_path: Path):
    """pycls's `time_model_and_loader`: the loaders go to `benchmark.compute_time_full`, which reads a few
    batches once. A trainer's `fit` given the same loader may run epochs."""
    script = """
        import torch
        from data import build_loader
        import benchmark

        def time_it(cfg):
            train_loader, val_loader = build_loader(cfg)
            benchmark.{consumer}(model, train_loader, val_loader)
        """
    files = {"data/__init__.py": BUILD, "benchmark.py": "def compute_time_full(m, a, b):\n    pass\n"}
    assert all(c != "HL011" for _, c in _project(tmp_path, files, script.format(consumer="compute_time_full")))
    assert (7, "HL011") in _project(tmp_path, files, script.format(consumer="fit"))


# an epoch loop that saves to `{path}` after each epoch (line 11 is the save)
EPOCH_SAVE = """
import os
import torch

def train(model, loader, opt, out):
    for epoch in range(10):
        for x in loader:
            model(x.cuda(non_blocking=True)).mean().backward()
            opt.step()
        savepath = {path}
        torch.save({payload}, savepath)
"""


def found(src: str) -> list[tuple[int, str]]:
    from hotloop.lint import lint_source

    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


def test_a_loop_around_a_function_that_runs_its_own_epochs_repeats_runs():
    """GraphMAE: `for seed in seeds: model = pretrain(...); torch.save(model.state_dict(), "checkpoint.pt")`.
    `pretrain` loops its own epochs, so the save is once per run, not once per epoch. A loop around a
    function that trains one epoch (`train(...)` over the loader) is the epoch loop: its save is per epoch, and
    so is one around PPO's update epochs (`for update in range(n)`)."""
    src = """
    import torch

    def {fn}(model, data, opt, max_epoch):
        for {var} in range(max_epoch):
            loss = model(data.cuda(non_blocking=True)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return model

    def main(seeds):
        for {outer} in seeds:
            model = {fn}(model, data, opt, 100)
            torch.save(model.state_dict(), "checkpoint.pt")
    """
    assert "HL021" not in {c for _, c in found(src.format(fn="pretrain", var="epoch", outer="seed"))}
    assert (15, "HL021") in found(src.format(fn="pretrain", var="batch", outer="seed"))
    assert (15, "HL021") in found(src.format(fn="pretrain", var="epoch", outer="update"))
    assert (15, "HL021") in found(src.format(fn="train_epoch", var="epoch", outer="seed"))


def test_an_optimizer_state_entry_set_to_numbers_is_a_python_counter():
    """RAdam in tabular-dl's lib: `state['step'] = 0`, `state['step'] += 1`, so `beta2_t = beta2 ** state['step']`
    is Python arithmetic, whatever its `_t` name suggests. PyTorch's own optimizers keep `state['step']` as a
    tensor: then it stays one."""
    src = """
    import math
    import torch

    def train(model, loader, opt, state, group):
        for x in loader:
            loss = model(x.cuda(non_blocking=True)).mean()
            loss.backward()
            if len(state) == 0:
                state["step"] = {init}
                state["avg"] = torch.zeros_like(loss)
            state["step"] += 1
            beta1, beta2 = group["betas"]
            beta2_t = beta2 ** state["step"]
            step_size = math.sqrt(1 - beta2_t)
            opt.step()
    """
    assert all(c != "HL001" for _, c in found(src.format(init="0")))
    assert (15, "HL001") in found(src.format(init="torch.zeros((), device=x.device)"))


def test_a_save_to_a_results_file_is_a_dump_not_a_checkpoint():
    """DINO's `evaluate`: `torch.save(output_state_dict, join(out, 'results-{}.pkl'.format(rank)))`."""
    src = EPOCH_SAVE.format(path='os.path.join(out, "{name}")', payload="output_state_dict")
    assert all(c != "HL021" for _, c in found(src.format(name="results-{}.pkl")))
    assert (11, "HL021") in found(src.format(name="checkpoint.pth"))


def test_a_loader_handed_to_a_same_file_function_that_loops_epochs_over_it_is_re_iterated(tmp_path: Path):
    """WaveRNN: `train_set, test_set = get_datasets(...)` (a helper of another file), then
    `voc_train_loop(model, train_set)`, whose `for e in range(epochs): for x in train_set` re-forks the workers;
    also when the loader is built anew for each session of a schedule. The same name bound again further down
    and handed to a one-pass function (`create_gta_features`) is not re-iterated."""
    data = {
        "data.py": """
            from torch.utils.data import DataLoader

            def get_datasets(path, bs):
                train = DataLoader(path, batch_size=bs, num_workers=2, pin_memory=True)
                return train, None
            """
    }
    script = """
        import torch
        from data import get_datasets

        def train_loop(model, train_set, epochs):
            for e in range(epochs):
                for x in train_set:
                    model(x.cuda(non_blocking=True)).mean().backward()
                    opt.step()

        def features(model, train_set):
            for x in train_set:
                model(x.cuda(non_blocking=True))

        def main(model, schedule):
            for session in schedule:
                train_set, _ = get_datasets("d", session.bs)
                train_loop(model, train_set, session.epochs)
            train_set, _ = get_datasets("d", 8)
            features(model, train_set)
        """
    found = _project(tmp_path, data, script)
    assert (17, "HL011") in found
    assert (19, "HL011") not in found


def test_a_loop_right_after_model_eval_evaluates_whatever_its_data_is_called():
    """SR-GNN's `train_test`: after the training loop, `model.eval()` then `for i in slices: forward(model, i,
    test_data)` with no `torch.no_grad()`. Under `with torch.no_grad():`, or with `model.train()` in between, it
    is not an evaluation without no_grad."""
    src = """
    import torch

    def forward(model, i, data):
        return model(data[i])

    def train_test(model, train_data, test_data, slices):
        model.train()
        for i in slices:
            loss = forward(model, i, train_data).mean()
            loss.backward()
            model.optimizer.step()
        model.{mode}()
        for i in slices:
            scores = forward(model, i, test_data)
    """
    assert (14, "HL018") in found(src.format(mode="eval"))
    assert all(c != "HL018" for _, c in found(src.format(mode="train")))
    guarded = src.format(mode="eval").replace(
        "for i in slices:\n            scores", "for i in slices:\n          with torch.no_grad():\n            scores"
    )
    assert guarded != src.format(mode="eval")
    assert all(c != "HL018" for _, c in found(guarded))


def test_a_loader_wrapped_under_its_own_name_is_still_the_one_re_iterated():
    """`loader = accelerator.prepare(loader)` (or `criterion, loader = get_criterion(cfg, loader)`) rebinds the
    name to the same loader: its epochs still count. A new loader bound to the name is another binding."""
    src = """
    import torch

    def main(ds, accelerator, model, opt):
        loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True)
        loader = {rebind}
        for epoch in range(10):
            for x in loader:
                model(x).mean().backward()
                opt.step()
    """
    assert (5, "HL011") in found(src.format(rebind="accelerator.prepare(loader)"))
    assert (5, "HL011") not in found(src.format(rebind="torch.utils.data.DataLoader(ds, batch_size=8)"))


def test_pieces_of_a_chunked_model_output_are_tensors():
    """iBOT: `probs = teacher_output[0].chunk(2)`, `pred = probs[0].max(dim=1)[1]`,
    `acc = (pred1 == pred2).sum() / n`, then `print(float(acc))` every step."""
    src = """
    import torch

    def train(teacher, student, loader, opt):
        for images in loader:
            images = images.cuda(non_blocking=True)
            teacher_output = teacher(images)
            probs1 = teacher_output[0].{method}(2)
            pred1 = probs1[0].max(dim=1)[1]
            acc = (pred1 == 1).sum() / 8
            loss = student(images).mean()
            loss.backward()
            opt.step()
            print(float(acc))
    """
    assert (14, "HL001") in found(src.format(method="chunk"))
    assert (14, "HL001") in found(src.format(method="unbind"))


def test_a_loop_over_a_train_loader_kept_in_a_dict_fetches_training_batches():
    """Graph-WaveNet: `for x, y in dataloader['train_loader'].get_iterator(): engine.train(torch.Tensor(x).
    to(device), ...)`, with the step inside `engine` (another file): the copies run every step."""
    src = """
    import torch

    def main(dataloader, engine, device):
        for epoch in range(10):
            for x, y in dataloader['{key}'].get_iterator():
                trainx = torch.Tensor(x).to(device)
                metrics = engine.train(trainx)
    """
    assert (7, "HL012") in found(src.format(key="train_loader"))
    assert all(c != "HL012" for _, c in found(src.format(key="val_loader")))


def test_a_loader_a_helper_keeps_to_itself_lives_one_call(tmp_path: Path):
    """cirtorch's `extract_vectors(net, images)` builds a DataLoader, iterates it once and returns the vectors:
    calling it every epoch makes a fresh loader each time, nothing to keep alive. A helper that returns the
    loader it builds hands it to the caller's epochs."""
    helper = """
        import torch

        def {name}(net, images):
            loader = torch.utils.data.DataLoader(images, batch_size=8, num_workers=4, pin_memory=True)
            vecs = [net(x) for x in loader]
            return {ret}
        """
    script = """
        import torch
        from helpers import {name}

        def main(net, images, opt):
            for epoch in range(10):
                vecs = {name}(net, images)
                for v in vecs:
                    print(v)
        """
    kept = {"helpers.py": helper.format(name="extract_vectors", ret="torch.stack(vecs)")}
    assert all(c != "HL011" for _, c in _project(tmp_path, kept, script.format(name="extract_vectors")))
    given = {"helpers.py": helper.format(name="make_loader", ret="loader")}
    script_given = """
        import torch
        from helpers import make_loader

        def main(net, images, opt):
            loader = make_loader(net, images)
            for epoch in range(10):
                for v in loader:
                    print(v)
        """
    assert any(c == "HL011" for _, c in _project(tmp_path, given, script_given))


def test_appending_indices_or_gathered_predictions_keeps_no_graph():
    """iBOT's `pred_labels.append(pred1)` with `pred1 = concat_all_gather(out.max(dim=1)[1])`: indices carry no
    gradient. Appending the logits themselves does keep the graph."""
    src = """
    import torch

    def train(model, loader, opt):
        preds = []
        for x in loader:
            out = model(x.cuda(non_blocking=True))
            pred = {value}
            preds.append(pred)
            out.mean().backward()
            opt.step()
    """
    assert all(c != "HL019" for _, c in found(src.format(value="out.max(dim=1)[1]")))
    assert all(c != "HL019" for _, c in found(src.format(value="out.argmax(dim=1)")))
    assert (9, "HL019") in found(src.format(value="out * 2"))


def test_a_function_handed_to_a_trainer_as_its_batch_source_runs_every_step():
    """decision-transformer: `def get_batch(...)` builds numpy arrays and copies them with blocking
    `.to(device=device)`; `SequenceTrainer(model, optimizer, get_batch=get_batch)` calls it every step. The
    same function handed over as `eval_fns=[...]` is not a per-step source."""
    src = """
    import numpy as np
    import torch
    from trainer import SequenceTrainer

    def main(device, model, optimizer):
        def get_batch(batch_size=256):
            s = np.zeros((batch_size, 4))
            return torch.from_numpy(s).to(dtype=torch.float32, device=device)

        trainer = SequenceTrainer(model, optimizer, {keyword}=get_batch)
        trainer.train_iteration(num_steps=100)
    """
    assert (9, "HL012") in found(src.format(keyword="get_batch"))
    assert all(c != "HL012" for _, c in found(src.format(keyword="eval_fns")))


def test_a_trainer_module_of_a_project_that_uses_cuda_runs_on_the_device(tmp_path: Path):
    """decision-transformer's `SequenceTrainer.train_step` never says `cuda` or `device`: its batches come
    moved from `experiment.py`. In a project where some file moves tensors to the GPU, its
    `loss.detach().cpu().item()` every step is a device read; in a CPU-only project it is not."""
    (tmp_path / "README.md").write_text("x\n")
    (tmp_path / "training").mkdir()
    trainer = tmp_path / "training" / "seq_trainer.py"
    trainer.write_text(
        textwrap.dedent("""
        class SequenceTrainer:
            def train_step(self):
                states, actions = self.get_batch(self.batch_size)
                preds = self.model.forward(states)
                loss = self.loss_fn(preds, actions)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                return loss.detach().cpu().item()
        """)
    )
    experiment = tmp_path / "experiment.py"
    experiment.write_text("import torch\n\ndef get_batch(n):\n    return torch.zeros(n).to(device='cpu')\n")
    assert all(f.code != "HL007" for f in lint_paths([trainer]))
    experiment.write_text("import torch\n\ndef get_batch(n):\n    return torch.zeros(n).cuda()\n")
    from hotloop.lint import classes

    classes._ON_DEVICE.clear()
    classes._FILES.clear()
    assert (10, "HL007") in [(f.line, f.code) for f in lint_paths([trainer])]


def test_a_script_that_imports_no_torch_still_trains_through_its_trainer(tmp_path: Path):
    """SPADE's train.py imports only project modules: `trainer.run_discriminator_one_step(data)` (another file)
    takes the step, and `trainer.save('latest')` in that loop overwrites the checkpoint. Its loader's
    `num_workers=int(opt.nThreads)` has `--nThreads` defaulting to 0 in the options module: no workers."""
    files = {
        "trainers.py": """
            import torch

            class Trainer:
                def run_discriminator_one_step(self, data):
                    self.optimizer.zero_grad()
                    self.model(data).mean().backward()
                    self.optimizer.step()

                def save(self, name):
                    torch.save(self.model.state_dict(), name + "_net.pth")
            """,
        "options.py": """
            import argparse

            def parse():
                parser = argparse.ArgumentParser()
                parser.add_argument('--nThreads', default={n}, type=int)
                return parser.parse_args()
            """,
        "data.py": """
            import torch

            def create_dataloader(opt, ds):
                return torch.utils.data.DataLoader(ds, batch_size=4, num_workers=int(opt.nThreads), pin_memory=True)
            """,
    }
    script = """
        from trainers import Trainer
        import data
        import options

        opt = options.parse()
        loader = data.create_dataloader(opt, None)
        trainer = Trainer()
        for epoch in range(10):
            for i, data_i in enumerate(loader):
                trainer.run_discriminator_one_step(data_i)
                if i % 100 == 0:
                    trainer.save('latest')
        """
    zero = dict(files, **{"options.py": files["options.py"].format(n=0)})
    found0 = _project(tmp_path, zero, script)
    assert (13, "HL021") in found0
    assert all(c != "HL011" for _, c in found0)
    from hotloop.lint import classes

    classes._FILES.clear()
    four = dict(files, **{"options.py": files["options.py"].format(n=4)})
    assert (7, "HL011") in _project(tmp_path, four, script)


def test_names_a_star_imported_package_re_exports_are_followed(tmp_path: Path):
    """DeepRL: `from ..utils import *` brings `tensor` from `utils/__init__.py`'s own `from .torch_utils
    import *`; `tensor(x)` is `torch.from_numpy(...).to(DEVICE)`, a blocking copy every step."""
    files = {
        "utils/__init__.py": "from .torch_utils import *\n",
        "utils/torch_utils.py": """
            import numpy as np
            import torch

            DEVICE = torch.device('cuda')

            def tensor(x):
                return torch.from_numpy(np.asarray(x, dtype=np.float32)).to(DEVICE)
            """,
    }
    script = """
        import torch
        from utils import *

        def train(model, batches, opt):
            for states, targets in batches:
                loss = (model(tensor(states).cuda(non_blocking=True)) - tensor(targets)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        """
    assert (7, "HL012") in _project(tmp_path, files, script)


def test_lint_output_piped_into_a_reader_that_stops_early_is_no_traceback(tmp_path: Path):
    """`hotloop lint . | head -1`: when the reader goes away, lint stops quietly instead of printing a
    BrokenPipeError traceback."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    lines = ["import torch", "def train(model, loader, opt):", "    for x in loader:"]
    lines += [f"        l{i} = model(x.cuda()).mean()" for i in range(200)]
    lines += ["        l0.backward()", "        opt.step()"]
    script.write_text("\n".join(lines) + "\n")
    p = subprocess.Popen([sys.executable, "-m", "hotloop", "lint", str(script)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)  # fmt: skip
    p.stdout.close()  # type: ignore[union-attr]
    err = p.stderr.read().decode()  # type: ignore[union-attr]
    p.wait(timeout=60)
    assert "Traceback" not in err
    assert p.returncode in (0, 1)


def test_a_project_dataloader_subclass_imported_by_a_path_set_name_is_a_dataloader(tmp_path: Path):
    """Speech-Transformer: `src/bin/train.py` does `from data import AudioDataLoader` (its run script puts
    `src/data` on sys.path: `src/data/__init__.py` is empty, the class is in `src/data/data.py`) and
    `AudioDataLoader(data.DataLoader)` takes DataLoader's keywords: 4 workers in CUDA code want pinned memory."""
    (tmp_path / "README.md").write_text("x\n")
    (tmp_path / "src" / "data").mkdir(parents=True)
    (tmp_path / "src" / "bin").mkdir()
    (tmp_path / "src" / "data" / "__init__.py").write_text("")
    (tmp_path / "src" / "data" / "data.py").write_text(
        "import torch.utils.data as data\n\nclass AudioDataLoader(data.DataLoader):\n    pass\n"
    )
    script = tmp_path / "src" / "bin" / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from data import AudioDataLoader

        def main(ds, model):
            loader = AudioDataLoader(ds, batch_size=1, num_workers=4)
            for x in loader:
                model(x.cuda())
        """)
    )
    assert (6, "HL011") in [(f.line, f.code) for f in lint_paths([script])]


def test_an_evaluation_after_set_grad_enabled_false_keeps_no_graph():
    """deeplab-pytorch's `test` command calls `torch.set_grad_enabled(False)` at its top, then loops."""
    src = """
    import torch

    def test(model, loader):
        model.eval()
        torch.set_grad_enabled({flag})
        for images, labels in loader:
            logits = model(images.cuda(non_blocking=True))
    """
    assert all(c != "HL018" for _, c in found(src.format(flag="False")))
    assert (4, "HL018") in found(src.format(flag="True"))


def test_a_loader_wrapped_in_iter_at_birth_is_read_in_one_pass():
    """MiniGPT-4: `loader = iter(DataLoader(webdataset, num_workers=n, pin_memory=True))` is advanced with
    `next()` for the whole run: its workers are forked once."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    def train(ds, model, opt, n):
        loader = {built}
        for epoch in range(10):
            for i in range(1000):
                x = next(loader)
                model(x.cuda(non_blocking=True)).mean().backward()
                opt.step()
    """
    made = "DataLoader(ds, batch_size=8, num_workers=n, pin_memory=True)"
    assert all(c != "HL011" for _, c in found(src.format(built=f"iter({made})")))
    assert (6, "HL011") in found(src.format(built=made).replace("x = next(loader)", "x = next(iter(loader))"))


def test_a_save_name_formatted_from_best_or_the_epoch_overwrites_the_best_file():
    """MiniGPT-4's `_save_checkpoint`: `"checkpoint_{}.pth".format("best" if is_best else cur_epoch)` writes a
    new file per epoch, but `checkpoint_best.pth` in place whenever validation improves."""
    src = EPOCH_SAVE.format(path='os.path.join(out, "checkpoint_{{}}.pth".format({arg}))',
                            payload="model.state_dict()")  # fmt: skip
    assert (11, "HL021") in found(src.format(arg='"best" if is_best else epoch'))
    assert all(c != "HL021" for _, c in found(src.format(arg="epoch")))


def test_a_save_helper_calling_a_nested_saver_with_its_path_takes_the_path_from_any_argument(tmp_path: Path):
    """lora: `save_all(unet, text_encoder, save_path=join(out, f"step_{global_step}.safetensors"))`, where
    `save_all` hands `save_path` to `save_lora_weight(model, path)`: a new file per step whether the first
    arguments are passed by position or by name. A fixed `save_path` is saved in place."""
    files = {
        "lora.py": """
            import torch

            def save_lora_weight(model, path="./lora.pt"):
                torch.save(model.state_dict(), path)

            def save_all(unet, text_encoder, save_path, save_lora=True):
                if save_lora:
                    save_lora_weight(unet, save_path)
            """
    }
    script = """
        import os
        import torch
        from lora import save_all

        def train(unet, text_encoder, loader, opt, out):
            global_step = 0
            for epoch in range(3):
                for x in loader:
                    unet(x.cuda(non_blocking=True)).mean().backward()
                    opt.step()
                    global_step += 1
                    if global_step % 500 == 0:
                        save_all(unet, text_encoder, save_path=os.path.join(out, {name}))
        """
    assert all(c != "HL021" for _, c in _project(tmp_path, files, script.format(name='f"step_{global_step}.pt"')))
    assert (14, "HL021") in _project(tmp_path, files, script.format(name='"last.pt"'))


def test_a_tools_script_importing_from_lib_through_init_paths_finds_its_epoch_function(tmp_path: Path):
    """HRNet: `tools/train.py` does `import _init_paths` (which puts `../lib` on sys.path) and
    `from core.function import train`; `train(...)` runs an epoch, so the loop around it is the epoch loop and
    its `torch.save(..., 'checkpoint.pth.tar')` overwrites in place."""
    files = {
        "tools/_init_paths.py": "import sys\nsys.path.insert(0, '../lib')\n",
        "lib/core/__init__.py": "",
        "lib/core/function.py": """
            def train(model, loader, optimizer):
                for x in loader:
                    loss = model(x.cuda(non_blocking=True)).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            """,
    }
    (tmp_path / "README.md").write_text("x\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    script = tmp_path / "tools" / "train.py"
    script.write_text(
        textwrap.dedent("""
        import os
        import torch
        import _init_paths
        from core.function import train

        def main(model, loader, optimizer, out):
            for epoch in range(100):
                train(model, loader, optimizer)
                torch.save(model.state_dict(), os.path.join(out, 'checkpoint.pth.tar'))
        """)
    )
    assert (10, "HL021") in [(f.line, f.code) for f in lint_paths([script])]


def test_an_epoch_function_whose_step_is_a_third_files_makes_its_callers_loop_an_epoch_loop(tmp_path: Path):
    """LightGCN: main.py's `for epoch ...: Procedure.BPR_train_original(...); torch.save(..., weight_file)`,
    where `BPR_train_original` loops batches calling `bpr.stageOne(...)` of utils.py, which steps."""
    files = {
        "utils.py": """
            import torch

            class BPRLoss:
                def __init__(self, model):
                    self.model = model
                    self.opt = torch.optim.Adam(model.parameters())

                def stageOne(self, users):
                    loss = self.model(users).mean()
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()
                    return loss
            """,
        "Procedure.py": """
            import utils

            def BPR_train_original(model, batches, bpr):
                for users in batches:
                    bpr.stageOne(users.cuda(non_blocking=True))
            """,
    }
    script = """
        import torch
        import utils
        import Procedure

        def main(model, batches, weight_file):
            bpr = utils.BPRLoss(model)
            for epoch in range(1000):
                Procedure.BPR_train_original(model, batches, bpr)
                torch.save(model.state_dict(), weight_file)
        """
    assert (10, "HL021") in _project(tmp_path, files, script)


def test_a_base_trainer_loop_runs_its_subclasses_overrides_every_step():
    """UER-py: `Trainer.train` loops `batch = list(next(loader_iter))`, copies each tensor with a blocking
    `.cuda(local_rank)` and calls `self.forward_propagation(batch, model)`, which the base class leaves to
    `MlmTrainer`, `BertTrainer`, ... whose overrides read `loss.item()` every step."""
    src = """
    import torch

    class Trainer:
        def forward_propagation(self, batch, model):
            raise NotImplementedError

        def train(self, loader, model, optimizer, local_rank):
            loader_iter = iter(loader)
            while True:
                batch = list(next(loader_iter))
                for i in range(len(batch)):
                    batch[i] = batch[i].cuda(local_rank)
                loss = self.forward_propagation(batch, model)
                loss.backward()
                optimizer.step()

    class MlmTrainer(Trainer):
        def forward_propagation(self, batch, model):
            loss = model(*batch)
            self.total_loss += loss.item()
            return loss

    class Unrelated:
        def forward_propagation(self, batch, model):
            return model(*batch).item()
    """
    hits = found(src)
    assert (13, "HL012") in hits
    assert (21, "HL001") in hits
    assert (26, "HL001") not in hits


def test_an_agents_update_is_one_step_even_when_its_steps_are_its_other_methods(tmp_path: Path):
    """DrQ-v2's `DrQV2Agent.update`: `if step % self.update_every_steps != 0: return metrics` (the update
    cadence: the update follows it), `obs, reward = utils.to_torch(batch, self.device)` (a helper returning
    `tuple(torch.as_tensor(x, device=device) for x in xs)`), then `update_critic`/`update_actor` step. The
    training script calls `agent.update(...)` every environment step, so `reward.mean().item()` reads per step."""
    files = {
        "utils.py": """
            import torch

            def to_torch(xs, device):
                return tuple(torch.as_tensor(x, device=device) for x in xs)
            """,
        "config.py": "import torch\n\nDEVICE = torch.device('cuda')\n",
    }
    script = """
        import torch
        import utils

        class Agent:
            def update_critic(self, obs, reward):
                loss = (self.critic(obs) - reward).pow(2).mean()
                self.critic_opt.zero_grad()
                loss.backward()
                self.critic_opt.step()

            def update(self, replay_iter, step):
                metrics = dict()
                if step % self.{every} != 0:
                    return metrics
                obs, reward = utils.to_torch(next(replay_iter), self.device)
                metrics['batch_reward'] = reward.mean().item()
                self.update_critic(obs, reward)
                return metrics
        """
    assert (17, "HL001") in _project(tmp_path, files, script.format(every="update_every_steps"))
    # the guard lets the update itself through: whatever the period is called, what follows runs every update
    assert (17, "HL001") in _project(tmp_path, files, script.format(every="log_every_steps"))


def test_reading_the_grad_scalers_scale_every_step_is_a_host_read():
    """Swin/VideoMAE: `loss_scale_value = loss_scaler.state_dict()["scale"]` every step; GradScaler's
    `state_dict()` and `get_scale()` read the scale tensor with `.item()`. Under a log gate it is once per N."""
    src = """
    import torch

    def train(model, loader, opt, loss_scaler):
        for i, x in enumerate(loader):
            loss = model(x.cuda(non_blocking=True)).mean()
            loss_scaler.scale(loss).backward()
            loss_scaler.step(opt)
            loss_scaler.update()
            {line}
    """
    assert (10, "HL001") in found(src.format(line='scale = loss_scaler.state_dict()["scale"]'))
    assert (10, "HL001") in found(src.format(line="scale = loss_scaler.get_scale()"))
    gated = "if i % 100 == 0: print(loss_scaler.get_scale())"
    assert all(c != "HL001" for _, c in found(src.format(line=gated)))


def test_a_value_or_none_has_the_values_kind():
    """siamese-triplet: `target = target if len(target) > 0 else None`, then `target = target.cuda()` under
    `if target is not None:`: the batch tensor's blocking copy, not a Python value's."""
    src = """
    import torch

    def train(model, loader, opt):
        for data, target in loader:
            target = target if len(target) > 0 else None
            data = data.cuda(non_blocking=True)
            if target is not None:
                target = target.cuda()
            model(data, target).mean().backward()
            opt.step()
    """
    assert (9, "HL012") in found(src)


def test_a_save_directory_fixed_before_the_loop_names_the_same_file_every_epoch(tmp_path: Path):
    """FlowNet: `save_path = os.path.join(timestamp, "{}epochs".format(...))` once, before the epoch loop, then
    `save_checkpoint(state, is_best, save_path)` writing `checkpoint.pth.tar` there every epoch. A directory
    named inside the loop by the epoch is new each time."""
    files = {
        "util.py": """
            import os
            import torch

            def save_checkpoint(state, is_best, save_path, filename="checkpoint.pth.tar"):
                torch.save(state, os.path.join(save_path, filename))
            """
    }
    script = """
        import datetime
        import os
        import torch
        from util import save_checkpoint

        def main(model, loader, opt):
            timestamp = datetime.datetime.now().strftime("%m-%d-%H:%M")
            save_path = os.path.join(timestamp, "flownets")
            for epoch in range(100):
                for x in loader:
                    model(x.cuda(non_blocking=True)).mean().backward()
                    opt.step()
                {where}
                save_checkpoint({{"epoch": epoch}}, False, save_path)
        """
    assert (15, "HL021") in _project(tmp_path, files, script.format(where="pass"))
    per_epoch = 'save_path = os.path.join(timestamp, f"epoch_{epoch}")'
    assert all(c != "HL021" for _, c in _project(tmp_path, files, script.format(where=per_epoch)))


def test_pin_memory_from_a_flag_that_defaults_to_off_is_unpinned():
    """ReChorus: `--pin_memory` defaults to 0 and `DataLoader(..., num_workers=args.num_workers,
    pin_memory=args.pin_memory)`: by default CUDA copies come from pageable memory."""
    src = """
    import argparse
    import torch
    from torch.utils.data import DataLoader

    parser = argparse.ArgumentParser()
    parser.add_argument('--pin_memory', type=int, default={pin})
    parser.add_argument('--num_workers', type=int, default=4)
    args = parser.parse_args()

    def fit(model, ds, opt):
        dl = DataLoader(ds, batch_size=8, num_workers=args.num_workers, pin_memory=args.pin_memory)
        for x in dl:
            model(x.cuda(non_blocking=True)).mean().backward()
            opt.step()
    """
    assert (12, "HL011") in found(src.format(pin=0))
    assert all(c != "HL011" for _, c in found(src.format(pin=1)))


def test_indexing_a_device_tensor_with_a_list_built_each_step_copies_it():
    """HALOs: `chosen_rewards_idx = [i for i in range(n) if status[i] == 'chosen']` then
    `all_rewards[chosen_rewards_idx]` every step: the Python list goes to the device each time. A host tensor
    indexed the same way copies nothing."""
    src = """
    import torch

    def train(model, loader, opt):
        for batch in loader:
            all_rewards = model(batch['x'].cuda(non_blocking=True))
            chosen_idx = [i for i in range(len(batch['status'])) if batch['status'][i] == 'chosen']
            chosen = {value}[chosen_idx]
            chosen.mean().backward()
            opt.step()
    """
    assert (8, "HL024") in found(src.format(value="all_rewards"))
    assert all(c != "HL024" for _, c in found(src.format(value="torch.arange(8)")))
