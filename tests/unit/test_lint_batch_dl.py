"""Patterns found while scoring held-out batches DL and DM and the whole labelled set (session 21), in our own
words. Each test that asks for a finding fails without the change it names; each one that asks for silence
guards that change against the false alarm it could raise."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_paths, lint_source


def found(src: str, path: str = "<string>") -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src), path)]


def _project(root: Path, files: dict[str, str]) -> None:
    (root / "README.md").write_text("project\n")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


def test_a_minibatch_of_a_host_permutation_indexing_a_device_buffer_is_hl024():
    """ACE's training buffer: `self.buffer = {"features": torch.empty(..., device=self.device)}` filled on the GPU,
    then indexed every step with a slice of `torch.randperm(n)` made on the host (indexing.IndexChecks: a slice of
    a host-made index, and an attribute every assignment of which is on the device). Made with `device=`, the
    permutation is already there."""
    src = """
    import torch

    class Trainer:
        def __init__(self, device):
            self.device = device
            self.training_buffer = None

        def create_training_buffer(self, n, dim):
            self.training_buffer = {"features": torch.empty((n, dim), device=self.device)}

        def run(self, model, optimizer, n, b):
            random_indices = torch.randperm(n)
            for start in range(0, n, b):
                random_batch_indices = random_indices[start:start + b]
                loss = model(self.training_buffer["features"][random_batch_indices]).mean()
                loss.backward()
                optimizer.step()
    """
    assert (16, "HL024") in found(src)
    assert not [h for h in found(src.replace("torch.randperm(n)", "torch.randperm(n, device=self.device)"))
                if h[1] == "HL024"]  # fmt: skip


def test_a_numpy_draw_indexing_what_a_cuda_op_returned_is_hl024():
    """RS-CNN / Point-MAE: `fps_idx = pointnet2_utils.furthest_point_sample(points, 1200)` of the device points,
    then `fps_idx[:, np.random.choice(1200, n, False)]` every step: the NumPy indices are copied to the device.
    One `np.random.randint(n)` is a Python number, not an index array."""
    src = """
    import numpy as np
    import torch
    import pointnet2_utils

    for points, target in loader:
        points = points.cuda(non_blocking=True)
        fps_idx = pointnet2_utils.furthest_point_sample(points, 1200)
        fps_idx = fps_idx[:, np.random.choice(1200, 1024, False)]
        loss = model(points, fps_idx).mean()
        loss.backward()
        optimizer.step()
    """
    assert (9, "HL024") in found(src)
    assert (9, "HL024") not in found(src.replace("np.random.choice(1200, 1024, False)", "np.random.randint(1200)"))


def test_a_list_a_same_file_helper_returns_is_not_taken_for_a_device_tensor():
    """A same-file helper given device tensors may return anything (a list of crops): indexing its result with a
    host mask is for the kind model to judge, not for `on_device` (BackgroundMattingV2's guard, kept)."""
    src = """
    import torch

    def crops_of(*imgs):
        return [img[:, :8] for img in imgs]

    for x in loader:
        x = x.cuda(non_blocking=True)
        crops = crops_of(x)
        keep = torch.rand(4) < 0.5
        picked = crops[keep]
        loss = model(x).mean()
        loss.backward()
        optimizer.step()
    """
    assert (11, "HL024") not in found(src)


def test_one_python_number_made_a_device_tensor_is_not_reported():
    """`torch.tensor(0.0, device=z.device)` (ts2vec's loss, OLMo's and timm's counters) copies and waits like any
    host data, but the judged set counts none of them (3 labelled against 14 unlabelled when tried): only lists
    and shapes of Python numbers are HL024. A list of one number still is."""
    src = """
    import torch

    for x in loader:
        x = x.cuda(non_blocking=True)
        zero = torch.tensor(0.0, device=x.device)
        count = torch.tensor(len(x), device=x.device)
        listed = torch.tensor([len(x)], device=x.device)
        loss = model(x).mean() + zero + count + listed
        loss.backward()
        optimizer.step()
    """
    hits = found(src)
    assert (6, "HL024") not in hits and (7, "HL024") not in hits
    assert (8, "HL024") in hits


def test_a_run_directory_stamped_once_before_the_loop_is_one_path_rewritten():
    """GemNet: `directory = logdir + datetime.now().strftime(...)` once, then `torch.save(state, log_path_model)`
    with `log_path_model = f"{log_dir}/model.pth"` every `save_interval` steps: the same file each time. A time
    stamp taken at each save names a new file (saves._fresh_path)."""
    src = """
    import os
    from datetime import datetime
    import torch

    def run(model, optimizer, loader, logdir):
        directory = logdir + "/" + datetime.now().strftime("%Y%m%d_%H%M%S")
        log_dir = os.path.join(directory, "logs")
        log_path_model = f"{log_dir}/model.pth"
        for step, batch in enumerate(loader):
            loss = model(batch.cuda(non_blocking=True)).mean()
            loss.backward()
            optimizer.step()
            if step % 1000 == 0:
                torch.save({"model": model.state_dict()}, log_path_model)
    """
    assert (15, "HL021") in found(src)
    stamped = src.replace(
        "            if step % 1000 == 0:\n",
        "            if step % 1000 == 0:\n"
        "                log_path_model = f\"{log_dir}/{datetime.now().strftime('%H%M%S')}.pth\"\n",
    )
    assert not [h for h in found(stamped) if h[1] == "HL021"]


def test_a_package_imported_without_its_init_still_resolves_its_step(tmp_path: Path):
    """tabular-dl-num-embeddings: `import lib` and `lib.train_with_auto_virtual_batch(...)` (in lib/deep.py; the
    checkout holds no lib/__init__.py) takes the step, so the loop trains and the `save_checkpoint()` it calls
    on a new best writes a fixed path in place (imports.Project.folders)."""
    _project(
        tmp_path,
        {
            "bin/train.py": """
        import torch
        import lib

        def save_checkpoint():
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "checkpoint.pt")

        for epoch in range(100):
            for batch_idx in epochs:
                loss = lib.train_with_auto_virtual_batch(optimizer, loss_fn, step, batch_idx)
            if improved():
                save_checkpoint()
        """,
            "lib/deep.py": """
        def train_with_auto_virtual_batch(optimizer, loss_fn, step, batch):
            optimizer.zero_grad()
            loss = loss_fn(*step(batch))
            loss.backward()
            optimizer.step()
            return loss
        """,
        },
    )
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "bin" / "train.py")])]
    assert (6, "HL021") in hits


def test_a_step_another_file_calls_is_training_code_for_its_gated_save(tmp_path: Path):
    """STCN: train.py's loop calls `model.do_pass(data, it)`; in model.py, `do_pass` saves through `self.save(it)`
    under `if it % interval == 0`, which writes a fixed `_checkpoint.pth`. Linted together, the step is training
    code in its own file (analysis.ModuleInfo.propagate), so the save inside the gate is in the training loop."""
    _project(
        tmp_path,
        {
            "train.py": """
        import torch
        from model import Model

        model = Model()
        for e in range(10):
            for data in train_loader:
                model.do_pass(data, e)
        """,
            "model.py": """
        import torch

        class Model:
            def do_pass(self, data, it):
                loss = self.net(data.cuda(non_blocking=True)).mean()
                if it % 1000 == 0:
                    self.save_checkpoint(it)
                loss.backward()
                self.optimizer.step()

            def save_checkpoint(self, it):
                torch.save({"it": it, "network": self.net.state_dict()}, self.path + "_checkpoint.pth")
        """,
        },
    )
    hits = [(f.path, f.line, f.code) for f in lint_paths([str(tmp_path / "train.py"), str(tmp_path / "model.py")])]
    assert (str(tmp_path / "model.py"), 13, "HL021") in hits


def test_a_batch_fetched_above_a_loop_over_layers_runs_every_step():
    """cflow-ad: `image, _, _ = next(iterator)` then `for l, layer in enumerate(pool_layers): for f in range(n):
    ... optimizer.step()`: the copy of the batch happens once per fetched batch, between steps (a loop over layers
    between the fetch and the step loop hides it otherwise)."""
    src = """
    import torch

    def train(loader, layers, model, optimizer):
        iterator = iter(loader)
        for i in range(len(loader)):
            try:
                image, _, _ = next(iterator)
            except StopIteration:
                iterator = iter(loader)
                image, _, _ = next(iterator)
            image = image.to("cuda")
            for l, layer in enumerate(layers):
                for k in range(4):
                    loss = model(image[k]).sum()
                    loss.backward()
                    optimizer.step()
    """
    assert (12, "HL012") in found(src)


def test_a_script_without_torch_whose_loader_loop_calls_an_inherited_step(tmp_path: Path):
    """DeepCAD: train.py imports no torch; `pbar = tqdm(train_loader)`, `for b, data in enumerate(pbar):
    outputs, losses = tr_agent.train_func(data)` with `train_func` defined on the trainer's base class in another
    file, then `{k: v.item() for k, v in losses.items()}` for the progress bar every step (drivers: the loop over
    a name bound to a wrapped loader; imports.defining: a method the class inherits)."""
    _project(
        tmp_path,
        {
            "train.py": """
        from tqdm import tqdm
        from trainer import TrainerAE

        def main(cfg, train_loader):
            tr_agent = TrainerAE(cfg)
            for e in range(cfg.nr_epochs):
                pbar = tqdm(train_loader)
                for b, data in enumerate(pbar):
                    outputs, losses = tr_agent.train_func(data)
                    pbar.set_postfix({k: v.item() for k, v in losses.items()})
        """,
            "trainer/base.py": """
        class BaseTrainer:
            def update_network(self, loss_dict):
                loss = sum(loss_dict.values())
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()

            def train_func(self, data):
                outputs, losses = self.forward(data)
                self.update_network(losses)
                return outputs, losses
        """,
            "trainer/trainer_ae.py": """
        from .base import BaseTrainer

        class TrainerAE(BaseTrainer):
            def forward(self, data):
                return self.net(data["x"].cuda()), {}
        """,
            "trainer/__init__.py": "from .trainer_ae import TrainerAE\n",
        },
    )
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "train.py")])]
    assert (11, "HL001") in hits


def test_the_mean_of_a_list_of_read_values_is_a_number_whatever_its_name():
    """dvector: `running_train_loss.append(loss.item())` then `avg_train_loss = sum(running_train_loss) /
    len(running_train_loss)` shown in the progress bar: a Python float named like a loss (kinds: a container
    of `.item()` values; forks.builtin_kind: `sum` of it)."""
    src = """
    from collections import deque
    import torch

    running_train_loss = deque(maxlen=100)
    for x in loader:
        loss = model(x.cuda(non_blocking=True)).mean()
        loss.backward()
        optimizer.step()
        running_train_loss.append(loss.item())
        avg_train_loss = sum(running_train_loss) / len(running_train_loss)
        pbar.set_postfix(loss=avg_train_loss)
    """
    hits = found(src)
    assert (12, "HL002") not in hits and (10, "HL001") in hits
    assert (12, "HL002") in found(src.replace("running_train_loss.append(loss.item())",
                                              "running_train_loss.append(loss.detach())"))  # fmt: skip


def test_a_prediction_sampler_beside_a_sequential_one_needs_no_set_epoch():
    """CLUE (the Transformers examples' pattern): `SequentialSampler(pred_dataset) if args.local_rank == -1 else
    DistributedSampler(pred_dataset)` reads the data once in order; the training sampler beside a RandomSampler
    still repeats its order every epoch without `set_epoch`."""
    src = """
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler

    def train(args, train_dataset, model, optimizer):
        train_sampler = RandomSampler(train_dataset) if args.local_rank == -1 else DistributedSampler(train_dataset)
        loader = DataLoader(train_dataset, sampler=train_sampler, batch_size=8)
        for epoch in range(3):
            for batch in loader:
                loss = model(batch.cuda(non_blocking=True)).mean()
                loss.backward()
                optimizer.step()

    def predict(args, pred_dataset, model):
        sampler = SequentialSampler(pred_dataset) if args.local_rank == -1 else DistributedSampler(pred_dataset)
        return DataLoader(pred_dataset, sampler=sampler, batch_size=8)
    """
    hits = found(src)
    assert (6, "HL015") in hits
    assert (15, "HL015") not in hits


def test_the_loop_around_an_accumulation_loop_runs_once_per_update():
    """bayesian-flow-networks: `for step in range(n): for _ in range(cfg.accumulate): ... optimizer.step()` then
    `pbar.update(loss=loss.item())` in the outer loop: once per update, every update (drivers._per_step_outer).
    A loop over epochs around a loader's loop is not such a loop."""
    src = """
    import torch

    def train(cfg, model, optimizer, train_iter, pbar):
        for step in range(cfg.n_training_steps):
            for _ in range(cfg.accumulate):
                loss = model(next(train_iter).cuda(non_blocking=True))
                loss.backward()
                optimizer.step()
            pbar.update(loss=loss.item())
    """
    assert (10, "HL001") in found(src)
    per_epoch = src.replace("range(cfg.accumulate)", "range(cfg.batches)")
    assert (10, "HL001") not in found(per_epoch)


def test_accelerators_save_over_a_fixed_name_is_hl021_and_says_so():
    """Music-Source-Separation-Training: `accelerator.save(model.state_dict(), store_path)` with `store_path =
    results + '/last_{}.ckpt'.format(args.model_type)` every epoch: `torch.save` under Accelerate's name."""
    src = """
    import torch

    def train(args, accelerator, model, optimizer, loader):
        for epoch in range(args.epochs):
            for x in loader:
                loss = model(x).mean()
                accelerator.backward(loss)
                optimizer.step()
            store_path = args.results_path + '/last_{}.ckpt'.format(args.model_type)
            accelerator.save(accelerator.unwrap_model(model).state_dict(), store_path)
    """
    hits = [f for f in lint_source(textwrap.dedent(src)) if f.code == "HL021"]
    assert [(f.line, "accelerator.save" in f.message) for f in hits] == [(11, True)]


def test_a_loader_whose_prepared_copy_is_thrown_away_yields_host_batches():
    """x-flux: `dit, optimizer, _, sched = accelerator.prepare(dit, optimizer, deepcopy(train_dataloader), sched)`
    and then `for step, batch in enumerate(train_dataloader)`: the original loader's batches are host tensors, so
    `img.to(accelerator.device)` copies, blocking (drivers.prepared). Bound to its own name again, the prepared
    loader yields device batches and the `.to()` copies nothing."""
    src = """
    from copy import deepcopy
    import torch

    def train(accelerator, dit, optimizer, sched, train_dataloader):
        dit, optimizer, _, sched = accelerator.prepare(dit, optimizer, deepcopy(train_dataloader), sched)
        for epoch in range(10):
            for step, batch in enumerate(train_dataloader):
                img, prompts = batch
                loss = dit(img.to(accelerator.device)).mean()
                accelerator.backward(loss)
                optimizer.step()
    """
    assert (10, "HL012") in found(src)
    rebound = src.replace("dit, optimizer, _, sched = accelerator.prepare(dit, optimizer, deepcopy(train_dataloader)",
                          "dit, optimizer, train_dataloader, sched = accelerator.prepare(dit, optimizer, "
                          "train_dataloader")  # fmt: skip
    assert (10, "HL012") not in found(rebound)


def test_a_counter_unpacked_from_a_helper_named_for_the_model_is_not_a_tensor(tmp_path: Path):
    """HunyuanDiT: `model, ema, start_epoch, start_epoch_step, train_steps = model_resume(...)` (another file; the
    epoch is a number, the step count read from a checkpoint of unknown kind). The call's name says "model", but
    `train_steps % args.log_every` is no tensor test: only names that look like tensors take the call's kind."""
    _project(
        tmp_path,
        {
            "train.py": """
        import torch
        from tools import model_resume

        def main(args, model, ema, loader, optimizer):
            model, ema, start_epoch, start_epoch_step, train_steps = model_resume(args, model, ema)
            for epoch in range(start_epoch, args.epochs):
                for batch in loader:
                    loss = model(batch.cuda(non_blocking=True)).mean()
                    loss.backward()
                    optimizer.step()
                    train_steps += 1
                    if train_steps % args.log_every == 0:
                        print("step", train_steps)
        """,
            "tools.py": """
        import torch

        def model_resume(args, model, ema):
            start_epoch = 0
            train_steps = 0
            if args.resume:
                ckpt = args.loader(args.resume)
                train_steps = ckpt["steps"]
            return model, ema, start_epoch, train_steps % 7, train_steps
        """,
        },
    )
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "train.py")])]
    assert not [h for h in hits if h[1] in ("HL005", "HL002")]


def test_a_module_loader_read_by_a_test_run_once_after_training_needs_no_persistent_workers():
    """AttentionDeepMIL: `test_loader = DataLoader(..., num_workers=1, pin_memory=True)` at module level, read by
    `test()`, which the `__main__` block calls once after the epoch loop (loaders._read_once). The training loader,
    read by `train(epoch)` in that loop, re-forks its workers every epoch."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    train_loader = DataLoader(train_set, batch_size=1, shuffle=True, num_workers=1, pin_memory=True)
    test_loader = DataLoader(test_set, batch_size=1, shuffle=False, num_workers=1, pin_memory=True)

    def train(epoch):
        for data, label in train_loader:
            loss = model(data.cuda(non_blocking=True)).mean()
            loss.backward()
            optimizer.step()

    def test():
        with torch.no_grad():
            for data, label in test_loader:
                model(data.cuda(non_blocking=True))
        return len(test_loader)

    if __name__ == "__main__":
        for epoch in range(10):
            train(epoch)
        test()
    """
    hits = found(src)
    assert (5, "HL011") in hits
    assert (6, "HL011") not in hits
    assert (6, "HL011") in found(
        src.replace("            train(epoch)\n", "            train(epoch)\n            test()\n")
    )


def test_an_evaluation_helper_running_the_network_it_put_in_eval_mode_is_judged(tmp_path: Path):
    """federated-learning: `test_img(net_glob, dataset_test, args)` in models/test.py does `net_g.eval()` and then
    `log_probs = net_g(data)` for every batch, with no `torch.no_grad()`. The network's name (`net_g`) is not one
    the forward-call pattern knows; that it was put in eval mode says it is the network (evals.eval_hits)."""
    _project(
        tmp_path,
        {
            "main_fed.py": """
        import torch
        from models.test import test_img

        net_glob.eval()
        acc_test, loss_test = test_img(net_glob, dataset_test, args)
        """,
            "models/test.py": """
        import torch
        import torch.nn.functional as F
        from torch.utils.data import DataLoader

        def test_img(net_g, datatest, args):
            net_g.eval()
            test_loss = 0
            for data, target in DataLoader(datatest, batch_size=args.bs):
                log_probs = net_g(data.cuda())
                test_loss += F.cross_entropy(log_probs, target.cuda(), reduction="sum")
            return test_loss
        """,
        },
    )
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "main_fed.py")])]
    assert (6, "HL018") in hits


def test_a_test_of_a_callable_the_block_calls_is_no_log_gate():
    """doctr: `if log: log(train_loss=train_loss.item(), lr=last_lr)` every step: `log` is a function handed in,
    and the test asks whether there is one, not whether this step logs. `if log_step:` guarding a `print` still
    gates."""
    src = """
    import torch

    def fit(model, loader, optimizer, log=None, log_step=False):
        for images, targets in loader:
            train_loss = model(images.cuda(non_blocking=True), targets)["loss"]
            train_loss.backward()
            optimizer.step()
            if log:
                log(train_loss=train_loss.item())
            if log_step:
                print(train_loss.item())
    """
    hits = found(src)
    assert (10, "HL001") in hits
    assert (12, "HL001") not in hits


def test_a_format_call_without_fields_and_a_run_stamp_name_one_file():
    """ProteinMPNN: `'model_weights/epoch_last.pt'.format(e + 1, total_step)` has no field, so the counters it is
    given name nothing; doctr: `f"{exp_name}.pt"` with `exp_name = f"{args.arch}_{current_time}"` and
    `current_time` stamped once before the loop. Both rewrite one file (saves._fresh_path)."""
    src = """
    import datetime
    import torch

    def train(args, model, optimizer, loader, base_folder):
        current_time = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        exp_name = f"{args.arch}_{current_time}" if args.name is None else args.name
        for e in range(args.epochs):
            for x in loader:
                loss = model(x.cuda(non_blocking=True)).mean()
                loss.backward()
                optimizer.step()
            last = base_folder + "model_weights/epoch_last.pt".format(e + 1)
            torch.save({"model": model.state_dict()}, last)
            torch.save({"model": model.state_dict()}, base_folder + "epoch{}.pt".format(e + 1))
            torch.save(model.state_dict(), f"{exp_name}.pt")
    """
    hits = [h for h in found(src) if h[1] == "HL021"]
    assert hits == [(14, "HL021"), (16, "HL021")]


def test_an_if_else_that_picks_what_each_step_samples_is_no_boundary():
    """DualStyleGAN: `which = i % args.subspace_freq`, then `if which == 0: exstyle = ...; exstyle =
    exstyle.to(device)` and `else: exstyle, instyle = ...; exstyle = exstyle.to(device)`: every step takes one of
    the two paths, so both copies are per step (gates._bound_in). A log gate beside it still gates."""
    src = """
    import torch

    for i, real_img in enumerate(loader):
        which = i % args.subspace_freq
        real_img = real_img.to(device, non_blocking=True)
        if which == 0:
            exstyle = sample_style()
            exstyle = exstyle.to(device)
        else:
            exstyle, instyle = sample_pair()
            exstyle = exstyle.to(device)
        loss = g(real_img, exstyle).mean()
        loss.backward()
        optimizer.step()
        if i % 100 == 0:
            print(loss.item())
    """
    hits = found(src)
    assert (9, "HL012") in hits and (12, "HL012") in hits
    assert (17, "HL001") not in hits


def test_a_save_helper_some_caller_gives_a_fixed_name_writes_in_place():
    """SAM-Med3D: `save_checkpoint(epoch, sd, describe="latest")` every epoch beside a caller passing
    `describe=f"{epoch}_best"`: `torch.save(..., f"sam_model_{describe}.pth")` is sometimes a fixed file. With every
    caller naming the epoch, each save writes a new file."""
    src = """
    import torch

    class Trainer:
        def save_checkpoint(self, epoch, state_dict, describe="last"):
            torch.save({"epoch": epoch, "model_state_dict": state_dict}, f"sam_model_{describe}.pth")

        def train(self, model, loader, optimizer):
            for epoch in range(100):
                for x in loader:
                    loss = model(x.cuda(non_blocking=True)).mean()
                    loss.backward()
                    optimizer.step()
                    if loss < 0.1:
                        self.save_checkpoint(epoch, model.state_dict(), describe=f"{epoch}_best")
                self.save_checkpoint(epoch, model.state_dict(), describe="latest")
    """
    assert (6, "HL021") in found(src)
    assert (6, "HL021") not in found(src.replace('describe="latest"', 'describe=f"{epoch}_latest"'))


def test_a_logging_callback_is_given_what_its_callers_pass_through_the_parameter():
    """doctr: `fit_one_epoch(..., log=log_at_step)` calls `log(train_loss=train_loss.item())` every step, so
    `log_at_step(train_loss=None)` is handed a Python number, not a tensor, whatever the parameter's name; its
    logging formats no tensor (forks.callback_calls)."""
    src = """
    import torch

    def fit_one_epoch(model, loader, optimizer, log=None):
        for images, targets in loader:
            train_loss = model(images.cuda(non_blocking=True), targets)
            train_loss.backward()
            optimizer.step()
            if log:
                log(train_loss=train_loss.item())

    def main(model, loader, optimizer, epochs):
        def log_at_step(train_loss=None):
            print(f"loss {train_loss}")

        for epoch in range(epochs):
            fit_one_epoch(model, loader, optimizer, log=log_at_step)
    """
    hits = found(src)
    assert (10, "HL001") in hits
    assert not [h for h in hits if h[1] == "HL002"]
    assert (14, "HL002") in found(src.replace("train_loss=train_loss.item()", "train_loss=train_loss.detach()"))


def test_a_loader_kept_on_a_config_object_is_read_for_several_epochs(tmp_path: Path):
    """PointDSC: `config.train_loader = get_dataloader(dataset=train_set, num_workers=config.num_workers)` (the
    builder in datasets/dataloader.py) for a Trainer that reads it off the config every epoch: kept on an object,
    like `self.train_loader`, it is assumed re-iterated, so its workers need `persistent_workers`."""
    _project(
        tmp_path,
        {
            "train.py": """
        from torch import optim
        from datasets.dataloader import get_dataloader
        from trainer import Trainer

        config.train_loader = get_dataloader(dataset=train_set, batch_size=16, num_workers=config.num_workers)
        Trainer(config).train()
        """,
            "datasets/dataloader.py": """
        import torch

        def get_dataloader(dataset, batch_size, shuffle=True, num_workers=4):
            return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                                               num_workers=num_workers)
        """,
        },
    )
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "train.py")])]
    assert (6, "HL011") in hits


def test_an_internal_error_on_one_file_is_reported_and_the_run_goes_on(tmp_path: Path, monkeypatch):
    """A bug in a rule (session 21's first scoring run died on an `IfExp` in a loader's use) must cost the user
    one file's findings, said as HL000, not the whole run and a traceback; HOTLOOP_LINT_RAISE=1 gives the
    traceback to whoever debugs it."""
    import pytest

    import hotloop.lint as lint

    calls = {"n": 0}
    real = lint.check

    def flaky(mi):
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError("boom")
        return real(mi)

    monkeypatch.setattr(lint, "check", flaky)
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(
            "import torch\nfor x in loader:\n    loss = model(x.cuda()).mean()\n"
            "    loss.backward()\n    optimizer.step()\n    print(loss.item())\n"
        )
    found_ = lint_paths([str(tmp_path)])
    first = [f for f in found_ if f.path.endswith("a.py")]
    assert [(f.code, f.severity) for f in first] == [("HL000", "error")] and "boom" in first[0].message
    assert any(f.path.endswith("b.py") and f.code == "HL001" for f in found_)
    calls["n"] = 0
    monkeypatch.setenv("HOTLOOP_LINT_RAISE", "1")
    with pytest.raises(ValueError):
        lint.lint_source("import torch\n", "c.py")


def test_the_terms_a_loss_method_returns_beside_the_loss_are_read_by_data0():
    """VampPrior (PyTorch 0.3): `loss, RE, KL = model.calculate_loss(x)` and then `train_re += -RE.data[0]`,
    `train_kl += KL.data[0]` every step: each term is a one-element tensor, like the loss (indexing.IndexChecks.
    _scalar_tensor). A batch's `.data[0]` is its first row, not a read."""
    src = """
    import torch
    from torch.autograd import Variable

    for batch_idx, (data, target) in enumerate(train_loader):
        x = Variable(data.cuda())
        optimizer.zero_grad()
        loss, RE, KL = model.calculate_loss(x, beta, average=True)
        loss.backward()
        optimizer.step()
        train_loss += loss.data[0]
        train_re += -RE.data[0]
        train_kl += KL.data[0]
        first = x.data[0]
    """
    hits = found(src)
    assert {(11, "HL001"), (12, "HL001"), (13, "HL001")} <= set(hits)
    assert (14, "HL001") not in hits


def test_a_save_helper_given_a_fixed_path_by_a_caller_writes_in_place():
    """DeepPhonemizer: `self._save_model(..., path=self.checkpoint_dir / 'latest_model.pt')` every epoch, beside
    `path=self.checkpoint_dir / f'model_step_{step}k.pt'`: the helper's `torch.save(checkpoint, str(path))` is
    sometimes a fixed file (saves._fixed_file_arg)."""
    src = """
    import torch

    class Trainer:
        def _save_model(self, model, checkpoint, path):
            checkpoint["model"] = model.state_dict()
            torch.save(checkpoint, str(path))

        def train(self, model, loader, optimizer, checkpoint):
            for epoch in range(10):
                for step, x in enumerate(loader):
                    loss = model(x.cuda(non_blocking=True)).mean()
                    loss.backward()
                    optimizer.step()
                    if step % 1000 == 0:
                        self._save_model(model, checkpoint, path=self.checkpoint_dir / f"model_step_{step}k.pt")
                self._save_model(model, checkpoint, path=self.checkpoint_dir / "latest_model.pt")
    """
    assert (7, "HL021") in found(src)
    assert (7, "HL021") not in found(src.replace('"latest_model.pt"', 'f"model_{epoch}.pt"'))


def test_workers_read_off_a_config_module_that_sets_none(tmp_path: Path):
    """OpenAI-CLIP (moein-shariatnia): `import config as CFG` and `DataLoader(..., num_workers=CFG.num_workers)` with
    `num_workers = 0` in config.py: no workers, nothing to pin or keep (loaders._constant_zero). Four there: the
    loader re-forks them every epoch."""
    script = """
        import torch
        import config as CFG

        def main(model, optimizer, dataset):
            loader = torch.utils.data.DataLoader(dataset, batch_size=32, num_workers=CFG.num_workers, shuffle=True)
            for epoch in range(10):
                for batch in loader:
                    loss = model(batch.cuda(non_blocking=True)).mean()
                    loss.backward()
                    optimizer.step()
        """
    _project(tmp_path, {"main.py": script, "config.py": "num_workers = 0\nbatch_size = 32\n"})
    assert not [f for f in lint_paths([str(tmp_path / "main.py")]) if f.code == "HL011"]
    (tmp_path / "config.py").write_text("num_workers = 4\n")
    assert [f.line for f in lint_paths([str(tmp_path / "main.py")]) if f.code == "HL011"] == [6]


def test_a_flag_every_hot_call_leaves_on_is_no_log_gate():
    """omnimotion: `def compute_all_losses(self, batch, write_logs=True)` called every step without the flag runs
    `if write_logs: self.scalars_to_log[...] = loss.item()` every step (gates._off_where_hot with `on`). A caller
    passing `write_logs=False` leaves the block for the others."""
    src = """
    import torch

    class Trainer:
        def compute_all_losses(self, batch, write_logs=True):
            loss = self.model(batch.cuda(non_blocking=True)).mean()
            if write_logs:
                self.scalars_to_log["loss"] = loss.item()
            return loss

        def train_one_step(self, step, batch):
            loss = self.compute_all_losses(batch)
            loss.backward()
            self.optimizer.step()
    """
    assert (8, "HL001") in found(src)
    assert (8, "HL001") not in found(src.replace("self.compute_all_losses(batch)",
                                                 "self.compute_all_losses(batch, write_logs=False)"))  # fmt: skip


METER = """
class AverageMeter:
    def __init__(self, name):
        self.name = name
        self.sum, self.count = 0, 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
"""

STEP = """
import torch
{imports}
{meter}
def train(encoder, loader, optim, epochs):
    loss_meter = AverageMeter("total_loss")
    for epoch in range(epochs):
        for im_x, im_y in loader:
            optim.zero_grad()
            x = encoder(im_x.cuda(non_blocking=True))
            loss = (x - im_y.cuda(non_blocking=True)).pow(2).mean()
            loss_meter.update(loss, x.shape[0])
            loss.backward()
            optim.step()
"""


def test_a_meter_summing_the_loss_it_is_given_keeps_every_graph(tmp_path: Path):
    """align_uniform: `loss_meter.update(loss, x.shape[0])` every step, with util.py's `AverageMeter.update` doing
    `self.sum += val * n`: the sum chains every step's graph until the meter is reset each epoch (HL019,
    totals.meter_totals). Same when the meter class is in the script; not when `update` reads `val.item()`."""
    _project(tmp_path, {"main.py": STEP.format(imports="from util import AverageMeter", meter=""), "util.py": METER})
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "main.py")])]
    assert (12, "HL019") in hits
    assert (len(METER.splitlines()) + 12, "HL019") in found(STEP.format(imports="", meter=METER))
    reads = METER.replace("self.sum += val * n", "self.sum += val.item() * n")
    assert not [h for h in found(STEP.format(imports="", meter=reads)) if h[1] == "HL019"]


def test_a_product_of_two_tests_is_a_mask():
    """ADVENT's `cross_entropy_2d`: `target_mask = (target >= 0) * (target != 255)` then `target[target_mask]`
    every step: multiplying two boolean tensors is their logical and, so this indexes with a mask (HL006). A
    product with a number is no mask."""
    src = """
    import torch

    for images, labels in loader:
        pred = model(images.cuda(non_blocking=True))
        target = labels.cuda(non_blocking=True)
        target_mask = (target >= 0) * (target != 255)
        kept = target[target_mask]
        loss = torch.nn.functional.cross_entropy(pred[target_mask], kept)
        loss.backward()
        optimizer.step()
    """
    assert (8, "HL006") in found(src)
    assert (8, "HL006") not in found(src.replace("(target >= 0) * (target != 255)", "(target >= 0) * 2"))


def test_grad_switched_off_by_a_statement_in_the_epoch_loop_covers_the_validation_after_it():
    """NLSPN: in the epoch loop, after the training pass, `torch.set_grad_enabled(False); net.eval()` then the
    validation loop: gradients are off there (structure.grad_off_at reads the statements above in each enclosing
    block). Switched back on before the loop, they are not."""
    src = """
    import torch

    def main(net, loader_train, loader_val, optimizer, epochs):
        for epoch in range(epochs):
            torch.set_grad_enabled(True)
            net.train()
            for sample in loader_train:
                loss = net(sample.cuda(non_blocking=True)).mean()
                loss.backward()
                optimizer.step()
            torch.set_grad_enabled(False)
            net.eval()
            for sample in loader_val:
                out = net(sample.cuda(non_blocking=True))
    """
    assert not [h for h in found(src) if h[1] == "HL018"]
    back_on = src.replace(
        "            net.eval()\n", "            net.eval()\n            torch.set_grad_enabled(True)\n"
    )
    assert [h for h in found(back_on) if h[1] == "HL018"]


def test_a_gate_on_a_flag_kept_on_an_object_that_defaults_to_one_opens_every_step():
    """consistent_depth: `parser.add_argument('--print_freq', type=int, default=1)` and, in the trainer,
    `if writer is not None and total_iters % self.params.print_freq == 0: writer.add_scalar(name, loss, n)`: the
    flag is read off the object that holds the parsed options, and with its default the gate opens every step."""
    src = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--print_freq", type=int, default=1)

    class Trainer:
        def train(self, loader, writer):
            total_iters = 0
            for batch in loader:
                loss = self.model(batch.cuda(non_blocking=True)).mean()
                loss.backward()
                self.optimizer.step()
                total_iters += 1
                if writer is not None and total_iters % self.params.print_freq == 0:
                    writer.add_scalar("Train/loss", loss, total_iters)
    """
    assert (17, "HL002") in found(src)
    assert (17, "HL002") not in found(src.replace("default=1)", "default=100)"))


def test_a_logging_flag_every_step_passes_on_opens_its_block_every_step():
    """structurenet: `forward(..., log_tb=not conf.no_tb_log, tb_writer=writer)` every step, and in `forward`
    (`log_tb=False` by default) `if log_tb and tb_writer is not None: tb_writer.add_scalar('loss', loss.item(),
    step)`: `--no_tb_log` is a switch that is off unless given, so the block runs every step (gates._truth)."""
    src = """
    import torch

    def forward(batch, model, step, log_tb=False, tb_writer=None):
        loss = model(batch.cuda(non_blocking=True)).mean()
        if log_tb and tb_writer is not None:
            tb_writer.add_scalar("loss", loss.item(), step)
        return loss

    def train(conf, model, loader, optimizer, writer):
        for step, batch in enumerate(loader):
            loss = forward(batch, model, step, log_tb=not conf.no_tb_log, tb_writer=writer)
            loss.backward()
            optimizer.step()
    """
    assert (7, "HL001") in found(src)
    assert (7, "HL001") not in found(src.replace("log_tb=not conf.no_tb_log", "log_tb=conf.tb_log"))


def test_save_gates_chained_by_elif_stay_gates():
    """OLMo: `if step % save_interval == 0: path = self.save_checkpoint(...)` `elif step % ephemeral == 0: path =
    self.save_checkpoint(...)`: both bind `path`, but an `elif` is another boundary, not the other half of an
    alternation (gates._bound_in applies to a plain `else`), so the save's cache flush is no per-step HL020."""
    src = """
    import torch

    class Trainer:
        def save_checkpoint(self, kind):
            torch.save(self.model.state_dict(), f"ckpt_{self.global_step}_{kind}.pt")
            torch.cuda.empty_cache()
            return kind

        def fit(self, loader):
            for batch in loader:
                loss = self.model(batch.cuda(non_blocking=True)).mean()
                loss.backward()
                self.optimizer.step()
                self.global_step += 1
                if self.global_step % self.save_interval == 0:
                    path = self.save_checkpoint("sharded")
                elif self.global_step % self.ephemeral_interval == 0:
                    path = self.save_checkpoint("ephemeral")
    """
    assert not [h for h in found(src) if h[1] == "HL020"]


def test_a_gate_written_with_np_mod_is_a_log_gate():
    """stylized-neural-painting: `if np.mod(self.batch_id, 100) == 1: print(self.G_loss.item())`: `%` by another
    name, a log boundary. Without it the read is per step."""
    src = """
    import numpy as np
    import torch

    for batch_id, batch in enumerate(loader):
        loss = model(batch.cuda(non_blocking=True)).mean()
        loss.backward()
        optimizer.step()
        if np.mod(batch_id, 100) == 1:
            print(loss.item())
    """
    assert (10, "HL001") not in found(src)
    assert (10, "HL001") in found(src.replace("if np.mod(batch_id, 100) == 1:", "if True:"))


def test_a_meter_that_reads_what_it_is_handed_is_one_read_not_also_a_format(tmp_path: Path):
    """anycost-gan: `g_loss_meter.update(g_loss)` every step, with utils/torch_utils.py's `update` doing
    `val.detach().cpu()`: the meter's read is the finding (HL007 at the call, from the helper), not also HL002
    for handing a tensor to something named like a meter (LABELING: one read)."""
    step = """
        import torch
        from utils.torch_utils import DistributedMeter

        def train(model, loader, optimizer):
            g_loss_meter = DistributedMeter("g_loss")
            for x in loader:
                g_loss = model(x.cuda(non_blocking=True)).mean()
                g_loss.backward()
                optimizer.step()
                g_loss_meter.update(g_loss)
        """
    meter = """
        class DistributedMeter:
            def __init__(self, name):
                self.name, self.sum, self.n = name, 0.0, 0

            def update(self, val):
                self.sum += val.detach().cpu()
                self.n += 1
        """
    _project(tmp_path, {"train.py": step, "utils/torch_utils.py": meter, "utils/__init__.py": ""})
    hits = [(f.line, f.code) for f in lint_paths([str(tmp_path / "train.py")])]
    assert (11, "HL007") in hits and (11, "HL002") not in hits


def test_a_scheduler_stepped_with_a_metric_is_not_the_per_batch_one():
    """flair: `lr_scheduler = OneCycleLR(...)` under one option, else a plateau scheduler the trainer is handed;
    once per epoch `if isinstance(lr_scheduler, AnnealOnPlateau): lr_scheduler.step(dev_score)`. A step given a
    metric is the plateau scheduler's (OneCycleLR's takes none); an argument-less step once per epoch is still the
    per-batch schedule stepped too rarely (HL014)."""
    src = """
    import torch
    from torch.optim.lr_scheduler import OneCycleLR

    def train(model, loader, optimizer, epochs, scheduler, one_cycle):
        if one_cycle:
            lr_scheduler = OneCycleLR(optimizer, max_lr=0.1, total_steps=epochs * len(loader))
        else:
            lr_scheduler = scheduler(optimizer)
        for epoch in range(epochs):
            for x in loader:
                loss = model(x.cuda(non_blocking=True)).mean()
                loss.backward()
                optimizer.step()
            dev_score = evaluate(model)
            lr_scheduler.step(dev_score)
    """
    assert (16, "HL014") not in found(src)
    assert (16, "HL014") in found(src.replace("lr_scheduler.step(dev_score)", "lr_scheduler.step()"))


def test_every_rule_message_names_what_it_points_at():
    """Issue 17: every message names the offending expression. For each positive case of the rule table (one per
    rule at least), every finding of that rule quotes source in backticks; session 21 added it to HL006, HL009,
    HL010, HL014, HL019's append, HL022, HL023, HL025 and the f-string HL002, which said only what was wrong."""
    import re

    from tests.unit.test_lint_rules import CASES

    seen = set()
    for code, source, expected in CASES:
        if not expected:
            continue
        for f in lint_source(source):
            if f.code == code:
                seen.add(code)
                assert re.search(r"`[^`]+`", f.message), (code, f.message)
    assert {"HL006", "HL014", "HL019", "HL022", "HL023", "HL025"} <= seen
