"""Patterns found while scoring held-out batches CJ and CK (session 18), in our own words. Each test that asks for a
finding fails without the change it names; the ones that ask for silence guard those changes against the false
alarms they raised on the way (scored on the whole labelled set)."""

from __future__ import annotations

import textwrap

from hotloop.lint import lint_paths, lint_source


def found(src: str, path: str = "<string>") -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src), path)]


def test_a_loss_term_built_from_squared_parameters_is_a_tensor():
    """`regularizer = 1. / 2 * (users ** 2).sum()` in a loss helper, then `emb_loss = self.decay * regularizer`
    (LATTICE's `bpr_loss`): `users ** 2` is no Python number for its `2` while `users` is an untyped parameter,
    so the term returned beside the main loss is a tensor and `float(batch_emb_loss)` reads the device every step.
    A name assigned from something unknown is no sign of a number either (kinds._unknown_before)."""
    src = """
    import torch

    class Trainer:
        def train(self):
            device = torch.device("cuda")
            for epoch in range(10):
                total, emb_total = 0.0, 0.0
                for idx in range(100):
                    self.optimizer.zero_grad()
                    users, items = sampler.sample()
                    users, items = users.cuda(non_blocking=True), items.cuda(non_blocking=True)
                    u_emb, i_emb = self.model(self.adj)
                    mf_loss, emb_loss, reg_loss = self.bpr_loss(u_emb[users], i_emb[items])
                    loss = mf_loss + emb_loss + reg_loss
                    loss.backward()
                    self.optimizer.step()
                    total += float(loss)
                    emb_total += float(emb_loss)

        def bpr_loss(self, users, items):
            scores = torch.sum(torch.mul(users, items), dim=1)
            regularizer = 1.0 / 2 * (users ** 2).sum() + 1.0 / 2 * (items ** 2).sum()
            regularizer = regularizer / self.batch_size
            mf_loss = -torch.mean(torch.nn.functional.logsigmoid(scores))
            emb_loss = self.decay * regularizer
            reg_loss = 0.0
            return mf_loss, emb_loss, reg_loss
    """
    hits = found(src)
    assert (18, "HL001") in hits and (19, "HL001") in hits


def test_a_callers_number_and_a_numeric_default_keep_arithmetic_a_number():
    """The negative side of the change above: `delta = self.lowest_loss - eval_loss` where every caller passes
    `loss.item()` (Accelerate's early-stopping example), and `avg = beta * avg + (1 - beta) * loss.item()` with
    `beta=0.98` a parameter default (InsightFace's `find_lr`), stay Python numbers: no HL005, no HL002."""
    src = """
    import torch

    class EarlyStopping:
        def __init__(self, min_delta=0):
            self.min_delta = min_delta
            self.lowest_loss = float("inf")

        def check(self, eval_loss):
            delta = self.lowest_loss - eval_loss
            if delta >= self.min_delta:
                self.lowest_loss = eval_loss
                return False
            return True

    def find_lr(model, loader, opt, writer, beta=0.98):
        avg_loss = 0.0
        stopper = EarlyStopping()
        for i, (x, y) in enumerate(loader):
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            opt.zero_grad()
            loss = model(x, y)
            loss.backward()
            opt.step()
            avg_loss = beta * avg_loss + (1 - beta) * loss.item()
            writer.add_scalar("avg_loss", avg_loss, i)
            if stopper.check(loss.item()):
                break
    """
    assert not [h for h in found(src) if h[1] in ("HL002", "HL005")]


def test_a_training_step_reused_under_no_grad_is_not_a_training_step():
    """pydreamer's `evaluate()` calls `model.training_step(...)` inside `with torch.no_grad():` to score test
    batches; it is called every `eval_interval` steps, so its loop is not the hot loop and its `.item()` reads are
    per evaluation batch, not per training step. The real training loop's per-step read is still reported."""
    src = """
    import torch

    def run(model, data_iter, opt, conf):
        steps = 0
        while True:
            steps += 1
            obs = next(data_iter).cuda(non_blocking=True)
            loss = model.training_step(obs)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(loss.item())
            if steps % conf.eval_interval == 0:
                evaluate(model, data_iter, conf.eval_batches)

    def evaluate(model, it, batches):
        for i in range(batches):
            with torch.no_grad():
                obs = next(it).cuda(non_blocking=True)
                loss = model.training_step(obs)
                print(loss.item())
    """
    hits = found(src)
    assert (13, "HL001") in hits
    assert (22, "HL001") not in hits


def test_a_comprehension_over_an_option_list_binds_numbers():
    """`sum(x * y if x > 0 else 0 for x, y in zip(args.alpha, pixel_loss))` (DAIN): `x` comes from the
    options, so `x > 0` is a Python comparison whatever the name `x` suggests (forks.option_element)."""
    src = """
    import torch

    def train(model, loader, opt, args):
        for x0, y in loader:
            x0, y = x0.cuda(non_blocking=True), y.cuda(non_blocking=True)
            pixel_loss = model(x0, y)
            total = sum(x * y if x > 0 else 0 for x, y in zip(args.alpha, pixel_loss))
            opt.zero_grad()
            total.backward()
            opt.step()
    """
    assert not [h for h in found(src) if h[1] == "HL005"]


def test_an_index_tensor_made_from_numpy_on_the_host_indexes_a_device_tensor():
    """learn2learn's `fast_adapt`: `idx = np.zeros(n, dtype=bool)` ... `idx = torch.from_numpy(idx)` then `data[idx]`
    with `data` on the GPU, in a helper called for every task: the host index is copied to the device each time
    (HL024). The assignment that reaches the read decides, not the NumPy one above it."""
    src = """
    import numpy as np
    import torch

    def fast_adapt(model, batch, device, shots):
        data, labels = batch
        data, labels = data.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        support = np.zeros(data.size(0), dtype=bool)
        support[np.arange(shots) * 2] = True
        query = torch.from_numpy(~support)
        support = torch.from_numpy(support)
        return model(data[support], labels[query])

    def train(model, loader, opt, device):
        for batch in loader:
            loss = fast_adapt(model, batch, device, 5)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """
    assert (12, "HL024") in found(src)


def test_an_explicit_forward_call_of_any_network_is_a_tensor():
    """`self.q_eval.forward(states)[indices, actions]` with `indices = np.arange(batch)` (a DQN): whatever the
    network is called, `.forward(...)` returns its output, so the NumPy index is copied to the device (HL024)."""
    src = """
    import numpy as np
    import torch

    class Agent:
        def learn(self):
            self.q_eval.optimizer.zero_grad()
            states, actions = self.sample_memory()
            states = states.to(self.q_eval.device, non_blocking=True)
            indices = np.arange(self.batch_size)
            q_pred = self.q_eval.forward(states)[indices, actions]
            loss = self.q_eval.loss(q_pred, self.target)
            loss.backward()
            self.q_eval.optimizer.step()

    def main(agent, env):
        device = torch.device("cuda")
        for i in range(1000):
            agent.learn()
    """
    assert (11, "HL024") in found(src)


PROTONET = """
import torch

def fast_adapt(model, batch, ways, device):
    data, labels = batch
    data, labels = data.to(device, non_blocking=True), labels.to(device, non_blocking=True)
    logits = model(data)
    return torch.nn.functional.cross_entropy(logits, labels)

def main(model, train_loader, valid_loader, opt, device):
    for epoch in range(10):
        model.train()
        for batch in train_loader:
            loss = fast_adapt(model, batch, 5, device)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        for i, batch in enumerate(valid_loader):
            loss = fast_adapt(model, batch, 5, device)
"""


def test_an_evaluation_loop_handing_the_model_to_a_helper_runs_it_without_no_grad():
    """learn2learn's prototypical-network example validates with `fast_adapt(model, batch, ...)`: the helper runs
    the model, and no `torch.no_grad()` is around it, so every validation forward keeps its graph (HL018, at the
    call). A MAML helper that adapts with gradients (`learner.adapt(loss)`) needs them: not reported."""
    hits = found(PROTONET)
    assert (20, "HL018") in hits
    adapting = "    model.adapt(logits.sum())\n    return torch.nn.functional"
    maml = PROTONET.replace("    return torch.nn.functional", adapting)
    assert not [h for h in found(maml) if h[1] == "HL018"]


def test_a_validation_loop_under_no_grad_that_never_leaves_training_mode():
    """DAIN: `model = model.train()` above the epochs, then a validation loop under `torch.no_grad()` with no
    `model.eval()` anywhere in the function: dropout and batch norm run in training mode on validation batches
    (HL018, at the forward). With `model.eval()` before the loop it is not reported."""
    src = """
    import torch

    def train(model, train_loader, val_loader, opt):
        model = model.train()
        for epoch in range(10):
            for x, y in train_loader:
                x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                loss = model(x, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            for i, (x, y) in enumerate(val_loader):
                with torch.no_grad():
                    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                    val_loss = model(x, y)
    """
    assert (16, "HL018") in found(src)
    fixed = src.replace("            for i, (x, y) in enumerate(val_loader):",
                        "            model.eval()\n            for i, (x, y) in enumerate(val_loader):")  # fmt: skip
    assert not [h for h in found(fixed) if h[1] == "HL018"]
    # maskrcnn-benchmark switches to training mode right before its validation on purpose (its detectors return
    # losses only there): a `model.train()` just above the loop (or its `with torch.no_grad():`) is deliberate
    loop = "            for i, (x, y) in enumerate(val_loader):"
    deliberate = src.replace(loop, "            model.train()\n" + loop)
    assert not [h for h in found(deliberate) if h[1] == "HL018"]


def test_a_stft_window_made_on_the_host_in_a_helper_module_is_a_blocking_copy(tmp_path):
    """`torch.hann_window(win).to(y.device)` in another file's STFT helper called every step (MP-SENet's
    `dataset.mag_pha_stft`): the window is made on the host and copied every call, reported at the call (HL012);
    `torch.hann_window(win, device=y.device)` is the fix. (Window functions joined the host factories.)"""
    helper = tmp_path / "audio.py"
    helper.write_text("import torch\n\ndef stft(y, n_fft, win):\n    window = torch.hann_window(win).to(y.device)\n"
                      "    return torch.stft(y, n_fft, window=window, return_complex=True)\n")  # fmt: skip
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
    import torch
    from audio import stft

    def train(model, loader, opt):
        for x in loader:
            x = x.cuda(non_blocking=True)
            loss = model(stft(x, 400, 400).abs()).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    """)
    )
    assert (8, "HL012") in [(f.line, f.code) for f in lint_source(script.read_text(), str(script))]
    helper.write_text(helper.read_text().replace("hann_window(win).to(y.device)", "hann_window(win, device=y.device)"))
    assert not [f for f in lint_source(script.read_text(), str(script)) if f.code == "HL012"]


def test_a_count_copied_to_the_host_is_read_without_a_sync():
    """`correct = correct.cpu().sum()` then `acc = 100.0 * correct / n; meter.update(acc.item())`
    (relational-reasoning): the copy is the sync (HL007); the `.item()` of the host tensor after it is not
    another one. The assignment that reaches the read decides (provenance), unless another one lies between."""
    src = """
    import torch

    def train(model, loader, opt, meter):
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            out = model(x)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct = torch.round(torch.sigmoid(out)).eq(y)
            correct = correct.cpu().sum()
            accuracy = 100.0 * correct / float(len(y))
            meter.update(accuracy.item(), len(y))
    """
    hits = found(src)
    assert (13, "HL007") in hits and (15, "HL001") not in hits


def test_what_a_checkpoint_loader_reads_from_json_is_python_data():
    """nanochat: `_, _, meta = load_checkpoint(...)` whose third value is `json.load(f)`, then
    `smooth = meta["loop_state"]["smooth_train_loss"]` when resuming (else `0`), `smooth = beta * smooth +
    (1 - beta) * loss.item()` and an f-string of the debiased value every step: all Python numbers (no HL002).
    (`json.load` joined the functions that return Python data; a `load_checkpoint` that returns the model, as
    DirectVoxGO's does, stays a model.)"""
    src = """
    import json
    import torch

    def load_checkpoint(path, step):
        model_data = torch.load(f"{path}/model_{step}.pt")
        optim_data = torch.load(f"{path}/optim_{step}.pt")
        with open(f"{path}/meta_{step}.json") as f:
            meta_data = json.load(f)
        return model_data, optim_data, meta_data

    def main(model, loader, opt, resuming, beta=0.9):
        if resuming:
            _, _, meta = load_checkpoint("ckpt", 100)
            smooth_train_loss = meta["loop_state"]["smooth_train_loss"]
        else:
            smooth_train_loss = 0
        for step, (x, y) in enumerate(loader):
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = model(x, y)
            loss.backward()
            opt.step()
            train_loss_f = loss.item()
            smooth_train_loss = beta * smooth_train_loss + (1 - beta) * train_loss_f
            debiased_smooth_loss = smooth_train_loss / (1 - beta ** (step + 1))
            print(f"step {step} | loss: {debiased_smooth_loss:.6f}")
    """
    hits = found(src)
    assert (23, "HL001") in hits and not [h for h in hits if h[1] == "HL002"]


def test_loader_options_handed_to_a_builder_through_kwargs_are_read(tmp_path):
    """DeepLab's `kwargs = {'num_workers': args.workers, 'pin_memory': True}` then
    `make_data_loader(args, **kwargs)`, whose `DataLoader(train_set, ..., **kwargs)` forwards them: the loader has
    workers, is pinned, and is re-iterated every epoch without `persistent_workers` (HL011 at the call). With
    `num_workers` 0 in the dict there is nothing to report."""
    (tmp_path / "dataloaders").mkdir()
    (tmp_path / "dataloaders" / "__init__.py").write_text(
        "from torch.utils.data import DataLoader\n\n"
        "def make_data_loader(args, **kwargs):\n"
        "    train_loader = DataLoader(args.train_set, batch_size=args.batch_size, shuffle=True, **kwargs)\n"
        "    return train_loader, args.nclass\n")  # fmt: skip
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
    import torch
    from dataloaders import make_data_loader

    def main(model, args, opt):
        kwargs = {'num_workers': args.workers, 'pin_memory': True}
        train_loader, nclass = make_data_loader(args, **kwargs)
        for epoch in range(args.epochs):
            for x, y in train_loader:
                loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
                opt.zero_grad()
                loss.backward()
                opt.step()
    """)
    )
    hits = {(f.line, f.code): f.message for f in lint_source(script.read_text(), str(script))}
    assert "persistent_workers" in hits[(7, "HL011")] and "pin_memory" not in hits[(7, "HL011")]
    script.write_text(script.read_text().replace("'num_workers': args.workers", "'num_workers': 0"))
    assert not [f for f in lint_source(script.read_text(), str(script)) if f.code == "HL011"]


def test_a_tensor_saved_to_a_fixed_checkpoint_file_is_training_state():
    """SinGAN saves its fixed reconstruction noise with `torch.save(z_opt, '%s/z_opt.pth' % opt.outf)` every 500
    iterations: the name says nothing, but a `.pth` file is what a run reloads, and a crash mid-write tears it
    (HL021). A NumPy dump of the same tensor is not reported."""
    src = """
    import torch

    def train_single_scale(netD, netG, opt, z_opt):
        for epoch in range(opt.niter):
            loss = netD(netG(z_opt))
            opt.optimizer.zero_grad()
            loss.backward()
            opt.optimizer.step()
            if epoch % 500 == 0:
                torch.save(z_opt, '%s/z_opt.pth' % (opt.outf))
    """
    assert (11, "HL021") in found(src)
    assert not [h for h in found(src.replace("z_opt.pth", "z_opt.npy")) if h[1] == "HL021"]


def test_a_plateau_scheduler_stepped_with_the_loss_every_step_reads_it():
    """PyTorch's `ReduceLROnPlateau.step(metrics)` takes `float(metrics)`: stepped with the training loss every
    update (BBDM), it reads the device loss each time (HL001). Stepped once per epoch with a validation number it
    is not reported."""
    src = """
    import torch

    def train(model, loader, val, opt, epochs):
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5)
        for epoch in range(epochs):
            for x, y in loader:
                loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
                opt.zero_grad()
                loss.backward()
                opt.step()
                scheduler.step(loss)
            scheduler.step(evaluate(model, val))
    """
    hits = found(src)
    assert (12, "HL001") in hits and (13, "HL001") not in hits


def test_a_loss_summed_from_terms_each_divided_in_place_is_divided():
    """FCGF: `pos_loss /= iter_size; neg_loss /= iter_size; loss = pos_loss + w * neg_loss; loss.backward()` with
    the optimizer stepped every `iter_size` batches: every term is divided, so the sum is (no HL016). Without
    `pos_loss /= iter_size` that term is accumulated at full weight."""
    src = """
    import torch

    def train(model, loader, opt, iter_size, neg_weight):
        for i, (x, y) in enumerate(loader):
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            pos_loss, neg_loss = model(x, y)
            pos_loss /= iter_size
            neg_loss /= iter_size
            loss = pos_loss + neg_weight * neg_loss
            loss.backward()
            if (i + 1) % iter_size == 0:
                opt.step()
                opt.zero_grad()
    """
    assert not [h for h in found(src) if h[1] == "HL016"]
    assert [h for h in found(src.replace("            pos_loss /= iter_size\n", "")) if h[1] == "HL016"]


def test_a_worker_count_set_to_zero_in_the_function_building_the_loader():
    """ChatLM: `num_workers = 0` in `train()` before its loaders, while `test()` sets `num_workers = 4` for its
    own: the assignment in the building function decides, so the training loaders have no workers (no HL011)."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    class Trainer:
        def train(self, ds, model, opt, epochs):
            num_workers = 0
            loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=num_workers)
            for epoch in range(epochs):
                for x in loader:
                    model(x.cuda(non_blocking=True)).backward()
                    opt.step()

        def test(self, ds):
            num_workers = 4
            return DataLoader(ds, batch_size=8, num_workers=num_workers, pin_memory=True)
    """
    assert (8, "HL011") not in found(src)


def test_an_override_called_from_a_grandparents_loop_in_another_file_is_hot(tmp_path):
    """BBDM: `BaseRunner.train()` (runners/BaseRunner.py) calls `self.loss_fn(...)` every step;
    `BBDMRunner(DiffusionBaseRunner)` overrides `loss_fn` two classes down, in another file, and copies the batch
    there with blocking `.to()` calls. Linted together, the override is hot in its own file (HL012 where it is
    written), through the intermediate class."""
    (tmp_path / "runners").mkdir()
    (tmp_path / "runners" / "__init__.py").write_text("")
    (tmp_path / "runners" / "base.py").write_text(
        textwrap.dedent("""
    import torch

    class BaseRunner:
        def train(self, loader, opt):
            for epoch in range(self.epochs):
                for batch in loader:
                    loss = self.loss_fn(self.net, batch)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()

        def loss_fn(self, net, batch):
            raise NotImplementedError
    """)
    )
    (tmp_path / "runners" / "diffusion.py").write_text(
        "from runners.base import BaseRunner\n\n\nclass DiffusionBaseRunner(BaseRunner):\n"
        "    def sample(self, n):\n        return self.net.sample(n)\n"
    )  # fmt: skip
    leaf = tmp_path / "runners" / "bbdm.py"
    leaf.write_text(
        textwrap.dedent("""
    import torch
    from runners.diffusion import DiffusionBaseRunner

    class BBDMRunner(DiffusionBaseRunner):
        def loss_fn(self, net, batch):
            x, cond = batch
            x = x.to(self.device)
            cond = cond.to(self.device)
            return net(x, cond)
    """)
    )
    found = lint_paths([str(tmp_path / "runners" / "base.py"), str(leaf)])
    assert {(f.line, f.code) for f in found if f.path.endswith("bbdm.py")} >= {(8, "HL012"), (9, "HL012")}


def test_a_fixed_resume_file_beside_a_numbered_copy_is_still_written_in_place():
    """DDIM: `torch.save(states, f"ckpt_{step}.pth")` then `torch.save(states, "ckpt.pth")`, the file `--resume`
    loads: the numbered copy survives a crash, but the run resumes from the torn `ckpt.pth` (HL021 on the second
    save, not the first). Labelled so by every batch that met it (DDIM, NCSN, BBDM, IDR, SinGAN); lint used to
    excuse the alias."""
    src = """
    import os
    import torch

    def train(model, loader, opt, log_path, snapshot_freq):
        step = 0
        for epoch in range(100):
            for x in loader:
                step += 1
                loss = model(x.cuda(non_blocking=True))
                opt.zero_grad()
                loss.backward()
                opt.step()
                if step % snapshot_freq == 0:
                    states = [model.state_dict(), opt.state_dict()]
                    torch.save(states, os.path.join(log_path, "ckpt_{}.pth".format(step)))
                    torch.save(states, os.path.join(log_path, "ckpt.pth"))
    """
    hits = found(src)
    assert (17, "HL021") in hits and (16, "HL021") not in hits


def test_a_device_chosen_as_cuda_colon_format_in_another_module_puts_the_project_on_the_gpu(tmp_path):
    """DICE's trainer never names CUDA: `utils.get_device` returns `torch.device('cuda:{}'.format(gpu_id))` and the
    recommender moves the batches. The project runs on the GPU, so the trainer's `running_loss += loss.item()`
    after each step is a per-step read (HL001); a project that names no GPU anywhere stays CPU code."""
    (tmp_path / "README.md").write_text("DICE\n")
    (tmp_path / "utils.py").write_text(
        "import torch\n\n\ndef get_device(gpu_id):\n    return torch.device('cuda:{}'.format(gpu_id))\n"
    )
    script = tmp_path / "trainer.py"
    script.write_text(
        textwrap.dedent("""
    import torch

    class Trainer:
        def train_one_epoch(self, dataloader, optimizer):
            running_loss = 0.0
            for batch_count, sample in enumerate(dataloader):
                optimizer.zero_grad()
                loss = self.recommender.get_loss(sample)
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
            return running_loss
    """)
    )
    assert (12, "HL001") in {(f.line, f.code) for f in lint_source(script.read_text(), str(script))}
    (tmp_path / "utils.py").write_text("import torch\n\n\ndef get_device(gpu_id):\n    return torch.device('cpu')\n")
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "README.md").write_text("a CPU project\n")
    (other / "trainer.py").write_text(script.read_text())
    assert (12, "HL001") not in {(f.line, f.code) for f in lint_source(script.read_text(), str(other / "trainer.py"))}


def test_gradients_turned_off_by_set_grad_enabled_above_an_evaluation_loop():
    """TAPE's `run_valid_epoch`: `torch.set_grad_enabled(False); runner.eval()` above the loop over the validation
    loader: gradients are off for the loop (no HL018). Without the call the loop keeps its graphs."""
    src = """
    import torch

    def run_valid_epoch(valid_loader, model):
        torch.set_grad_enabled(False)
        model.eval()
        total = 0.0
        for batch in valid_loader:
            loss = model(batch.cuda(non_blocking=True))
            total += loss
        return total
    """
    assert not [h for h in found(src) if h[1] == "HL018"]
    assert [h for h in found(src.replace("        torch.set_grad_enabled(False)\n", "")) if h[1] == "HL018"]


def test_a_stream_synchronize_every_step_is_a_barrier():
    """nvdiffrec times each iteration with `torch.cuda.current_stream().synchronize()`: the host waits for the GPU
    every step, like `torch.cuda.synchronize()` (HL020)."""
    src = """
    import time
    import torch

    def train(model, loader, opt):
        durations = []
        for x in loader:
            start = time.time()
            loss = model(x.cuda(non_blocking=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
            torch.cuda.current_stream().synchronize()
            durations.append(time.time() - start)
    """
    assert (13, "HL020") in found(src)


def test_a_files_own_class_named_dataloader_is_not_pytorchs():
    """conv-tasnet (funcwj) defines `class DataLoader(object)`, a chunk-level wrapper that builds a torch loader
    inside: `DataLoader(dataset, train=..., num_workers=...)` constructs the wrapper, whose options are not
    PyTorch's (no HL011 there; the torch loader inside is judged where it is built)."""
    src = """
    import torch.utils.data as dat

    def make_dataloader(dataset, num_workers=4):
        return DataLoader(dataset, train=True, num_workers=num_workers)

    class DataLoader(object):
        def __init__(self, dataset, num_workers=4, train=True):
            self.eg_loader = dat.DataLoader(dataset, batch_size=8, num_workers=num_workers, shuffle=train)
    """
    assert (5, "HL011") not in found(src)
