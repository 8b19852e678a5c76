"""Patterns found while scoring the whole labelled set and held-out batches EB and EC (session 22), in our own
words. Each test that asks for a finding fails without the change it names; each one that asks for silence
guards that change against the false alarm it could raise."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_paths, lint_source


def found(src: str, path: str = "<string>") -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src), path)]


def _files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


YOLO = {
    "nets/__init__.py": "",
    "nets/yolo_training.py": """
        import torch.nn as nn

        class YOLOLoss(nn.Module):
            def forward(self, l, pred, targets):
                obj_mask = targets > 0
                n = obj_mask.sum()
                if n != 0:
                    return pred[obj_mask].mean()
                return pred.sum() * 0
    """,
    "utils/__init__.py": "",
    "utils/utils.py": """
        def get_lr(optimizer):
            return optimizer.param_groups[0]["lr"]
    """,
    "utils/utils_fit.py": """
        from utils.utils import get_lr

        def fit_one_epoch(model_train, yolo_loss, optimizer, gen):
            for iteration, (images, targets) in enumerate(gen):
                optimizer.zero_grad()
                outputs = model_train(images)
                loss = yolo_loss(0, outputs, targets)
                loss.backward()
                optimizer.step()
    """,
    "train.py": """
        import torch
        from nets.yolo_training import YOLOLoss
        from utils.utils_fit import fit_one_epoch

        if __name__ == "__main__":
            model = torch.nn.Linear(4, 4).cuda()
            yolo_loss = YOLOLoss()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                fit_one_epoch(model, yolo_loss, optimizer, [])
    """,
}


def test_a_project_without_a_root_marker_is_rooted_where_its_imports_resolve(tmp_path):
    """The bubbliiiing YOLO layout copied without its README or `.git`: `utils/utils_fit.py` takes `yolo_loss`
    as a parameter, and only `train.py` one folder up says it is a `YOLOLoss`. With no marker the project used
    to be `utils/` alone, so the caller was never read; `from utils.utils import get_lr` runs with the folder
    above `utils/` on `sys.path`, which is the project (classes._unmarked_root)."""
    _files(tmp_path, YOLO)
    codes = {(f.line, f.code) for f in lint_paths([tmp_path / "utils" / "utils_fit.py"])}
    assert {(8, "HL005"), (8, "HL006")} <= codes


def test_an_unmarked_file_importing_only_libraries_keeps_its_own_folder(tmp_path):
    """A lone script in a folder importing only `torch` and `os` is its own project: the folder above it (with
    an unrelated `train.py` calling a function of the same name) is not read for callers."""
    files = dict(YOLO)
    files["utils/utils_fit.py"] = files["utils/utils_fit.py"].replace("from utils.utils import get_lr", "import os")
    _files(tmp_path, files)
    codes = {f.code for f in lint_paths([tmp_path / "utils" / "utils_fit.py"])}
    assert "HL005" not in codes and "HL006" not in codes


def test_an_element_of_a_loss_narrowed_by_typing_tuple_is_still_a_tensor():
    """flair's trainer: `if isinstance(loss, Tuple): loss = loss[0]` (typing's `Tuple`), then `loss.item()` every
    micro-batch. `Tuple` narrowed `loss` to a Python value, so `.item()` looked like a read of a number
    (forks.CONTAINERS matched only lower-case `tuple`)."""
    src = """
    from typing import Tuple
    import torch

    def train(model, optimizer, loader):
        model.cuda()
        train_loss = 0.0
        for batch in loader:
            loss = model.forward_loss(batch)
            if isinstance(loss, Tuple):
                loss = loss[0]
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
    """
    assert (13, "HL001") in found(src)
    assert (13, "HL001") in found(src.replace("Tuple)", "tuple)"))


def test_a_numbered_loss_read_with_data0_is_a_python_number_after_it():
    """BASNet (PyTorch 0.3): `print("l0: %3f" % (loss0.data[0], ...))` and `running_tar_loss += loss2.data[0]`:
    `.data[0]` is that era's `.item()` (HL001 at the read), so what it gives is a Python float: formatting it,
    or a running sum of it, is no second read (kinds: `loss<N>.data[0]`, not only `loss.data[0]`)."""
    src = """
    import torch

    def train(net, optimizer, loader):
        net.cuda()
        running_tar_loss = 0.0
        for i, (x, y) in enumerate(loader):
            loss0 = net(x.cuda()).sum()
            loss2 = loss0 * 2
            loss2.backward()
            optimizer.step()
            print("l0: %3f" % (loss0.data[0],))
            running_tar_loss += loss2.data[0]
            print("tar: %3f" % (running_tar_loss / (i + 1)))
    """
    hits = found(src)
    assert (12, "HL001") in hits and (13, "HL001") in hits
    assert not [h for h in hits if h[1] == "HL002"]


def test_an_attribute_of_a_divided_loss_object_is_divided():
    """IRIS's `train_component`: `losses = component.compute_loss(batch) / grad_acc_steps` (an object whose
    `__truediv__` divides every term), then `losses.loss_total.backward()` per micro-batch: the loss is divided
    (structure._divided follows an attribute to its object). Without the division it is HL016."""
    src = """
    import torch

    def train_component(component, optimizer, steps, grad_acc_steps, loader):
        for _ in range(steps):
            optimizer.zero_grad()
            for _ in range(grad_acc_steps):
                losses = component.compute_loss(next(loader)) / grad_acc_steps
                loss_total_step = losses.loss_total
                loss_total_step.backward()
            optimizer.step()
    """
    assert not [h for h in found(src) if h[1] == "HL016"]
    assert (10, "HL016") in found(src.replace(" / grad_acc_steps\n", "\n"))


def test_a_batch_size_entry_of_a_batch_dict_is_a_count():
    """MASTER-pytorch's validation: `batch_size = input_data_item['batch_size']` (its collate function keeps the
    count as an int), then `torch.tensor([batch_size, valid_batches, correct, ...])`: a list of Python counts,
    no tensor read on the host (kinds.HYPER). A list with a real tensor in it is still HL003."""
    src = """
    import torch

    def validate(model, loader, device):
        model.eval()
        for item in loader:
            batch_size = item['batch_size']
            correct = 0
            with torch.no_grad():
                out = model(item['images'].to(device))
            total = torch.tensor([batch_size, correct]).float().to(device)
    """
    assert not [h for h in found(src) if h[1] == "HL003"]
    assert (11, "HL003") in found(src.replace("[batch_size, correct]", "[out.sum(), correct]"))


def test_a_sampler_handed_to_a_trainer_that_sets_its_epoch_is_not_hl015(tmp_path):
    """MASTER-pytorch: `train.py` builds `DistributedSampler(train_dataset)` into the loader it hands its
    `Trainer`, whose `trainer.py` calls `self.data_loader.sampler.set_epoch(epoch)` every epoch. The script
    never calls `set_epoch` itself, and that is right (structure._set_by_a_trainer)."""
    trainer = """
        class Trainer:
            def __init__(self, model, data_loader):
                self.model, self.data_loader = model, data_loader

            def train(self, epochs):
                for epoch in range(epochs):
                    self.data_loader.sampler.set_epoch(epoch)
                    for batch in self.data_loader:
                        self.model(batch).sum().backward()
    """
    script = """
        import torch
        from trainer import Trainer

        def main(dataset, model):
            sampler = torch.utils.data.distributed.DistributedSampler(dataset)
            loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=8)
            Trainer(model.cuda(), loader).train(10)
    """
    (tmp_path / "README.md").write_text("x\n")
    _files(tmp_path, {"trainer.py": trainer, "train.py": script})
    assert "HL015" not in {f.code for f in lint_paths([tmp_path / "train.py"])}
    other = tmp_path / "b"
    (other / "README.md").parent.mkdir()
    (other / "README.md").write_text("x\n")
    _files(other, {"trainer.py": trainer.replace("self.data_loader.sampler.set_epoch(epoch)", "pass"),
                   "train.py": script})  # fmt: skip
    assert "HL015" in {f.code for f in lint_paths([other / "train.py"])}


def test_an_update_freq_gate_without_an_optimizer_step_is_a_log_gate():
    """pt-dec's `train`: `if update_freq is not None and index % update_freq == 0: loss_value = float(loss.item())`
    refreshes the progress bar every tenth batch. `update_freq` is fairseq's accumulation flag, but with no
    optimizer step in its body the gate is a boundary (gates.is_update_gate); with `optimizer.step()` in it, it
    is the update, and its read happens on every update."""
    src = """
    import torch

    def train(model, optimizer, loader, update_freq=10):
        model.cuda()
        for index, batch in enumerate(loader):
            loss = model(batch.cuda(non_blocking=True)).mean()
            loss.backward()
            optimizer.step()
            if update_freq is not None and index % update_freq == 0:
                loss_value = float(loss.item())
                print(loss_value)
    """
    assert not [h for h in found(src) if h[1] == "HL001"]
    stepped = src.replace("            optimizer.step()\n", "").replace(
        "                print(loss_value)", "                print(loss_value)\n                optimizer.step()"
    )
    assert (10, "HL001") in found(stepped)  # (one line up: the step moved into the gate)


def test_an_evaluation_helper_called_from_the_training_loop_is_one_hl018():
    """pt-dec's `predict(dataset, model)` puts the model in eval mode and runs it over a DataLoader without
    `no_grad`; `train` calls it every epoch, so it is hot. One finding, at its `def` (evals._own_eval no longer
    counts a hot function that trains nothing as training), not a second one on its `for` line."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    def predict(dataset, model):
        loader = DataLoader(dataset, batch_size=64)
        features = []
        model.eval()
        for batch in loader:
            features.append(model(batch.cuda(non_blocking=True)).detach())
        return torch.cat(features)

    def train(dataset, model, optimizer, epochs):
        model.cuda()
        for epoch in range(epochs):
            model.train()
            for batch in DataLoader(dataset, batch_size=64):
                model(batch.cuda(non_blocking=True)).mean().backward()
                optimizer.step()
            predicted = predict(dataset, model)
    """
    assert [h for h in found(src) if h[1] == "HL018"] == [(5, "HL018")]


def test_an_unmarked_namespace_package_of_folders_roots_the_project(tmp_path):
    """VirTex copied without its README: `scripts/pretrain_virtex.py` imports `virtex.utils.common`, a package
    whose `utils/` folder has no `__init__.py`, whose `cycle(dataloader)` calls `dataloader.sampler.set_epoch(...)`.
    The folder holding `virtex/` is the project (classes._unmarked_root), so the sampler the script builds is not
    HL015."""
    _files(tmp_path, {
        "virtex/__init__.py": "",
        "virtex/utils/common.py": """
            def cycle(dataloader, device):
                epoch = 0
                while True:
                    dataloader.sampler.set_epoch(epoch)
                    for batch in dataloader:
                        yield batch
                    epoch += 1
        """,
        "scripts/pretrain.py": """
            import torch
            from torch.utils.data import DataLoader, DistributedSampler
            from virtex.utils.common import cycle

            def main(dataset, model, optimizer):
                sampler = DistributedSampler(dataset, shuffle=True)
                loader = DataLoader(dataset, sampler=sampler, batch_size=8)
                it = cycle(loader, "cuda")
                for step in range(1000):
                    model(next(it)).sum().backward()
                    optimizer.step()
        """,
    })  # fmt: skip
    assert "HL015" not in {f.code for f in lint_paths([tmp_path / "scripts" / "pretrain.py"])}


def test_an_agents_choose_action_is_hot_when_its_learn_loops_over_minibatches():
    """philtabor's PPO `Agent`: `learn()` loops over its own minibatches (so it is a hot loop, not a hot function)
    and `choose_action(observation)`, which `main.py` calls every environment step, copies the observation with a
    blocking `.to(device)`. An agent's per-step methods are hot beside an update that holds the hot loop too
    (analysis: `updates`)."""
    src = """
    import numpy as np
    import torch as T

    class Agent:
        def __init__(self, actor, n_epochs):
            self.actor, self.n_epochs = actor, n_epochs

        def choose_action(self, observation):
            state = T.tensor([observation], dtype=T.float).to(self.actor.device)
            dist = self.actor(state)
            return dist.sample()

        def learn(self, states, batches):
            for _ in range(self.n_epochs):
                for batch in batches:
                    s = T.tensor(states[batch], dtype=T.float).to(self.actor.device, non_blocking=True)
                    loss = self.actor(s).mean()
                    self.actor.optimizer.zero_grad()
                    loss.backward()
                    self.actor.optimizer.step()
    """
    assert (10, "HL012") in found(src)


def test_an_option_of_an_opt_parser_is_a_python_number():
    """MakeItTalk's `self.opt_parser = opt_parser` (the parsed argparse namespace), then `if
    self.opt_parser.lambda_laplacian_smooth_loss > 0.0:` every step: an option, not a tensor, whatever its name
    (kinds.CONFIG_NAME takes `*_parser` too). A real loss compared there is HL005."""
    src = """
    import torch

    class Trainer:
        def __init__(self, opt_parser, model):
            self.opt_parser, self.model = opt_parser, model.cuda()

        def train(self, loader, optimizer):
            for x in loader:
                loss = self.model(x.cuda(non_blocking=True)).mean()
                if self.opt_parser.lambda_laplacian_smooth_loss > 0.0:
                    loss = loss * 2
                loss.backward()
                optimizer.step()
    """
    assert not [h for h in found(src) if h[1] == "HL005"]
    assert (11, "HL005") in found(src.replace("self.opt_parser.lambda_laplacian_smooth_loss > 0.0", "loss > 0.0"))


def test_a_loader_iterated_by_a_closure_every_epoch_is_reiterated():
    """neuralcoref's `learn.py`: `dataloader = DataLoader(..., num_workers=args.numworkers)` in `run(args)`, and
    the nested `run_epochs(...)` iterates `zip(mentions_idx, n_pairs, dataloader)` in its epoch loop. The uses
    inside the closure count (loaders._used_again walks nested functions), so the loader lacks
    `persistent_workers`."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    def run(args, dataset, model, optimizer):
        dataloader = DataLoader(dataset, batch_size=8, num_workers=8, pin_memory=True)

        def run_epochs(start, end):
            for epoch in range(start, end):
                for batch_i, (m, batch) in enumerate(zip(range(100), dataloader)):
                    loss = model(batch.cuda(non_blocking=True)).mean()
                    loss.backward()
                    optimizer.step()

        run_epochs(0, 100)
    """
    assert (6, "HL011") in found(src)
    once = src.replace("            for epoch in range(start, end):\n", "            if start < end:\n")
    assert (6, "HL011") not in found(once)  # (one pass, in a closure called once: nothing to re-fork)


def test_an_evaluation_written_as_a_comprehension_over_validation_batches_is_hl018():
    """torchMoji's `fit_model`: `val_loss = np.mean([calc_loss(loss_op, model(xv), yv).item() for xv, yv in
    val_gen])` after `model.eval()`, every epoch, with no `no_grad` (evals._comprehension_evaluation). Under
    `with torch.no_grad():` it is fine; over the training batches it is not an evaluation."""
    src = """
    import numpy as np
    import torch

    def fit_model(model, loss_op, optim_op, train_gen, val_gen, epochs):
        for epoch in range(epochs):
            model.train()
            for x, y in train_gen:
                optim_op.zero_grad()
                loss_op(model(x), y).backward()
                optim_op.step()
            model.eval()
            val_loss = np.mean([loss_op(model(xv), yv).item() for xv, yv in val_gen])
    """
    assert (13, "HL018") in found(src)
    guarded = src.replace(
        "            val_loss = np.mean(", "            with torch.no_grad():\n                val_loss = np.mean("
    )
    assert not [h for h in found(guarded) if h[1] == "HL018"]
    assert not [h for h in found(src.replace("in val_gen]", "in train_gen]")) if h[1] == "HL018"]


def test_torch_cuda_floattensor_of_numpy_noise_is_hl024():
    """AutoGAN's `z = torch.cuda.FloatTensor(np.random.normal(0, 1, (n, latent_dim)))` every step: host noise
    copied to the device (provenance.legacy_cuda_copies took only a bare `Tensor(...)` alias, not the dotted
    constructor). Sizes (`torch.cuda.FloatTensor(n, d)`) allocate on the device: no copy."""
    src = """
    import numpy as np
    import torch

    def train(gen, dis, opt, loader, args):
        gen.cuda()
        for imgs in loader:
            z = torch.cuda.FloatTensor(np.random.normal(0, 1, (imgs.shape[0], args.latent_dim)))
            loss = dis(gen(z)).mean()
            loss.backward()
            opt.step()
    """
    assert (8, "HL024") in found(src)
    sized = src.replace("np.random.normal(0, 1, (imgs.shape[0], args.latent_dim))", "imgs.shape[0], args.latent_dim")
    assert not [h for h in found(sized) if h[1] == "HL024"]


def test_an_epoch_function_chosen_by_a_flag_makes_its_caller_a_training_loop():
    """vnet.pytorch: `train = train_nll` (or `train_dice` with `--dice`), then `train(args, epoch, ...)` and
    `save_checkpoint(...)` in the epoch loop, which `torch.save`s to `<prefix>_checkpoint.pth.tar` in place. The
    epoch loop calls an epoch function through the alias (analysis: `_chosen` names), so it is a training loop
    and the save in its helper is HL021."""
    src = """
    import os
    import torch

    def save_checkpoint(state, path, prefix, filename="checkpoint.pth.tar"):
        name = os.path.join(path, prefix) + "_" + filename
        torch.save(state, name)

    def train_nll(model, loader, optimizer):
        for data, target in loader:
            optimizer.zero_grad()
            model(data.cuda(non_blocking=True)).sum().backward()
            optimizer.step()

    def main(args, model, loader, optimizer):
        if args.dice:
            train = None
        else:
            train = train_nll
        for epoch in range(args.epochs):
            train(model, loader, optimizer)
            save_checkpoint({"epoch": epoch, "state_dict": model.state_dict()}, args.save, "vnet")
    """
    assert (7, "HL021") in found(src)


def test_an_evaluation_helper_calling_a_model_method_in_its_loop_is_hl018_at_the_call(tmp_path):
    """MixGCF / KGIN: `test(model, user_dict)` in `utils/evaluate.py` scores every user batch with
    `model.rating(u_emb, i_emb)` (a method of the model, not `model(...)`), and `main.py` calls it every epoch
    after `model.eval()` with no `no_grad` (evals._model_method). Decorated with `@torch.no_grad()`, it is fine."""
    helper = """
        import torch

        def test(model, users, batch=100):
            user_emb, item_emb = model.generate()
            out = []
            for start in range(0, len(users), batch):
                out.append(model.rating(user_emb[start:start + batch], item_emb).detach().cpu())
            return out
    """
    script = """
        import torch
        from utils.evaluate import test

        def main(model, loader, optimizer, users, epochs):
            model.cuda()
            for epoch in range(epochs):
                model.train()
                for batch in loader:
                    model(batch.cuda(non_blocking=True)).mean().backward()
                    optimizer.step()
                model.eval()
                result = test(model, users)
    """
    (tmp_path / "README.md").write_text("x\n")
    _files(tmp_path, {"utils/__init__.py": "", "utils/evaluate.py": helper, "main.py": script})
    assert (13, "HL018") in {(f.line, f.code) for f in lint_paths([tmp_path / "main.py"])}
    other = tmp_path / "b"
    other.mkdir()
    (other / "README.md").write_text("x\n")
    guarded = helper.replace("        def test(", "        @torch.no_grad()\n        def test(")
    _files(other, {"utils/__init__.py": "", "utils/evaluate.py": guarded, "main.py": script})
    assert "HL018" not in {f.code for f in lint_paths([other / "main.py"])}


def test_a_second_move_of_what_was_already_moved_is_not_hl012():
    """Three ways research code puts tensors on the device before a `.to(device)` that then copies nothing
    (moved.py): NeRF++ moves every entry of `ray_batch` in a loop, VIBE hands `target_3d` to
    `move_dict_to_device` inside an `if`, SAM-Med3D concatenates a list it filled with device tensors. The
    same code without the earlier move still copies from the host (HL012)."""
    src = """
    import torch

    def move_dict_to_device(d, device):
        for k in d:
            d[k] = d[k].to(device, non_blocking=True)

    def train(model, optimizer, loader, loader3d, rank, device):
        clicks = []
        for ray_batch in loader:
            for key in ray_batch:
                ray_batch[key] = ray_batch[key].to(rank, non_blocking=True)
            target_3d = None
            if loader3d is not None:
                target_3d = next(loader3d)
                move_dict_to_device(target_3d, device)
            rgb = ray_batch["rgb"].to(rank)
            feats = target_3d["features"].to(device)
            point = model(rgb).to(device, non_blocking=True)
            clicks.append(point)
            multi = torch.cat(clicks, dim=1).to(device)
            loss = (model(feats) + multi.sum()).mean()
            loss.backward()
            optimizer.step()
    """
    assert not [h for h in found(src) if h[1] == "HL012"]
    bare = (src.replace("            for key in ray_batch:\n                ray_batch[key] = ray_batch[key].to(rank, "
                        "non_blocking=True)\n", "")
            .replace("                move_dict_to_device(target_3d, device)\n", "")
            .replace("point = model(rgb).to(device, non_blocking=True)", "point = torch.rand(3)"))  # fmt: skip
    said = " ".join(f.message for f in lint_source(textwrap.dedent(bare), "<string>") if f.code == "HL012")
    assert all(x in said for x in ("ray_batch['rgb']", "target_3d['features']", "torch.cat(clicks"))


def test_batches_of_a_torchtext_iterator_built_on_the_device_are_on_the_device():
    """attention-is-all-you-need: `BucketIterator(train, batch_size=b, device=device)` builds every batch on the
    device, so `batch.src.to(device)` in the loop copies nothing (moved.device_iterators). With `device=-1`
    (legacy torchtext's CPU) the batches are host tensors."""
    src = """
    import torch
    from torchtext.data import BucketIterator

    def train_epoch(model, training_data, optimizer, device):
        for batch in training_data:
            src_seq = batch.src.to(device)
            loss = model(src_seq).mean()
            loss.backward()
            optimizer.step()

    def main(train, device, model, optimizer):
        model.to(device)
        it = BucketIterator(train, batch_size=64, device=device, train=True)
        for epoch in range(10):
            train_epoch(model, it, optimizer, device)
    """
    assert not [h for h in found(src) if h[1] == "HL012"]
    assert (7, "HL012") in found(src.replace("device=device, train=True", "device=-1, train=True"))


def test_a_loop_calling_an_imported_step_function_by_name_trains(tmp_path):
    """PairNorm's `main.py`: `from utils import train, val`, then `for epoch in range(args.epochs):
    train_loss, train_acc = train(net, optimizer, criterion, data)` (one full-batch step in `utils.py`) and
    `val(net, criterion, data)` (a forward after `net.eval()`, no `no_grad`, no loop). The loop trains
    (imports.remote_steps takes a plain-name call in a loop), so its in-place `torch.save` is HL021, and the
    full-batch evaluation is HL018 at its call."""
    helper = """
        def train(net, optimizer, criterion, data):
            net.train()
            optimizer.zero_grad()
            loss = criterion(net(data.x), data.y)
            loss.backward()
            optimizer.step()
            return loss

        def val(net, criterion, data):
            net.eval()
            return criterion(net(data.x), data.y)
    """
    script = """
        import torch
        from utils import train, val

        net = torch.nn.Linear(4, 2).cuda()
        optimizer = torch.optim.Adam(net.parameters())
        criterion = torch.nn.CrossEntropyLoss()
        data = None
        best = 1e10
        for epoch in range(100):
            train_loss = train(net, optimizer, criterion, data)
            val_loss = val(net, criterion, data)
            if val_loss < best:
                best = val_loss
                torch.save(net.state_dict(), "checkpoint-best.pkl")
    """
    (tmp_path / "README.md").write_text("x\n")
    _files(tmp_path, {"utils.py": helper, "main.py": script})
    codes = {(f.line, f.code) for f in lint_paths([tmp_path / "main.py"])}
    assert {(12, "HL018"), (15, "HL021")} <= codes


def test_a_mask_kept_on_the_loss_object_is_boolean_indexing_and_its_construction_runs_init(tmp_path):
    """TF-C's `NTXentLoss_poly`: `__init__` keeps `self.mask_samples_from_same_repr = self._get_correlated_mask()
    .type(torch.bool)` and `forward` indexes `similarity_matrix[self.mask_samples_from_same_repr]` (HL006,
    indexing: a `self.` attribute every assignment of which makes a bool tensor). The loop builds the loss
    anew every step, `NTXentLoss_poly(device, ...)`: that line runs `__init__`, not `forward` (effects)."""
    loss = """
        import torch

        class NTXentLoss_poly(torch.nn.Module):
            def __init__(self, device, batch_size):
                super().__init__()
                self.batch_size = batch_size
                self.mask_samples_from_same_repr = torch.eye(2 * batch_size).to(device).type(torch.bool)

            def forward(self, zis, zjs):
                reps = torch.cat([zjs, zis], dim=0)
                similarity_matrix = reps @ reps.T
                negatives = similarity_matrix[self.mask_samples_from_same_repr]
                return negatives.mean()
    """
    script = """
        import torch
        from loss import NTXentLoss_poly

        def pretrain(model, optimizer, loader, device):
            model.cuda()
            for data, aug in loader:
                h, h_aug = model(data.to(device, non_blocking=True)), model(aug.to(device, non_blocking=True))
                criterion = NTXentLoss_poly(device, 128)
                loss = criterion(h, h_aug)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    """
    (tmp_path / "README.md").write_text("x\n")
    _files(tmp_path, {"loss.py": loss, "train.py": script})
    hits = {(f.line, f.code) for f in lint_paths([tmp_path / "train.py"])}
    assert (10, "HL006") in hits and (9, "HL006") not in hits


def test_a_parameter_forwarded_by_a_same_file_caller_is_typed_by_its_callers(tmp_path):
    """DrQ / SAC-AE / dmcontrol-gb: `train.py` builds `self.logger = Logger(...)` and calls
    `self.agent.update(self.replay_buffer, self.logger, self.step)`; `Agent.update` hands `logger` on to
    `self.update_critic(obs, ..., logger, step)`, which calls `logger.log('train_critic/loss', critic_loss, step)`
    every update, and `Logger.log` does `value.item()`. The parameter is typed through the same-file call
    (callsites._forwarded), and `log`, a tensor method too, is typed like any other (imports.Project.callee), so
    the read is HL001 at the `logger.log` call."""
    logger = """
        import torch

        class Logger:
            def __init__(self, log_dir):
                self.rows = []

            def log(self, key, value, step):
                if type(value) == torch.Tensor:
                    value = value.item()
                self.rows.append((key, value, step))
    """
    agent = """
        import torch

        class Agent:
            def __init__(self, critic, critic_optimizer):
                self.critic, self.critic_optimizer = critic.cuda(), critic_optimizer

            def update_critic(self, obs, target, logger, step):
                critic_loss = ((self.critic(obs) - target) ** 2).mean()
                logger.log("train_critic/loss", critic_loss, step)
                self.critic_optimizer.zero_grad()
                critic_loss.backward()
                self.critic_optimizer.step()

            def update(self, replay_buffer, logger, step):
                obs, target = replay_buffer.sample()
                self.update_critic(obs, target, logger, step)
    """
    train = """
        from agent import Agent
        from logger import Logger

        class Workspace:
            def __init__(self, critic, opt, buffer):
                self.logger = Logger("logs")
                self.agent = Agent(critic, opt)
                self.replay_buffer = buffer

            def run(self, steps):
                for step in range(steps):
                    self.agent.update(self.replay_buffer, self.logger, step)
    """
    (tmp_path / "README.md").write_text("x\n")
    _files(tmp_path, {"logger.py": logger, "agent.py": agent, "train.py": train})
    assert (10, "HL001") in {(f.line, f.code) for f in lint_paths([tmp_path / "agent.py"])}


def test_a_loader_builder_reached_through_a_renamed_function_is_judged_at_the_call(tmp_path):
    """mobilenetv2.pytorch: `if args.data_backend == 'pytorch': get_train_loader = get_pytorch_train_loader`
    (imported from `utils/dataloaders.py`, which builds `DataLoader(..., num_workers=workers)`), then
    `train_loader, n = get_train_loader(args.data, ...)` iterated every epoch: the renamed call resolves to the
    first function assigned (imports.Project._renamed), so the loader lacks `persistent_workers` at the call."""
    loaders = """
        import torch

        def get_pytorch_train_loader(data, batch_size, workers=5):
            dataset = torch.utils.data.TensorDataset(data)
            loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=workers, pin_memory=True)
            return loader, len(loader)

        def get_dali_train_loader(dali_cpu=False):
            return None
    """
    script = """
        import torch
        from utils.dataloaders import get_pytorch_train_loader, get_dali_train_loader

        def main(args, model, optimizer):
            model.cuda()
            if args.data_backend == "pytorch":
                get_train_loader = get_pytorch_train_loader
            else:
                get_train_loader = get_dali_train_loader(dali_cpu=False)
            train_loader, train_loader_len = get_train_loader(args.data, args.batch_size, workers=args.workers)
            for epoch in range(args.epochs):
                for x in train_loader:
                    model(x.cuda(non_blocking=True)).mean().backward()
                    optimizer.step()
    """
    (tmp_path / "README.md").write_text("x\n")
    _files(tmp_path, {"utils/__init__.py": "", "utils/dataloaders.py": loaders, "imagenet.py": script})
    assert (11, "HL011") in {(f.line, f.code) for f in lint_paths([tmp_path / "imagenet.py"])}


def test_a_loader_nothing_reads_is_not_hl011(tmp_path):
    """MNAD's `Train.py` builds `test_batch = data.DataLoader(..., num_workers=args.num_workers_test)` at module
    level and never iterates it (a script that trains at module level is imported by nobody: loaders._never_read);
    DCdetector keeps `self.vali_loader = get_loader_segment(...)` and never reads it (effects.loader_hits asks the
    same). Iterated every epoch, both lack `persistent_workers`."""
    script = """
    import torch
    from torch.utils import data

    model = torch.nn.Linear(4, 2).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    train_batch = data.DataLoader(list(range(8)), batch_size=4, num_workers=4, pin_memory=True, persistent_workers=True)
    test_batch = data.DataLoader(list(range(8)), batch_size=1, num_workers=4, pin_memory=True)
    for epoch in range(10):
        for x in train_batch:
            model(x.cuda(non_blocking=True)).sum().backward()
            optimizer.step()
    """
    assert (8, "HL011") not in found(script)
    read = script.replace(
        "        for x in train_batch:", "        for y in test_batch:\n            pass\n        for x in train_batch:"
    )
    assert (8, "HL011") in found(read)
    helper = """
        import torch

        def get_loader_segment(path, batch_size, mode="train"):
            return torch.utils.data.DataLoader(list(range(8)), batch_size=batch_size, num_workers=8, pin_memory=True)
    """
    solver = """
        import torch
        from data_factory import get_loader_segment

        class Solver:
            def __init__(self, path, model, optimizer):
                self.model, self.optimizer = model.cuda(), optimizer
                self.train_loader = get_loader_segment(path, 8, mode="train")
                self.vali_loader = get_loader_segment(path, 8, mode="val")

            def train(self, epochs):
                for epoch in range(epochs):
                    for x in self.train_loader:
                        self.model(x.cuda(non_blocking=True)).sum().backward()
                        self.optimizer.step()
    """
    (tmp_path / "README.md").write_text("x\n")
    _files(tmp_path, {"data_factory.py": helper, "solver.py": solver})
    hits = {(f.line, f.code) for f in lint_paths([tmp_path / "solver.py"])}
    assert (8, "HL011") in hits and (9, "HL011") not in hits


def test_a_module_named_log_is_not_a_logger():
    """mvgrl's node classification: `log = LogReg(hid_units, nb_classes)` (a linear classifier), then
    `logits = log(train_embs)` every step: a module called, not a logging call formatting a tensor
    (effects.quiet_logger: a name bound to an instance of a class that is no logger, writer or meter)."""
    src = """
    import torch
    import torch.nn as nn


    class LogReg(nn.Module):
        def __init__(self, ft_in, nb_classes):
            super(LogReg, self).__init__()
            self.fc = nn.Linear(ft_in, nb_classes)

        def forward(self, seq):
            return torch.log_softmax(self.fc(seq), dim=-1)


    def train(model, features, labels, idx_train):
        features = features.cuda()
        train_embs = model(features).detach()[0, idx_train]
        xent = nn.CrossEntropyLoss()
        for _ in range(50):
            log = LogReg(16, 4)
            opt = torch.optim.Adam(log.parameters(), lr=1e-2)
            log.cuda()
            for _ in range(300):
                log.train()
                opt.zero_grad()
                logits = log(train_embs)
                loss = xent(logits, labels)
                loss.backward()
                opt.step()
    """
    assert not [h for h in found(src) if h[1] == "HL002"]


def test_a_fixed_name_passed_once_after_the_loop_does_not_make_the_epoch_saves_fixed():
    """Group-Free-3D: `save_checkpoint(args, epoch, ...)` every `save_freq` epochs writes
    `f'ckpt_epoch_{epoch}.pth'`, a new file each time, and `save_checkpoint(args, 'last', ..., save_cur=True)`
    once after the loop: the fixed name the final call passes does not make the training loop's saves
    in-place (saves._caller_paths counts only callers in a training loop). Passed in the loop, it does."""
    src = """
    import os
    import torch

    def save_checkpoint(args, epoch, model, save_cur=False):
        state = {"model": model.state_dict(), "epoch": epoch}
        if save_cur:
            torch.save(state, os.path.join(args.log_dir, f"ckpt_epoch_{epoch}.pth"))
        elif epoch % args.save_freq == 0:
            torch.save(state, os.path.join(args.log_dir, f"ckpt_epoch_{epoch}.pth"))

    def main(args, model, loader, optimizer):
        for epoch in range(args.epochs):
            for x in loader:
                model(x.cuda(non_blocking=True)).sum().backward()
                optimizer.step()
            save_checkpoint(args, epoch, model)
        save_checkpoint(args, "last", model, save_cur=True)
    """
    assert not [h for h in found(src) if h[1] == "HL021"]
    inside = src.replace(
        "            save_checkpoint(args, epoch, model)", '            save_checkpoint(args, "last", model)'
    )
    assert (10, "HL021") in found(inside)


def test_a_step_buffer_of_a_trainer_never_moved_is_a_host_tensor():
    """audiolm-pytorch's `SoundStreamTrainer(nn.Module)`: `self.register_buffer('steps', torch.Tensor([0]))`, and
    the trainer itself is never moved (Accelerate prepares the models), so `self.steps.item()` every step and
    `while self.steps < self.num_train_steps` read a CPU tensor: no device sync (moved.trainer_buffer). A model's
    buffer, or a trainer that moves itself with `self.to(device)`, is still read from the device."""
    src = """
    import torch
    from torch import nn

    class SoundStreamTrainer(nn.Module):
        def __init__(self, model, optimizer, loader, num_train_steps):
            super().__init__()
            self.model, self.optim, self.dl = model.cuda(), optimizer, loader
            self.num_train_steps = num_train_steps
            self.register_buffer("steps", torch.Tensor([0]))

        def load(self, path):  # (a resume the README never runs)
            self.steps = torch.tensor([int(path) + 1], device="cuda")

        def train_step(self):
            steps = int(self.steps.item())
            loss = self.model(next(self.dl).cuda(non_blocking=True)).mean()
            loss.backward()
            self.optim.step()
            self.steps += 1
            return steps

        def train(self):
            while self.steps < self.num_train_steps:
                self.train_step()
    """
    assert not [h for h in found(src) if h[1] in ("HL001", "HL005")]
    moved = src.replace(
        "self.num_train_steps = num_train_steps", "self.num_train_steps = num_train_steps\n            self.to('cuda')"
    )
    assert (25, "HL005") in found(moved)


def test_a_method_handing_an_optimizer_to_an_imported_step_helper_is_a_step(tmp_path):
    """ku2482's (toshikwa's) soft-actor-critic: `learn()` calls `update_params(self.q1_optim, self.critic.Q1,
    q1_loss, self.grad_clip)` from `utils.py`, which zeroes, backpropagates and steps; `learn()` has no loop
    and is called from the episode's `while not done:`. A plain-name project call handed an optimizer takes
    the step (imports.remote_steps), so `learn()` is hot and its `.item()` is read every update. A plain-name
    helper given no optimizer (hotloop's own `memory_check(self, source)`) makes nothing hot."""
    utils = """
        def update_params(optim, network, loss, grad_clip=None):
            optim.zero_grad()
            loss.backward()
            optim.step()
    """
    agent = """
        import torch
        from utils import update_params

        class SacAgent:
            def __init__(self, critic, q1_optim):
                self.critic, self.q1_optim = critic.cuda(), q1_optim

            def learn(self, batch):
                q1_loss = self.critic(batch).mean()
                update_params(self.q1_optim, self.critic, q1_loss)
                return q1_loss.detach().item()
    """
    (tmp_path / "README.md").write_text("x\n")
    _files(tmp_path, {"utils.py": utils, "agent.py": agent})
    assert (12, "HL001") in {(f.line, f.code) for f in lint_paths([tmp_path / "agent.py"])}


def test_a_policy_evaluate_method_in_the_training_step_is_not_an_evaluation(tmp_path):
    """SAC's `self.actor_local.evaluate(states)` (a reparameterised sample for the actor loss) and SB3's
    `self.policy.evaluate_actions(obs, actions)` run inside the update and need their gradients: a method with
    no loop of its own is no evaluation pass (evals.eval_hits takes the loop-less case only for functions)."""
    networks = """
        import torch

        class Actor(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.mu = torch.nn.Linear(4, 2)

            def forward(self, state):
                return self.mu(state)

            def evaluate(self, state):
                mu = self.forward(state)
                return mu + torch.randn_like(mu)
    """
    agent = """
        import torch
        from networks import Actor

        class Agent:
            def __init__(self):
                self.actor_local = Actor().cuda()
                self.actor_optimizer = torch.optim.Adam(self.actor_local.parameters())

            def learn(self, states):
                actions_pred = self.actor_local.evaluate(states)
                actor_loss = actions_pred.pow(2).mean()
                self.actor_optimizer.zero_grad()
                actor_loss.backward()
                self.actor_optimizer.step()
    """
    (tmp_path / "README.md").write_text("x\n")
    _files(tmp_path, {"networks.py": networks, "agent.py": agent})
    assert "HL018" not in {f.code for f in lint_paths([tmp_path / "agent.py"])}


def test_a_rollout_list_backpropagated_by_its_update_is_not_hl019():
    """Street-fighter-A3C-ICM: `inv_losses = []` at the top of each update, `inv_losses.append(inv_loss)` every
    environment step, then the list is summed into `total_loss.backward()` after the rollout: the graphs live for
    one update (totals.rollout_list). A list kept across an epoch of steps that each backpropagate on their own is
    still HL019."""
    src = """
    import torch

    def train(model, optimizer, env, num_local_steps, updates):
        model.cuda()
        for update in range(updates):
            inv_losses = []
            state = env.reset()
            for _ in range(num_local_steps):
                logits, inv_loss = model(state.cuda(non_blocking=True))
                state = env.step(logits.argmax().item())
                inv_losses.append(inv_loss)
            total_loss = sum(inv_losses)
            optimizer.zero_grad()
            total_loss.backward()
            optimizer.step()
    """
    assert not [h for h in found(src) if h[1] == "HL019"]
    epoch = """
    import torch

    def train(model, optimizer, loader, epochs):
        model.cuda()
        for epoch in range(epochs):
            epoch_losses = []
            for x in loader:
                loss = model(x.cuda(non_blocking=True)).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                epoch_losses.append(loss)
            print(sum(epoch_losses) / len(epoch_losses))
    """
    assert (13, "HL019") in found(epoch)


def test_a_save_after_copying_the_last_good_file_aside_is_not_hl021():
    """transformer-lm's `save()`: `shutil.copy(path, run_path / f'{path.stem}-prev{path.suffix}')` for the model and
    optimizer files, then `torch.save(..., model_path)`: a crash mid-write leaves the previous checkpoint beside it
    (saves._replaced_atomically). Without the copy it is HL021."""
    src = """
    import shutil
    import torch

    def train(model, optimizer, loader, run_path, epochs):
        model_path = run_path / "model.pt"

        def save():
            if model_path.exists():
                shutil.copy(model_path, run_path / f"{model_path.stem}-prev{model_path.suffix}")
            torch.save({"state_dict": model.state_dict()}, model_path)

        for epoch in range(epochs):
            for x in loader:
                model(x.cuda(non_blocking=True)).sum().backward()
                optimizer.step()
            save()
    """
    assert not [h for h in found(src) if h[1] == "HL021"]
    bare = src.replace("            if model_path.exists():\n", "            if False:\n")
    assert (11, "HL021") in found(bare.replace("shutil.copy(", "print("))


def test_a_whole_move_counts_at_the_top_of_the_function_and_not_across_a_loop_rebinding():
    """moved.moved_whole_before scans the blocks around the read up to its function's own body (a helper that moves
    its batch first thing), and a `for b in loader:` between the move and the read binds `b` anew: that batch was
    not moved."""
    src = """
    import torch

    def move_dict_to_device(d, device):
        for k in d:
            d[k] = d[k].to(device, non_blocking=True)

    def step(model, optimizer, batch, device):
        move_dict_to_device(batch, device)
        x = batch["x"].to(device)
        loss = model(x).mean()
        loss.backward()
        optimizer.step()

    def train(model, optimizer, loader, device):
        model.cuda()
        b = next(iter(loader))
        move_dict_to_device(b, device)
        for b in loader:
            y = b["x"].to(device)
            model(y).mean().backward()
            optimizer.step()
    """
    hits = [h for h in found(src) if h[1] == "HL012"]
    assert (10, "HL012") not in hits and (20, "HL012") in hits
