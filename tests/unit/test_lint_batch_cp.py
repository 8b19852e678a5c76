"""Patterns found while scoring held-out batches CP and CQ and the whole labelled set (session 19), in our own
words. Each test that asks for a finding fails without the change it names; the one that asks for silence guards
that change against the false alarm it raised on the way."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_paths, lint_source


def found(src: str, path: str = "<string>") -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src), path)]


def test_a_comprehension_target_is_not_the_functions_name_of_the_same_spelling():
    """`batch = tuple(t.to(device) for t in batch)` in the step, and `t = list(pred[0].cpu().numpy())` in the
    evaluation further down (CodeBERT's code2nl): the `t` of the generator is an element of the batch, not the
    function's list, so its blocking copy is HL012 (forks.inner_kind)."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    def main(data, model, optimizer, device, tokenizer):
        loader = DataLoader(data, batch_size=8)
        model.to(device)
        for step, batch in enumerate(loader):
            batch = tuple(t.to(device) for t in batch)
            loss = model(*batch)
            loss.backward()
            optimizer.step()
        for pred in model.generate():
            t = pred[0].cpu().numpy()
            t = list(t)
            print(tokenizer.decode(t))
    """
    assert (9, "HL012") in found(src)


def test_a_comprehension_over_a_batch_not_yet_moved_reads_the_host():
    """The negative side: `"\\t".join(str(int(i)) for i in batch["index"])` before `batch = move_to_device(batch)`
    (OLMo's `train_step`) reads a host tensor, no device sync: no HL001 (provenance follows the comprehension's
    iterable as it follows a loop's)."""
    src = """
    import torch

    class Trainer:
        def train_step(self, batch):
            if self.indices_file is not None:
                indices = "\\t".join(str(int(i)) for i in batch["index"])
                self.indices_file.write(indices)
            batch = move_to_device(batch, self.device)
            loss = self.model(**batch)
            loss.backward()
            self.optimizer.step()
            return loss

        def fit(self, loader):
            self.device = torch.device("cuda")
            for batch in loader:
                self.train_step(batch)
    """
    assert not any(code == "HL001" for _, code in found(src))


def test_a_module_imported_from_the_project_that_moves_to_the_gpu_makes_the_loop_device_code(tmp_path: Path):
    """spotlight's `factorization/implicit.py` never says `cuda`; the `torch_utils.gpu` it imports does. Copied out
    without the README or setup.py that mark the project's root, the project scan sees only the file's own folder;
    the imported module still tells that the loop runs on the GPU, so `epoch_loss += loss.item()` is HL001
    (callers.imports_on_device)."""
    pkg = tmp_path / "spot"
    (pkg / "factorization").mkdir(parents=True)
    (pkg / "torch_utils.py").write_text("def gpu(tensor, gpu=False):\n    return tensor.cuda() if gpu else tensor\n")
    trainer = pkg / "factorization" / "implicit.py"
    trainer.write_text(
        textwrap.dedent("""
        import torch
        from spot.torch_utils import gpu

        class Model:
            def fit(self, users, items, epochs):
                for epoch in range(epochs):
                    epoch_loss = 0.0
                    for u, i in zip(users, items):
                        self.optimizer.zero_grad()
                        loss = self.loss(self.net(u, i))
                        epoch_loss += loss.item()
                        loss.backward()
                        self.optimizer.step()
        """)
    )
    hits = [(f.line, f.code) for f in lint_paths([str(trainer)])]
    assert (12, "HL001") in hits


def test_a_mask_thresholded_from_a_batch_field_named_mask_is_a_boolean_mask():
    """`mask = rollout_data.mask > 1e-8` then `advantages[mask].mean()` in every minibatch (sb3-contrib's
    recurrent PPO): a comparison of a field named `mask` with a number is a boolean tensor, though the rollout's
    kind is unknown, so indexing with it is HL006 (indexing._mask_value)."""
    src = """
    import torch as th

    def train(self):
        for epoch in range(self.n_epochs):
            for rollout_data in self.rollout_buffer.get(self.batch_size):
                mask = rollout_data.mask > 1e-8
                advantages = rollout_data.advantages
                advantages = (advantages - advantages[mask].mean()) / (advantages[mask].std() + 1e-8)
                loss = -th.mean(advantages[mask])
                self.policy.optimizer.zero_grad()
                loss.backward()
                self.policy.optimizer.step()
    """
    hits = found(src, "ppo.py")
    assert (9, "HL006") in hits and (10, "HL006") in hits


def test_a_loss_named_after_the_model_is_a_value_not_a_module():
    """`sum_model_loss += model_loss.cpu().item()` among `loss.cpu().item()` and `reg_loss.cpu().item()` (MMGCN):
    `model_loss` is named for the model but ends in `loss`, a value, so its `.cpu()` is HL007 like its neighbours'
    (checks.VALUE_NAME); `model.cpu()` still moves a module and is not."""
    src = """
    import torch

    def train(dataloader, model, optimizer):
        model.cuda()
        total = 0.0
        for user, item in dataloader:
            optimizer.zero_grad()
            loss, model_loss, reg_loss = model.loss(user.cuda(non_blocking=True), item.cuda(non_blocking=True))
            loss.backward()
            optimizer.step()
            total += loss.cpu().item()
            total += model_loss.cpu().item()
            total += reg_loss.cpu().item()
    """
    hits = found(src)
    assert {(12, "HL007"), (13, "HL007"), (14, "HL007")} <= set(hits)


def test_a_tuple_of_python_numbers_copied_to_the_device_every_step_is_hl024():
    """`self.sign_real += torch.tensor((out.sign().sum().item(), batch_size), device=rank)` every step (StudioGAN's
    ADA bookkeeping): the tuple is Python data made in the step and copied from pageable memory each time, so the
    call is HL024 beside the `.item()`'s HL001 (indexing.python_data); a list of tensors is a stack, not HL024."""
    src = """
    import torch

    def train(loader, model, optimizer, rank, batch_size):
        sign_real = torch.zeros(2, device=rank)
        for x, y in loader:
            x = x.to(rank, non_blocking=True)
            out = model(x)
            loss = out.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sign_real += torch.tensor((out.sign().sum().item(), batch_size), device=rank)
            stacked = torch.tensor([out, loss], device=rank)
    """
    hits = found(src)
    assert (13, "HL024") in hits and (13, "HL001") in hits
    assert (14, "HL024") not in hits


def test_a_networks_forward_is_the_steps_when_the_loop_cannot_name_its_class(tmp_path: Path):
    """CSDI's `utils.train(model, config, train_loader)` calls `model(train_batch)` every step, the model a
    parameter; `main_model.py`'s `CSDI_base.forward` (and its subclass's) runs there, and so does what it calls:
    `torch.randint(...).to(self.device)` in `calc_loss` is HL012 in the model's file when both files are linted
    together (callers._forwards). Linted alone, the model file has no step and says nothing."""
    (tmp_path / "README.md").write_text("project\n")
    (tmp_path / "utils.py").write_text(
        textwrap.dedent("""
        import torch

        def train(model, loader, optimizer):
            for epoch in range(10):
                for batch in loader:
                    optimizer.zero_grad()
                    loss = model(batch)
                    loss.backward()
                    optimizer.step()
        """)
    )
    (tmp_path / "model.py").write_text(
        textwrap.dedent("""
        import torch
        from torch import nn

        class Base(nn.Module):
            def __init__(self, device):
                super().__init__()
                self.device = device
                self.net = nn.Linear(4, 1)

            def forward(self, batch):
                return self.calc_loss(batch.to(self.device, non_blocking=True))

            def calc_loss(self, x):
                t = torch.randint(0, 50, [x.shape[0]]).to(self.device)
                return (self.net(x) * t).mean()

        class Forecasting(Base):
            def forward(self, batch):
                return self.calc_loss(batch.to(self.device, non_blocking=True)) * 2
        """)
    )
    together = [(Path(f.path).name, f.line, f.code) for f in lint_paths([str(tmp_path)])]
    assert ("model.py", 15, "HL012") in together
    alone = [(f.line, f.code) for f in lint_paths([str(tmp_path / "model.py")])]
    assert (15, "HL012") not in alone


def test_a_mask_cast_with_to_torch_bool_is_a_boolean_mask():
    """`bool_masked_pos = bool_masked_pos.to(device, non_blocking=True).flatten(1).to(torch.bool)` then
    `images_patch[bool_masked_pos]` every step (MAE's pretraining engine): `.to(torch.bool)` makes a mask as
    `.bool()` does, so the index is HL006 (indexing._bool_made)."""
    src = """
    import torch

    def train_one_epoch(model, loader, optimizer, device):
        for images, bool_masked_pos in loader:
            images = images.to(device, non_blocking=True)
            bool_masked_pos = bool_masked_pos.to(device, non_blocking=True).flatten(1).to(torch.bool)
            labels = images[bool_masked_pos]
            loss = (model(images, bool_masked_pos) - labels).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert (8, "HL006") in found(src)


def test_a_value_narrowed_to_a_list_earlier_in_an_and_chain_is_not_a_tensor():
    """`if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):` in a forward's helper
    (our own `distill.loss.logits_of`): the bare `out` tests a list's length, not a tensor, so no HL005
    (forks.narrowed_away reads the `and` chain as it reads an enclosing `if`)."""
    src = """
    import torch

    def logits_of(out):
        if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
            return out[0]
        return out

    def train(model, loader, optimizer):
        for x in loader:
            x = x.cuda(non_blocking=True)
            loss = logits_of(model(x)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert not any(code == "HL005" for _, code in found(src))


def test_persistent_workers_false_written_out_re_forks_the_workers_too():
    """`DataLoader(..., num_workers=3, pin_memory=True, persistent_workers=False)` iterated every epoch (nanoVLM):
    spelling the default out does not keep the workers, so it is HL011 like leaving it out
    (loaders: `persistent_workers=False` is missing, as `pin_memory=False` is unpinned)."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    def main(train_dataset, model, optimizer):
        loader = DataLoader(train_dataset, batch_size=8, num_workers=3, pin_memory=True, persistent_workers=False)
        for epoch in range(10):
            for x, y in loader:
                x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                loss = model(x, y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    """
    assert (6, "HL011") in found(src)


def test_an_episodes_end_is_a_boundary_not_a_step():
    """`if player.done:` around the reset of the recurrent state and the environment (A3C's worker loop): it runs
    once an episode, so its `torch.zeros(1, 256).cuda()` is no per-step copy (gates.GATE_WORDS has `done`); the
    copies every update still are HL012."""
    src = """
    import torch

    def train(player, shared_model, optimizer, num_steps):
        while True:
            player.model.load_state_dict(shared_model.state_dict())
            if player.done:
                player.cx = torch.zeros(1, 256).cuda()
                player.hx = torch.zeros(1, 256).cuda()
            for step in range(num_steps):
                player.action_train()
                if player.done:
                    break
            R = torch.zeros(1, 1).cuda()
            loss = player.loss(R)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    hits = found(src)
    assert (8, "HL012") not in hits and (9, "HL012") not in hits
    assert (14, "HL012") in hits


def test_accumulation_behind_a_flag_that_defaults_to_one_is_not_accumulation():
    """`if (idx + 1) % args.grad_accumulation_steps == 0: optimizer.step()` with `default=1` and no shipped command
    setting it (EfficientDet's `train.py`, FiD's `--accumulation_steps`): every backward is followed by a step, so
    the undivided loss is no HL016 (structure.accumulation asks the flag's default); the same gate on a flag that
    defaults to 4 still is."""
    src = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument('--grad_accumulation_steps', default={n}, type=int)
    args = parser.parse_args()

    def train(loader, model, optimizer):
        for idx, (x, y) in enumerate(loader):
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = model(x, y)
            loss.backward()
            if (idx + 1) % args.grad_accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
    """
    assert (13, "HL016") not in found(src.replace("{n}", "1"))
    assert (13, "HL016") in found(src.replace("{n}", "4"))


def test_an_evaluation_function_that_hands_the_model_to_an_evaluation_helper_runs_no_model_itself():
    """contriever's `eval_model(opt, query_encoder, ...)` loops over datasets calling
    `beir_utils.evaluate_model(query_encoder, ...)`, which sets eval mode and turns gradients off in its own
    file: the call is named for what it evaluates, not for a network, so `eval_model` is no HL018 of its own
    (evals._runs_by_name); a loop that calls `model(x)` itself still is."""
    src = """
    import torch
    import beir_utils

    def eval_model(opt, query_encoder, doc_encoder):
        for name in opt.eval_datasets:
            metrics = beir_utils.evaluate_model(query_encoder, doc_encoder, dataset=name)
            print(metrics)

    def evaluate(model, loader):
        for x in loader:
            out = model(x.cuda())
            print(out.sum().item())
    """
    hits = found(src)
    assert not any(line == 5 and code == "HL018" for line, code in hits)
    assert any(line == 10 and code == "HL018" for line, code in hits)


def test_a_step_over_each_optimizer_is_one_step_and_debug_false_is_the_normal_path():
    """VQ-Diffusion's `Solver.step(batch, phase)`: `if self.debug == False:` moves each batch entry with a blocking
    `.cuda()`, then `for name, op in self.optimizer_and_scheduler.items():` runs backward and steps each optimizer.
    A loop over optimizers is no loop over data, so `step` is one training step and the epoch loop calling it is
    hot (analysis._step_functions); `== False` opens the body as `not` does (gates.negated); the validation call
    with `phase='val'` is not a step."""
    src = """
    import torch

    class Solver:
        def step(self, batch, phase='train'):
            if self.debug == False:
                for k, v in batch.items():
                    batch[k] = v.cuda()
            for name, op in self.optimizer_and_scheduler.items():
                output = self.model(batch)
                if phase == 'train':
                    op['optimizer'].zero_grad()
                    output['loss'].backward()
                    op['optimizer'].step()
            return output['loss'].detach()

        def train_epoch(self):
            for itr, batch in enumerate(self.dataloader['train_loader']):
                loss = self.step(batch, phase='train')

        def validate_epoch(self):
            for itr, batch in enumerate(self.dataloader['validation_loader']):
                loss = self.step(batch, phase='val')
                print(loss.item())
    """
    hits = found(src)
    assert (8, "HL012") in hits
    assert (24, "HL001") not in hits


def test_saving_an_encoder_module_in_place_is_a_checkpoint():
    """varibad saves `torch.save(self.vae.encoder, join(save_path, "encoder.pt"))` beside the policy every
    `save_interval` updates, to the same names: an encoder (a decoder, a generator, a VAE) is weights, so each
    save is HL021 like the policy's (saves.PAYLOAD)."""
    src = """
    import os
    import torch

    def train(loader, policy, vae, optimizer, save_path):
        for it, batch in enumerate(loader):
            loss = policy(batch.cuda(non_blocking=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if it % 100 == 0:
                torch.save(policy, os.path.join(save_path, "policy.pt"))
                torch.save(vae.encoder, os.path.join(save_path, "encoder.pt"))
    """
    hits = found(src)
    assert (12, "HL021") in hits and (13, "HL021") in hits


def test_host_noise_copied_into_a_device_buffer_every_step_is_hl012():
    """pytorch-book's GAN chapter: `noises = t.randn(b, nz, 1, 1).to(device)` once, then
    `noises.data.copy_(t.randn(b, nz, 1, 1))` every discriminator step: noise made on the host and copied into the
    device buffer, blocking (provenance.blocking_copy_in also takes a host factory's tensor, not only a batch)."""
    src = """
    import torch as t

    def train(loader, netd, netg, optimizer_d, device):
        noises = t.randn(64, 100, 1, 1).to(device)
        for ii, (img, _) in enumerate(loader):
            real_img = img.to(device, non_blocking=True)
            optimizer_d.zero_grad()
            noises.data.copy_(t.randn(64, 100, 1, 1))
            loss = netd(real_img).mean() - netd(netg(noises).detach()).mean()
            loss.backward()
            optimizer_d.step()
    """
    assert (9, "HL012") in found(src)


def test_the_values_of_a_batch_dict_are_tensors():
    """pytorch3d's NeRF project: `image, camera, camera_idx = batch[0].values()` then `image = image.to(device)`
    every step: the values of a batch's dict are its tensors, not Python data as a `.values()` of options would be,
    so the blocking copy is HL012 (kinds: `.values()` of a tensor-kind receiver)."""
    src = """
    import torch

    def train(train_dataloader, model, optimizer, device):
        for epoch in range(10):
            for iteration, batch in enumerate(train_dataloader):
                image, camera, camera_idx = batch[0].values()
                image = image.to(device)
                loss = model(image, camera)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    """
    assert (8, "HL012") in found(src)


def test_a_cuda_tensor_type_named_through_an_import_alias_is_a_copy_to_the_device():
    """pytorch-maddpg: `import torch as th`, `FloatTensor = th.cuda.FloatTensor if use_cuda else th.FloatTensor`,
    then `th.stack(batch.states).type(FloatTensor)` every update: the CUDA type is named through the module's alias,
    and the `.type()` copies the host batch to the GPU, blocking (provenance.cuda_type resolves aliases)."""
    src = """
    import torch as th

    FloatTensor = th.cuda.FloatTensor if th.cuda.is_available() else th.FloatTensor

    def update(memory, critic, optimizer):
        for it in range(1000):
            batch = memory.sample(64)
            state_batch = th.stack(batch.states).type(FloatTensor)
            loss = critic(state_batch).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert (9, "HL012") in found(src)


def test_a_shared_loop_that_sets_the_mode_from_its_flag_is_in_eval_mode_when_evaluating():
    """fsgan's `proces_epoch(loader, train=True)` calls `model.train(train)`, and the validation call passes
    `train=False` under `torch.no_grad()`: the model is in eval mode there, so no HL018 for a missing `.eval()`
    (evals: `.train(<the flag>)` sets the mode the flag asks for)."""
    src = """
    import torch

    def main(model, train_loader, val_loader, optimizer, criterion, epochs):
        def proces_epoch(loader, train=True):
            model.train(train)
            for x, y in loader:
                x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                loss = criterion(model(x), y)
                if train:
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()

        for epoch in range(epochs):
            proces_epoch(train_loader, train=True)
            with torch.no_grad():
                proces_epoch(val_loader, train=False)
    """
    assert not any(code == "HL018" for _, code in found(src))
