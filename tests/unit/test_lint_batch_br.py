"""Patterns found while scoring held-out batches BR and BS (session 16), in our own words. Each test fails without
the change it names."""

from __future__ import annotations

import textwrap

from hotloop.lint import lint_source


def found(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


def test_pre_0_4_async_copies_parse_and_the_rest_of_the_file_is_linted():
    """`.cuda(async=True)` (PyTorch before 0.4) no longer parses on Python 3.7+: read as `non_blocking=True`
    (syntax.parse_source), the file is linted instead of reporting one HL000 that hides every finding."""
    src = """
    import torch

    def train(model, loader, opt):
        for x, y in loader:
            x = x.cuda(async=True)
            y = y.cuda(async=True)
            loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(loss.item())
    """
    hits = found(src)
    assert not any(code == "HL000" for _, code in hits)
    assert (12, "HL001") in hits
    assert not any(code == "HL012" for _, code in hits)  # the copies were non-blocking
    assert [code for _, code in found("def f(:\n    pass\n")] == ["HL000"]  # a real syntax error still is one


def test_a_gpu_count_check_is_no_opt_in_flag_for_empty_cache():
    """`if n_gpus: torch.cuda.empty_cache()` every step (3DUnetCNN): the test asks whether a GPU is used, not
    whether the user opted into the call, so HL020 stands."""
    src = """
    import torch

    def epoch(model, loader, opt, n_gpus):
        for x, y in loader:
            if n_gpus:
                torch.cuda.empty_cache()
            loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
    """
    assert (7, "HL020") in found(src)


def test_unpacking_a_helper_that_returns_another_helpers_tuple():
    """`loss, batch_size = batch_loss(...)` where `batch_loss` returns `_batch_loss(...)`, which returns
    `loss, images.size(0)`: the batch size is a number (forks._tuple_returns looks through the forwarding
    return), so testing it is no tensor read; the loss stays a tensor."""
    src = """
    import torch

    def _batch_loss(model, images, target, criterion):
        output = model(images)
        batch_size = images.size(0)
        loss = criterion(output, target)
        return loss, batch_size

    def batch_loss(model, images, target, criterion):
        images = images.cuda(non_blocking=True)
        return _batch_loss(model, images, target, criterion)

    def epoch(model, loader, criterion, opt, limit):
        for i, (images, target) in enumerate(loader):
            loss, batch_size = batch_loss(model, images, target, criterion)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (i + 1) * batch_size >= limit:
                break
            if loss > 10:
                print("high")
    """
    hits = found(src)
    assert (20, "HL005") not in hits
    assert (22, "HL005") in hits


def test_moving_a_loss_module_made_in_a_step_helper_copies_no_data():
    """`criterion = nn.MSELoss(reduction="mean").cuda()` in a helper called every step (tensorboy's OpenPose):
    a module without parameters, no batch copied, so no HL012; a host tensor moved there still is one."""
    src = """
    import torch
    from torch import nn

    def get_loss(pred, target):
        criterion = nn.MSELoss(reduction="mean").cuda()
        weight = torch.ones(3).cuda()
        return criterion(pred * weight, target)

    def train(model, loader, opt):
        for x, y in loader:
            loss = get_loss(model(x.cuda(non_blocking=True)), y.cuda(non_blocking=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
    """
    hits = found(src)
    assert (6, "HL012") not in hits
    assert (7, "HL012") in hits


def test_a_loader_kept_by_a_trainer_class_and_read_once_by_its_test_method():
    """`Trainer(args, train_loader, dev_loader, test_loader)`: the class keeps each as `self.<name>`; `train()`
    loops epochs over the first, calls `dev()` (reading the second) every epoch, and `test()` reads the third
    once after training (loaders._kept_reiterated). Only the first two need persistent workers."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    class Trainer:
        def __init__(self, args, train_loader, dev_loader, test_loader):
            self.train_loader = train_loader
            self.dev_loader = dev_loader
            self.test_loader = test_loader

        def train(self, model, opt):
            for epoch in range(10):
                for x in self.train_loader:
                    loss = model(x.cuda(non_blocking=True))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                self.dev(model)

        def dev(self, model):
            with torch.no_grad():
                for x in self.dev_loader:
                    model(x.cuda(non_blocking=True))

        def test(self, model):
            with torch.no_grad():
                for x in self.test_loader:
                    model(x.cuda(non_blocking=True))

    def main(args, ds, model, opt):
        train_loader = DataLoader(ds, batch_size=8, num_workers=2, pin_memory=True)
        dev_loader = DataLoader(ds, batch_size=8, num_workers=2, pin_memory=True)
        test_loader = DataLoader(ds, batch_size=8, num_workers=2, pin_memory=True)
        t = Trainer(args, train_loader, dev_loader, test_loader)
        t.train(model, opt)
        t.test(model)
    """
    hits = found(src)
    assert (31, "HL011") in hits
    assert (32, "HL011") in hits
    assert (33, "HL011") not in hits


def test_a_loop_variable_takes_the_kind_of_what_it_iterates():
    """`for a in acc: tracker.append(a.item())` with `acc = (...).cpu()`, in a step where `a` was a device batch
    before (pytorch-vqa): inside the loop `a` is an element of the host tensor, so reading it is no sync
    (provenance: the innermost loop binding the name, which nothing in it reassigns, decides)."""
    src = """
    import torch

    def train(net, loader, opt, tracker):
        for v, a in loader:
            v = v.cuda(non_blocking=True)
            a = a.cuda(non_blocking=True)
            out = net(v)
            loss = (out * a).sum()
            acc = (out.argmax(1) == a).float().cpu()
            opt.zero_grad()
            loss.backward()
            opt.step()
            for a in acc:
                tracker.append(a.item())
            for o in out:
                tracker.append(o.item())
    """
    hits = found(src)
    assert (15, "HL001") not in hits
    assert (17, "HL001") in hits


def test_the_else_of_a_train_flag_is_the_evaluation_side():
    """`def run(net, loader, train=False)` called for both phases: under `if train: ... else:` the `else` runs only
    when evaluating (gates._phase_branch reads a flag named for the phase as it reads `split == 'val'`)."""
    src = """
    import torch

    def run(net, loader, opt, train=False):
        answers = []
        for v, a in loader:
            out = net(v.cuda(non_blocking=True))
            loss = (out * a.cuda(non_blocking=True)).sum()
            if train:
                opt.zero_grad()
                loss.backward()
                opt.step()
                print(loss.item())
            else:
                answers.append(out.data.cpu())

    def main(net, tl, vl, opt):
        for epoch in range(10):
            run(net, tl, opt, train=True)
            with torch.no_grad():
                run(net, vl, opt, train=False)
    """
    hits = found(src)
    assert (13, "HL001") in hits
    assert (15, "HL007") not in hits


def test_a_smoothed_loss_that_keeps_each_steps_graph():
    """`smooth_loss = smooth_loss * 0.99 + loss * 0.01` after `loss.backward()` (sh0416's BPR): the average is a
    tensor chaining every step's graph, as `total += loss` does (totals._smoothed); with `loss.item()` it is not."""
    src = """
    import torch

    def train(model, loader, opt):
        smooth_loss = 0
        smooth_num = 0
        for u, i in loader:
            opt.zero_grad()
            loss = model(u.cuda(non_blocking=True), i.cuda(non_blocking=True))
            loss.backward()
            opt.step()
            smooth_loss = smooth_loss * 0.99 + loss * 0.01
            smooth_num = smooth_num * 0.99 + loss.item() * 0.01
    """
    hits = found(src)
    assert (12, "HL019") in hits
    assert (13, "HL019") not in hits


def test_accumulating_a_summed_loss_needs_no_division():
    """`loss_fn = nn.BCELoss(reduction="sum")` and sub-batches accumulated before one step (MCAN): the summed
    sub-batch losses are the whole batch's summed loss, so there is nothing to divide (forks.summed_loss); the
    same loop with a mean loss is HL016."""
    template = """
    import torch

    def train(net, loader, opt, accum):
        loss_fn = torch.nn.BCELoss({reduction}).cuda()
        for x, y in loader:
            for k in range(accum):
                pred = net(x[k].cuda(non_blocking=True))
                loss = loss_fn(pred, y[k].cuda(non_blocking=True))
                loss.backward()
            opt.step()
            opt.zero_grad()
    """
    assert (10, "HL016") not in found(template.replace("{reduction}", 'reduction="sum"'))
    assert (10, "HL016") in found(template.replace("{reduction}", ""))


def test_a_step_counter_tested_against_a_list_of_steps_is_a_gate():
    """`if iteration in testing_iterations:` (gaussian-splatting's report helper, called every step): the block
    runs at a few scheduled iterations, like `iteration % n == 0` (gates.COUNTER); the per-step read stays."""
    src = """
    import torch

    def report(writer, iteration, loss, testing_iterations, model, views):
        writer.add_scalar("loss", loss.item(), iteration)
        if iteration in testing_iterations:
            for v in views:
                err = (model(v.cuda(non_blocking=True)) - v.cuda(non_blocking=True)).abs().mean()
                print(f"{err.item()}")

    def train(model, loader, opt, writer, testing_iterations, views):
        for iteration, x in enumerate(loader):
            loss = model(x.cuda(non_blocking=True)).mean()
            loss.backward()
            opt.step()
            report(writer, iteration, loss, testing_iterations, model, views)
    """
    hits = found(src)
    assert (5, "HL001") in hits
    assert (9, "HL001") not in hits


def test_a_loss_of_predictions_brought_to_the_host_is_read_without_a_sync():
    """`preds = model(x).cpu()` then `loss = criterion(preds, ...)` (CRNN's CTC loss on the host): the `.cpu()` is
    the sync (HL007), and `loss.item()` reads a host tensor (provenance.CRITERION: a criterion's value lives where
    its predictions do); with the predictions left on the device the read is HL001."""
    template = """
    import torch

    def train(model, loader, criterion, opt):
        for x, y in loader:
            preds = model(x.cuda(non_blocking=True)){move}
            loss = criterion(preds, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(loss.item())
    """
    on_host = found(template.replace("{move}", ".cpu()"))
    assert (6, "HL007") in on_host and (11, "HL001") not in on_host
    assert (11, "HL001") in found(template.replace("{move}", ""))


def test_a_registered_buffer_is_a_tensor_so_its_queue_pointer_read_is_a_sync():
    """MoCo's queue: `self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))` and `ptr =
    int(self.queue_ptr)` in the enqueue its forward calls every step (CoST, CoCLR): the buffer lives on the
    model's device, so `int()` is a host read (attributes.class_attribute_kind); a buffer registered as None
    says nothing."""
    src = """
    import torch
    from torch import nn

    class MoCo(nn.Module):
        def __init__(self, enc, K=256):
            super().__init__()
            self.enc = enc
            self.register_buffer("queue", torch.randn(128, K))
            self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))
            self.register_buffer("count", None)

        def _enqueue(self, keys):
            ptr = int(self.queue_ptr)
            n = int(self.count)
            self.queue[:, ptr:ptr + keys.shape[0]] = keys.T
            self.queue_ptr[0] = (ptr + keys.shape[0]) % self.queue.shape[1]

        def forward(self, q, k):
            loss = (self.enc(q) - self.enc(k)).pow(2).mean()
            self._enqueue(k)
            return loss

    def train(model, loader, opt):
        model = MoCo(model).cuda()
        for q, k in loader:
            loss = model(q.cuda(non_blocking=True), k.cuda(non_blocking=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
    """
    hits = found(src)
    assert (14, "HL001") in hits
    assert (15, "HL001") not in hits


def test_training_args_saved_into_the_directory_the_model_is_saved_into_in_place():
    """`save_model()` every `save_steps` (R-BERT, JointBERT): `model.save_pretrained(model_dir)` and
    `torch.save(self.args, join(model_dir, "training_args.bin"))` overwrite the one checkpoint directory; the
    args file is part of that checkpoint (saves._checkpoint_payload), so HL021 reports the torch.save. Saved
    alone, the options are no checkpoint."""
    template = """
    import os
    import torch

    class Trainer:
        def train(self, loader, opt):
            for step, batch in enumerate(loader):
                loss = self.model(**{k: v.cuda(non_blocking=True) for k, v in batch.items()})[0]
                loss.backward()
                opt.step()
                if step % self.args.save_steps == 0:
                    self.save_model()

        def save_model(self):
            {save_weights}
            torch.save(self.args, os.path.join(self.args.model_dir, "training_args.bin"))
    """
    beside = "self.model.save_pretrained(self.args.model_dir)"
    assert (16, "HL021") in found(template.replace("{save_weights}", beside))
    assert (16, "HL021") not in found(template.replace("{save_weights}", "pass"))


def test_a_trainers_step_buffer_stays_on_the_host():
    """lucidrains' trainers keep `self.register_buffer("steps", torch.Tensor([0]))` and loop `while self.steps <
    self.num_train_steps:` (muse-maskgit): the trainer is not moved to the device, only its models are, so the
    test reads a host tensor (attributes: a buffer of a class named `*Trainer` is not taken for a device tensor)."""
    src = """
    import torch
    from torch import nn

    class MaskGitTrainer(nn.Module):
        def __init__(self, model, loader, num_train_steps):
            super().__init__()
            self.model, self.loader, self.num_train_steps = model, loader, num_train_steps
            self.register_buffer("steps", torch.Tensor([0]))

        def train_step(self, opt):
            x = next(self.loader).cuda(non_blocking=True)
            loss = self.model(x)
            loss.backward()
            opt.step()
            self.steps += 1

        def train(self, opt):
            while self.steps < self.num_train_steps:
                self.train_step(opt)
    """
    assert not any(code == "HL005" for _, code in found(src))


def test_a_training_step_counter_does_not_make_cpu_code_device_code():
    """sweetice's CPU-only PPO keeps `self.training_step = 0`: only a Lightning-style `def training_step(` says the
    code runs on a trainer's device (analysis), so indexing its host rollout with a BatchSampler's index list is no
    HL024; with a `.cuda()` move in the file it is."""
    template = """
    import torch
    from torch.utils.data.sampler import BatchSampler, SubsetRandomSampler

    class Agent:
        def __init__(self, net, opt):
            self.net, self.opt, self.training_step = net, opt, 0
            self.buffer = []

        def update(self):
            self.training_step += 1
            s = torch.stack([t[0] for t in self.buffer]){move}
            for _ in range(10):
                for index in BatchSampler(SubsetRandomSampler(range(len(self.buffer))), 32, False):
                    loss = self.net(s[index]).mean()
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()
    """
    assert not any(code == "HL024" for _, code in found(template.replace("{move}", "")))
    assert any(code == "HL024" for _, code in found(template.replace("{move}", ".cuda()")))


def test_a_save_in_the_branch_that_ends_training_runs_once():
    """`if running_reward > -200: agent.save_param(); break` (sweetice's PPO): the save is the run's last act,
    so writing it in place loses nothing (saves._last_save); saved every epoch, or in a branch whose `break` only
    leaves an inner loop, it is HL021."""
    template = """
    import torch

    class Agent:
        def save_param(self):
            torch.save(self.net.state_dict(), "param/net.pkl")

    def main(net, opt):
        agent = Agent()
        agent.net = net
        for ep in range(1000):
            for t in range(200):
                loss = agent.net(torch.randn(4).cuda()).sum()
                loss.backward()
                opt.step()
            {body}
    """
    last = "if ep > 10:\n                agent.save_param()\n                break"
    every = "agent.save_param()"
    assert (6, "HL021") not in found(template.replace("{body}", last))
    assert (6, "HL021") in found(template.replace("{body}", every))


def test_data0_of_arithmetic_on_a_criterions_value_is_a_host_read():
    """BEGAN: `k_t = k_t + (gamma * L_x - g_loss).data[0]` with `L_x = L_D(x)` and `def L_D(x): return l1(D(x), x)`,
    `l1 = nn.L1Loss()`: PyTorch 0.3's `.item()` of a one-element value (indexing._scalar_tensor follows the name,
    the same-file function and the criterion); `.data[0]` of a batch is its first row, no read."""
    src = """
    import torch
    from torch import nn

    def train(D, loader, opt, gamma):
        l1 = nn.L1Loss()

        def L_D(inputs):
            return l1(D(inputs), inputs)

        k_t = 0
        for x in loader:
            x = x.cuda(non_blocking=True)
            L_x = L_D(x)
            L_x.backward()
            opt.step()
            k_t = k_t + (gamma * L_x).data[0]
            first = x.data[0]
    """
    hits = found(src)
    assert (17, "HL001") in hits
    assert (18, "HL001") not in hits


def test_a_script_that_manages_cuda_memory_runs_on_cuda():
    """G-Retriever's `train.py` moves nothing itself (its model moves the batch) but calls
    `torch.cuda.empty_cache()`: that says the run is on CUDA, so the per-step `loss.item()` is a sync (analysis's
    device evidence; once it came from the words `num_training_steps` containing "training_step", which a CPU
    script's `self.training_step` counter also has)."""
    template = """
    import torch

    def main(model, loader, optimizer, epochs):
        num_training_steps = epochs * len(loader)
        for epoch in range(epochs):
            for step, batch in enumerate(loader):
                optimizer.zero_grad()
                loss = model(batch)
                loss.backward()
                optimizer.step()
                total = loss.item()
        {tail}
    """
    assert (12, "HL001") in found(template.replace("{tail}", "torch.cuda.empty_cache()"))
    assert (12, "HL001") not in found(template.replace("{tail}", "pass"))


def test_reads_on_an_epochs_first_few_batches_only_are_not_per_step():
    """`if batch_idx < 5: predictions += ypred.cpu().numpy().tolist()` (gnn-explainer): a counter below a small
    literal holds on a handful of steps an epoch (gates.first_step); below 500 it holds on most of them."""
    template = """
    import torch

    def train(model, loader, opt):
        predictions = []
        for epoch in range(10):
            for batch_idx, (x, y) in enumerate(loader):
                ypred = model(x.cuda(non_blocking=True))
                if batch_idx < {n}:
                    predictions += ypred.cpu().detach().numpy().tolist()
                loss = (ypred - y.cuda(non_blocking=True)).pow(2).mean()
                loss.backward()
                opt.step()
    """
    assert (10, "HL007") not in found(template.replace("{n}", "5"))
    assert (10, "HL007") in found(template.replace("{n}", "500"))


def test_an_agents_target_critics_output_is_already_on_the_device():
    """`min_q_pi = torch.min(self.qf1_target(obs2, pi), self.qf2_target(obs2, pi)).to(device)` (dongminlee94's
    SAC): the target critics' outputs live on their device, so the `.to()` copies nothing
    (provenance.MODULE_CALL knows actor/critic/qf networks); a replay batch moved blocking is still HL012."""
    src = """
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    class SAC:
        def train_model(self, batch):
            obs1 = torch.as_tensor(batch["obs1"]).to(device)
            obs2 = batch["obs2"]
            _, pi, logp = self.actor(obs2)
            min_q_pi = torch.min(self.qf1_target(obs2, pi), self.qf2_target(obs2, pi)).squeeze(1).to(device)
            loss = (self.qf1(obs1, pi) - min_q_pi.detach()).pow(2).mean()
            self.qf_optimizer.zero_grad()
            loss.backward()
            self.qf_optimizer.step()

        def run(self, env, buffer):
            for step in range(1000):
                obs, reward, done, _ = env.step(env.action_space.sample())
                self.train_model(buffer.sample())
    """
    hits = found(src)
    assert (11, "HL012") not in hits
    assert (8, "HL012") in hits


def test_a_batch_unpacked_just_above_is_still_on_the_host():
    """`points, target = data` then `points = points.data.numpy()` for a NumPy augmentation, then
    `points.cuda()` (Point-Transformers, pointconv): the `.numpy()` reads the loader's host batch, no sync
    (provenance: the unpacking just above decides); after the move it is a device read."""
    src = """
    import torch

    def train(model, loader, opt, augment):
        for epoch in range(10):
            for batch_id, data in enumerate(loader, 0):
                points, target = data
                points = points.data.numpy()
                points = torch.Tensor(augment(points))
                points, target = points.cuda(non_blocking=True), target.cuda(non_blocking=True)
                pred = model(points)
                loss = (pred - target).pow(2).mean()
                loss.backward()
                opt.step()
                kept = points.data.numpy()
    """
    hits = found(src)
    assert (8, "HL007") not in hits
    assert (15, "HL007") in hits


def test_a_cuda_type_cast_of_a_device_tensor_copies_nothing():
    """`(alpha > -0.99).type(torch.cuda.FloatTensor)` of the model's output (Background-Matting): a cast on the
    device, no copy; the same cast of a host batch is a blocking copy (HL012)."""
    src = """
    import torch

    def train(net, loader, opt):
        for x, alpha in loader:
            x = x.type(torch.cuda.FloatTensor)
            alpha_pred = net(x)
            mask = (alpha_pred > -0.99).type(torch.cuda.FloatTensor)
            loss = (alpha_pred * mask).mean()
            loss.backward()
            opt.step()
    """
    hits = found(src)
    assert (6, "HL012") in hits
    assert (8, "HL012") not in hits
