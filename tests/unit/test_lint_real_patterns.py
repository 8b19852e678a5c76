"""Patterns found in public training scripts (issue 17), rewritten from scratch as small fixtures: each false
alarm the old lint raised must stay quiet, each real problem it missed must be reported.

The public scripts themselves are scored by `bench/lint_eval/score.py` (not committed: their licences are theirs).
"""

from __future__ import annotations

import textwrap

import pytest

from hotloop.lint import lint_source

HEAD = "import torch\nimport torch.nn.functional as F\nfrom torch.utils.data import DataLoader, DistributedSampler\n"


def codes(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(HEAD + textwrap.dedent(src))]


# Twin fixtures: the same loop, quiet one way and reported the other.
SYNC_LOSS_BY_FLAG = """
def train(model, loader, opt, hparams, get_sync_loss):
    running = 0.
    for x, y in loader:
        g = model(x.cuda(non_blocking=True))
        if hparams.syncnet_wt > 0.:
            sync_loss = get_sync_loss(g)
        else:
            sync_loss = 0.
        (g.mean() + sync_loss).backward()
        opt.step()
        if hparams.syncnet_wt > 0.:
"""
TEST_BATCH_EVERY_10 = """
def main(classifier, dataloader, testdataloader, optimizer, epochs):
    for epoch in range(epochs):
        for i, (points, target) in enumerate(dataloader):
            loss = F.nll_loss(classifier(points.cuda(non_blocking=True)), target.cuda(non_blocking=True))
            loss.backward()
            optimizer.step()
            if i % 10 == 0:
                j, data = next(enumerate(testdataloader, 0))
                classifier = classifier.eval()
"""

GAN_TENSOR = """
cuda = torch.cuda.is_available()
Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
for epoch in range(200):
    for i, (imgs, _) in enumerate(dataloader):
        real_imgs = {real}
        z = {z}
        d_loss = -torch.mean(discriminator(real_imgs)) + torch.mean(discriminator(generator(z)))
        d_loss.backward()
        optimizer_D.step()
"""

# MusicTransformer's `train_epoch(..., print_modulus=1)`: a `%` gate whose period defaults to 1 opens every step.
PRINT_GATE = """
def train_epoch(cur_epoch, model, dataloader, loss, opt, print_modulus={period}):
    for batch_num, (x, tgt) in enumerate(dataloader):
        out = loss(model(x.cuda(non_blocking=True)), tgt.cuda(non_blocking=True))
        out.backward()
        opt.step()
        if (batch_num + 1) % print_modulus == 0:
            print("Train loss:", float(out))
"""

QUIET = {
    "PyTorch-GAN's `Tensor(n, 100).normal_()` allocates on the device: no host data (HL024)": (
        "HL024",
        GAN_TENSOR.format(real="imgs.cuda(non_blocking=True)", z="Tensor(imgs.size(0), 100).normal_()"),
    ),
    "StepLR whose step_size (a CLI default of 10000) counts iterations, stepped every batch (HL014)": (
        "HL014",
        """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--step_size", type=int, default=10000)
        opts = parser.parse_args()

        def train(model, loader, optimizer):
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=opts.step_size, gamma=0.1)
            for x in loader:
                model(x.cuda(non_blocking=True)).mean().backward()
                optimizer.step()
                scheduler.step()
        """,
    ),
    "masking a batch's labels on the host before the script moves them (HL005/HL022)": (
        "HL005",
        """
        def train(model, loader, opt, media_id, eoc_id, device):
            for batch in loader:
                labels = torch.stack([x[0] for x in batch]).squeeze(1)
                for i in range(labels.shape[0]):
                    j = 0
                    while j < labels.shape[1] and labels[i][j] != media_id:
                        labels[i][j] = -100
                        j += 1
                    for idx in torch.where(labels[i] == eoc_id)[0]:
                        k = idx + 1
                        while k < labels.shape[1] and labels[i][k] != media_id:
                            k += 1
                labels = labels.to(device)
                model(labels).mean().backward()
                opt.step()
        """,
    ),
    "prints inside `if torch.isnan(loss): ... continue` run only on a bad step (HL002)": (
        "HL002",
        """
        def train(model, loader, opt):
            for x, y in loader:
                loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
                if torch.isnan(loss):  # sync: the guard itself is the finding, not what it prints
                    print("labels: ", y)
                    continue
                loss.backward()
                opt.step()
        """,
    ),
    "the step counter of `tqdm(enumerate(zip(a, b)))` is an int (HL005)": (
        "HL005",
        """
        def train(model, a_loader, b_loader, opt, accum):
            for num_steps, (a, b) in tqdm(enumerate(zip(a_loader, b_loader)), total=100):
                loss = model(a.cuda(non_blocking=True), b.cuda(non_blocking=True))
                loss.backward()
                if (num_steps + 1) % accum == 0:
                    opt.step()
        """,
    ),
    "a string built with `+` handed to a progress bar (HL002)": (
        "HL002",
        """
        def train(model, loader, opt, bar, epoch, tools):
            for x in loader:
                loss_values = [model(x.cuda(non_blocking=True)).mean()]
                loss_values[0].backward()
                opt.step()
                title = "{} Epoch {}".format("Training", epoch)
                bar.set_description(title + " " + tools.format_losses(loss_values))
        """,
    ),
    "a Python float set by tuple assignment, accumulated from .item() and formatted every step (HL002)": (
        "HL002",
        """
        def train(net, loader, opt, epoch):
            total_loss, total_num = 0.0, 0
            for x in loader:
                loss = net(x.cuda(non_blocking=True)).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                total_num += 8
                total_loss += loss.item() * 8
                print("epoch {} loss {:.4f}".format(epoch, total_loss / total_num))
        """,
    ),
    "the loss divided before `amp.scale_loss(loss, opt) as scaled_loss` (HL016)": (
        "HL016",
        """
        from apex import amp
        def train(model, loader, opt, accum):
            for step, (x, y) in enumerate(loader):
                loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
                if accum > 1:
                    loss = loss / accum
                with amp.scale_loss(loss, opt) as scaled_loss:
                    scaled_loss.backward()
                if (step + 1) % accum == 0:
                    opt.step()
                    opt.zero_grad()
        """,
    ),
    "a validation loader that is built and never read (HL011)": (
        "HL011",
        """
        def main(model, train_set, val_set, sampler, opt, epochs):
            model.cuda()
            train_loader = DataLoader(train_set, batch_size=8, num_workers=3, pin_memory=True, persistent_workers=True)
            val_loader = DataLoader(val_set, batch_size=1, num_workers=3)
            for epoch in range(epochs):
                for x in train_loader:
                    model(x.cuda(non_blocking=True)).mean().backward()
                    opt.step()
        """,
    ),
    "`self.main(x)` of an nn.Sequential is not the module-level `main()` (HL012)": (
        "HL012",
        """
        class Generator(torch.nn.Module):
            def forward(self, x):
                return self.main(x)

        def main(loader, opt, device):
            generator = Generator().to(device)
            for x in loader:
                generator(x.to(device, non_blocking=True)).mean().backward()
                opt.step()
        """,
    ),
    "generation's branch of forward (`targets is None`) indexing with `[-1]` (HL024)": (
        "HL024",
        """
        class GPT(torch.nn.Module):
            def forward(self, idx, targets=None):
                x = self.blocks(self.wte(idx))
                if targets is not None:
                    logits = self.lm_head(x)
                    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
                else:
                    return self.lm_head(x[:, [-1], :])

        def train(model, loader, opt):
            for x, y in loader:
                loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
                loss.backward()
                opt.step()
        """,
    ),
    "repeat_interleave by a Python int from `.size()` (HL022)": (
        "HL022",
        """
        def train(model, loader, opt, emb):
            for x in loader:
                x = x.cuda(non_blocking=True)
                n = x.size()[1]
                e = emb.repeat_interleave(n, dim=1)
                model(x, e).mean().backward()
                opt.step()
        """,
    ),
    "an epoch function named train_step does not make its caller's epoch loop per-step (HL001)": (
        "HL001",
        """
        def train_step(model, loader, opt, device):
            for X, y in loader:
                X, y = X.to(device, non_blocking=True), y.to(device, non_blocking=True)
                loss = F.cross_entropy(model(X), y)
                opt.zero_grad()
                loss.backward()
                opt.step()

        def test_step(model, loader, device):
            total = 0.0
            with torch.inference_mode():
                for X, y in loader:
                    total += F.cross_entropy(model(X.to(device, non_blocking=True)), y.to(device)).item()
            return total

        def fit(model, train_loader, test_loader, opt, device, epochs):
            for epoch in range(epochs):
                train_step(model, train_loader, opt, device)
                print(test_step(model, test_loader, device))
        """,
    ),
    "a boolean mask made on the CPU indexes device data without a device sync (HL006)": (
        "HL006",
        """
        def adapt(batch, learner, shots, device):
            data, labels = batch
            data, labels = data.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            support = torch.zeros(data.size(0), dtype=bool)
            support[torch.arange(shots) * 2] = True
            query = ~support
            return learner(data[support]), data[query]

        def train(learner, loader, opt, device):
            for batch in loader:
                a, b = adapt(batch, learner, 5, device)
                a.sum().backward()
                opt.step()
        """,
    ),
    "a conditional sampler and set_epoch under the same condition; a sampler over a validation set (HL015)": (
        "HL015",
        """
        def main(h, trainset, valset, model, opt):
            sampler = DistributedSampler(trainset) if h.num_gpus > 1 else None
            loader = DataLoader(trainset, sampler=sampler, batch_size=16)
            for epoch in range(10):
                if h.num_gpus > 1:
                    sampler.set_epoch(epoch)
                for x in loader:
                    model(x.cuda(non_blocking=True)).backward()
                    opt.step()
                v_sampler = DistributedSampler(valset) if h.num_gpus > 1 else None
        """,
    ),
    "a GAN's lazy regularisation (its own backward and step every N steps) is no accumulation (HL016)": (
        "HL016",
        """
        def train(G, D, loader, g_opt, d_opt, args):
            for i, real in enumerate(loader):
                real = real.cuda(non_blocking=True)
                d_loss = D(G.sample()).mean() - D(real).mean()
                d_loss.backward()
                d_opt.step()
                regularize = i % args.reg_every == 0
                if regularize:
                    r1 = D(real).pow(2).mean()
                    r1.backward()
                    d_opt.step()
                g_loss = -D(G.sample()).mean()
                g_loss.backward()
                g_opt.step()
        """,
    ),
    "a Python flag latched before a tensor test short-circuits it (HL005)": (
        "HL005",
        """
        def train(model, loader, opt, bank):
            started = False
            for x in loader:
                out = model(x.cuda(non_blocking=True))
                if started or not torch.all(bank[-1] == 0):
                    started = True
                    out = out + bank.mean()
                out.sum().backward()
                opt.step()
        """,
    ),
    "numbers returned by a step helper, passed through a timer, are not tensors (HL002)": (
        "HL002",
        """
        def train(model, loader, opt, timer, meter):
            for x in loader:
                x = x.cuda(non_blocking=True)
                def train_step():
                    loss = model(x)
                    loss.backward()
                    opt.step()
                    return float(loss), 0.0
                (loss, aux), ms = timer(train_step)
                meter.update(loss)
                def log_stats():
                    print(f"{loss:.3f}")
                log_stats()
        """,
    ),
    "a continue guard naming the reporting tick gates what follows (HL007)": (
        "HL007",
        """
        def run(model, loader, opt, tick_len):
            it = iter(loader)
            n, tick_start = 0, 0
            while True:
                x = next(it).cuda(non_blocking=True)
                for phase in (1, 2):
                    model(x).backward()
                    opt.step()
                n += 1
                if n < tick_start + tick_len:
                    continue
                tick_start = n
                print(model.p.cpu())
        """,
    ),
    "a checkpoint's step counter is an int, not a tensor (HL005)": (
        "HL005",
        """
        def train(model, loader, opt, device, path):
            ckpt = torch.load(path)
            start = ckpt["iter_num"]
            best = ckpt.get("best_val_loss", 1e9)
            for step, (x, y) in enumerate(loader):
                x = x.to(device, non_blocking=True)
                if start > 0 and step < start:
                    continue
                if best < 0.1:
                    break
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
        """,
    ),
    "a float named like a loss is a float (HL002)": (
        "HL002",
        """
        def train(model, loader, opt, device):
            total = 0.0
            for x, y in loader:
                loss = F.cross_entropy(model(x.to(device, non_blocking=True)), y)
                loss.backward()
                opt.step()
                total += loss.item()  # noqa: HL001
                running_loss = total / 10
                print(f"loss {running_loss:.3f}")
        """,
    ),
    "loss / args.gradient_accumulation_steps then accelerator.backward (HL016)": (
        "HL016",
        """
        def train(model, loader, opt, accelerator, args):
            for step, batch in enumerate(loader):
                outputs = model(**batch)
                loss = outputs.loss
                loss = loss / args.gradient_accumulation_steps
                accelerator.backward(loss)
                if step % args.gradient_accumulation_steps == 0:
                    opt.step()
                    opt.zero_grad()
        """,
    ),
    "Accelerate's accumulate() divides inside accelerator.backward (HL016)": (
        "HL016",
        """
        def train(model, loader, opt, accelerator):
            for step, batch in enumerate(loader):
                with accelerator.accumulate(model):
                    loss = model(**batch).loss
                    accelerator.backward(loss)
                    if accelerator.sync_gradients:
                        opt.step()
        """,
    ),
    "clipping in the else: branch that never used the scaler (HL017)": (
        "HL017",
        """
        def train(model, loader, opt, scaler, use_amp, device):
            for x, y in loader:
                loss = model(x.to(device, non_blocking=True), y)
                if use_amp:
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                else:
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
        """,
    ),
    "set_epoch called by a helper; a validation sampler without shuffle (HL015)": (
        "HL015",
        """
        def start_epoch(loader, epoch):
            loader.sampler.set_epoch(epoch)
        train_sampler = DistributedSampler(train_ds)
        val_sampler = DistributedSampler(val_ds, shuffle=False)
        """,
    ),
    "every caller switches to eval() and no_grad before evaluate() (HL018)": (
        "HL018",
        """
        def evaluate(model, loader):
            for x, y in loader:
                model(x)
        def fit(model, train_loader, val_loader):
            for epoch in range(3):
                model.eval()
                with torch.no_grad():
                    evaluate(model, val_loader)
        """,
    ),
    "the enumerate index of a progress bar bound to a name is an int, not a tensor (HL005)": (
        "HL005",
        """
        def train(model, loader, opt):
            data_iter = tqdm.tqdm(enumerate(loader), total=len(loader))
            for i, data in data_iter:
                loss = model(data.cuda(non_blocking=True)).sum()
                loss.backward()
                opt.step()
                if i % 10 == 0:
                    print(i)
        """,
    ),
    "a pre-0.4 evaluation loop whose inputs are Variable(..., volatile=True) (HL018)": (
        "HL018",
        """
        def test(model, loader):
            model.eval()
            for x, y in loader:
                x = Variable(x.cuda(non_blocking=True), volatile=True)
                model(x)
        """,
    ),
    "a synchronize behind an opt-in flag, and in a benchmark function (HL020)": (
        "HL020",
        """
        def train(model, loader, opt, args):
            for x, y in loader:
                model(x).sum().backward()
                opt.step()
                if args.synchronize:
                    torch.cuda.synchronize()
        def benchmark_step(model, loader, opt):
            for x, y in loader:
                model(x).sum().backward()
                opt.step()
                torch.cuda.synchronize()
        """,
    ),
    "torch.tensor over Python floats (HL003)": (
        "HL003",
        """
        def report(loss, acc):
            lossf = loss.item()
            return torch.tensor([lossf, acc * 2.0])
        """,
    ),
    "num_workers=0, and a loader read once (HL011)": (
        "HL011",
        """
        device = "cuda"
        train_loader = DataLoader(ds, batch_size=8)
        test_loader = DataLoader(test_ds, batch_size=8, num_workers=4, pin_memory=True)
        for x, y in test_loader:
            pass
        """,
    ),
    "a CPU index tensor in a batch sampler is not a device sync (HL001)": (
        "HL001",
        """
        def get_batch(data, block):
            ix = torch.randint(len(data) - block, (8,))
            return torch.stack([torch.from_numpy(data[i:i + block]) for i in ix])
        """,
    ),
    "a batch from an Accelerate-prepared loader is on the device already (HL012)": (
        "HL012",
        """
        def train(accelerator, model, loader, opt):
            model, opt, loader = accelerator.prepare(model, opt, loader)
            for batch in loader:
                batch = batch.to(accelerator.device)
                accelerator.backward(model(batch).sum())
                opt.step()
        """,
    ),
    "Python sum over device tensors only adds, on the device (HL004)": (
        "HL004",
        """
        def total(losses: list[torch.Tensor]):
            return sum(losses)
        """,
    ),
    "a read on the way out of a diverged run happens once (HL001)": (
        "HL001",
        """
        import math, sys
        def train(model, loader, opt, device):
            for x, y in loader:
                loss = model(x.to(device, non_blocking=True), y)
                if not torch.isfinite(loss):  # noqa: HL005
                    print("loss is", loss.item())
                    sys.exit(1)
                loss.backward()
                opt.step()
        """,
    ),
    "an option named like a loss is an option (HL005)": (
        "HL005",
        """
        def train(model, loader, opt, args, device):
            for x, y in loader:
                if args.bce_loss:
                    y = y.float()
                loss = model(x.to(device, non_blocking=True), y)
                loss.backward()
                opt.step()
        """,
    ),
    "reads of host tensors (pinned shards, CPU indices) sync nothing (HL001/HL006/HL007)": (
        "HL006",
        """
        def batches(n, device):
            while True:
                tokens = torch.empty(n, dtype=torch.uint16, pin_memory=True)
                starts = torch.nonzero(tokens == 0)[:, 0]
                yield tokens.to(device, non_blocking=True), starts.numpy()
        def train(model, opt, device):
            data = batches(1024, device)
            for step in range(100):
                x, starts = next(data)
                model(x).sum().backward()
                opt.step()
        """,
    ),
    "a synchronize per evaluation batch is not the training loop's (HL020)": (
        "HL020",
        """
        def validate(model, loader, device):
            model.eval()
            with torch.no_grad():
                for x, y in loader:
                    model(x.to(device, non_blocking=True))
                    if device.type == "cuda":
                        torch.cuda.synchronize()
        def fit(model, train_loader, val_loader, opt, device):
            for epoch in range(3):
                for x, y in train_loader:
                    model(x.to(device, non_blocking=True)).sum().backward()
                    opt.step()
                validate(model, val_loader, device)
        """,
    ),
    "saving evaluation statistics is not a checkpoint (HL021)": (
        "HL021",
        """
        def fit(model, loader, opt, evaluator, out, device):
            for epoch in range(3):
                for x, y in loader:
                    model(x.to(device, non_blocking=True)).sum().backward()
                    opt.step()
                torch.save(evaluator.stats, out / "eval" / "latest.pth")
        """,
    ),
    "a checkpoint opened by name with the step in it is a new file (HL021)": (
        "HL021",
        """
        def fit(model, loader, opt, device):
            for step, (x, y) in enumerate(loader):
                model(x.to(device, non_blocking=True)).sum().backward()
                opt.step()
                if step % 1000 == 0:
                    name = f"model{step:06d}.pt"
                    with open(name, "wb") as f:
                        torch.save(model.state_dict(), f)
        """,
    ),
    "numpy values logged per timestep are Python numbers (HL001/HL002)": (
        "HL001",
        """
        def log_losses(ts, losses, logger):
            for sub_t, sub_loss in zip(ts.cpu().numpy(), losses.detach().cpu().numpy()):  # noqa: HL007
                quartile = int(4 * sub_t / 1000)
                logger.logkv_mean(f"q{quartile}", sub_loss)
        def train(model, loader, opt, logger, device):
            for x, t in loader:
                losses = model(x.to(device, non_blocking=True), t)
                log_losses(t, losses, logger)
                losses.mean().backward()
                opt.step()
        """,
    ),
    "an eval gate that also says not-accumulating is still an eval gate (HL001)": (
        "HL001",
        """
        def fit(model, loader, opt, val, eval_interval, device):
            for step, (x, y) in enumerate(loader):
                is_accumulating = step % 4 != 0
                model(x.to(device, non_blocking=True)).sum().backward()
                if not is_accumulating:
                    opt.step()
                if not is_accumulating and step % eval_interval == 0:
                    val_loss = validate(model, val)
                    print(val_loss.item())
        """,
    ),
    "after `if not should_log: return` only the log boundary runs (HL001)": (
        "HL001",
        """
        def train_step(self, batch, should_log):
            loss = self.model(batch.to(self.device, non_blocking=True))
            loss.backward()
            self.opt.step()
            if not should_log:
                return
            self.logger.log({"loss": loss.item()})
        """,
    ),
    "empty_cache in a validation-logging helper runs at the boundary (HL020)": (
        "HL020",
        """
        def log_validation(pipeline, args):
            images = pipeline(args.prompt)
            torch.cuda.empty_cache()
            return images
        def train(model, loader, opt, args, device):
            for step, x in enumerate(loader):
                model(x.to(device, non_blocking=True)).sum().backward()
                opt.step()
                if step % args.validation_steps == 0:
                    log_validation(model, args)
        """,
    ),
    "num_workers from a flag that defaults to 0 (HL011)": (
        "HL011",
        """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--dataloader_num_workers", type=int, default=0)
        args = parser.parse_args()
        x = torch.zeros(1).cuda()
        loader = DataLoader(ds, batch_size=8, num_workers=args.dataloader_num_workers)
        for epoch in range(3):
            for b in loader:
                pass
        """,
    ),
    "predicates return bools, whatever they are asked about (HL005)": (
        "HL005",
        """
        def train(model, text_encoder, loader, opt, device):
            for x in loader:
                if is_compiled_module(text_encoder):
                    text_encoder = text_encoder._orig_mod
                model(x.to(device, non_blocking=True)).sum().backward()
                opt.step()
        """,
    ),
    "gradients normalised by scale_grads need no loss division (HL016)": (
        "HL016",
        """
        def train(model, loader, opt, accum, device):
            for step, batch in enumerate(loader):
                num_tokens = 0
                for i in range(accum):
                    loss = model(batch.to(device, non_blocking=True)).sum()
                    num_tokens += batch.numel()
                    loss.backward()
                scale_grads(model, 1 / num_tokens)
                opt.step()
        """,
    ),
    "a tutorial that prints `device` but trains on the CPU reads nothing from a device (HL001)": (
        "HL001",
        """
        device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        print(device)
        def train(net, loader, opt):
            for x, y in loader:
                loss = F.cross_entropy(net(x), y)
                loss.backward()
                opt.step()
                running = loss.item()
        """,
    ),
    "no_grad inside the same-file eval_step an evaluation calls (HL018)": (
        "HL018",
        """
        class T:
            def eval_step(self, batch):
                with torch.no_grad():
                    return self.model(batch)
            def evaluate(self, loader):
                self.model.eval()
                for batch in loader:
                    self.eval_step(batch)
        """,
    ),
    "a trainer's valid_step from another file handles mode and gradients (HL018)": (
        "HL018",
        """
        def validate(trainer, model, subsets):
            for subset in subsets:
                for sample in subset:
                    trainer.valid_step(sample)
        """,
    ),
    "an attribute assigned from .item() is a Python number (HL004)": (
        "HL004",
        """
        class T:
            def train_step(self, batch):
                loss = self.model(batch.to(self.device, non_blocking=True))
                loss.backward()
                self.optimizer.step()
                self.cur_train_loss = loss.item()  # noqa: HL001
                self.min_train_loss = min(self.min_train_loss, self.cur_train_loss)
        """,
    ),
    "an index from enumerate() stored in a variable is an int; a loss *scale* is a float (HL005)": (
        "HL005",
        """
        def train(model, loader, opt, handler, device):
            data_iter = enumerate(loader)
            for i, (x, y) in data_iter:
                loss_scale = get_naflex_loss_scale(x)
                if loss_scale != 1.0:
                    x = x * loss_scale
                model(x.to(device, non_blocking=True)).sum().backward()
                opt.step()
                if (i + 1) % 20 == 0 and handler.interrupted:
                    break
        """,
    ),
    "loss.mul(scaling / total) divides what is accumulated (HL016)": (
        "HL016",
        """
        def train(ddp, loader, opt, rounds, total, device):
            for batch in loader:
                for r in range(rounds):
                    loss = ddp(batch.to(device, non_blocking=True))
                    loss.sum().mul(1.0 / total).backward()
                opt.step()
        """,
    ),
    "a project meter that stores the tensors it is given is no HL002 (YOLOX's MeterBuffer)": (
        "HL002",
        """
        class MeterBuffer(dict):
            def update(self, values=None, **kwargs):
                for k, v in kwargs.items():
                    if isinstance(v, torch.Tensor):
                        v = v.detach()
                    self.setdefault(k, []).append(v)

        def train(model, loader, opt):
            meter = MeterBuffer()
            for x in loader:
                loss = model(x.cuda(non_blocking=True))
                loss.backward()
                opt.step()
                meter.update(loss=loss)
        """,
    ),
    "the loss divided inside the same-file helper whose returned tuple the loop unpacks (HL016; DPR, Y)": (
        "HL016",
        """
        def fwd_pass(model, batch, cfg):
            loss = model(batch)
            correct = (loss > 0).sum()
            if cfg.accum > 1:
                loss = loss / cfg.accum
            return loss, correct

        def train(model, loader, opt, cfg):
            for i, batch in enumerate(loader):
                loss, correct = fwd_pass(model, batch, cfg)
                loss.backward()
                if (i + 1) % cfg.accum == 0:
                    opt.step()
                    opt.zero_grad()
        """,
    ),
    "the keys of a batch dict compared with a string (HL005; CenterNet, Y)": (
        "HL005",
        """
        def train(model, loader, opt):
            for batch in loader:
                for k in batch:
                    if k != "meta":
                        batch[k] = batch[k].cuda(non_blocking=True)
                model(batch).backward()
                opt.step()
        """,
    ),
    "a list of slices turned into a NumPy array before torch.tensor (HL003; ParallelWaveGAN, Y)": (
        "HL003",
        """
        import numpy as np

        def collate(xs, starts):
            y_batch = [x[s:s + 10] for x, s in zip(xs, starts)]
            y_batch = np.array(y_batch)
            return torch.tensor(y_batch, dtype=torch.float)

        def train(model, loader, opt):
            for xs, starts in loader:
                model(collate(xs, starts).cuda(non_blocking=True)).backward()
                opt.step()
        """,
    ),
    "a scheduler name bound to a per-step cosine or to ReduceLROnPlateau by a flag (HL014; Transformer-XL, Z)": (
        "HL014",
        """
        def train(model, loader, optimizer, args):
            if args.scheduler == "cosine":
                scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.max_step)
            elif args.scheduler == "dev_perf":
                scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            for step, (x, y) in enumerate(loader):
                model(x.cuda(non_blocking=True)).backward()
                optimizer.step()
                if args.scheduler == "cosine":
                    scheduler.step(step)
        """,
    ),
    "a validation loop whose forward is under no_grad and whose criterion is not (HL018; DeepLab)": (
        "HL018",
        """
        class Trainer:
            def validation(self, epoch):
                self.model.eval()
                for i, sample in enumerate(self.val_loader):
                    image, target = sample["image"].cuda(), sample["label"].cuda()
                    with torch.no_grad():
                        output = self.model(image)
                    loss = self.criterion(output, target)
        """,
    ),
    "the same loss read only in the else branch where it is the Python 0. (HL001; Wav2Lip)": (
        "HL001",
        SYNC_LOSS_BY_FLAG + "            pass\n        else:\n            running += float(sync_loss)\n",
    ),
    "a unit test method looping over a model's outputs (HL018; fairseq's tests)": (
        "HL018",
        """
        import unittest

        class TestModels(unittest.TestCase):
            def test_expected_alignment(self):
                model = self.build_model()
                for src in self.samples:
                    out = model(src)
                    self.assertEqual(out.shape[0], 1)
        """,
    ),
    "appending `loss.data[0]` (a number in PyTorch 0.3, a detached view after) keeps no graph (HL019; wgan-gp)": (
        "HL019",
        """
        def train(model, loader, opt, losses):
            for x in loader:
                d_loss = model(x.cuda(non_blocking=True)).mean()
                d_loss.backward()
                opt.step()
                losses.append(d_loss.data[0])
        """,
    ),
    "`.cuda()` of a tensor computed from ones moved under `if self.use_cuda:` copies nothing (HL012; wgan-gp)": (
        "HL012",
        """
        class Trainer:
            def _penalty(self, real, fake):
                alpha = torch.rand(real.size(0), 1)
                if self.use_cuda:
                    alpha = alpha.cuda(non_blocking=True)
                mixed = alpha * real.data + (1 - alpha) * fake.data
                mixed = Variable(mixed, requires_grad=True)
                if self.use_cuda:
                    mixed = mixed.cuda()
                return self.D(mixed).mean()

            def train(self, loader):
                for real, fake in loader:
                    loss = self._penalty(real, fake)
                    loss.backward()
                    self.opt.step()
        """,
    ),
    "`torch.cat([...])` of tensors already moved, moved again (HL012; Time-Series-Library)": (
        "HL012",
        """
        def train(model, loader, opt, device, label_len):
            for batch_x, batch_y in loader:
                batch_x = batch_x.float().to(device, non_blocking=True)
                batch_y = batch_y.float().to(device, non_blocking=True)
                dec_inp = torch.zeros_like(batch_y[:, -4:, :]).float()
                dec_inp = torch.cat([batch_y[:, :label_len, :], dec_inp], dim=1).float().to(device)
                loss = model(batch_x, dec_inp).mean()
                loss.backward()
                opt.step()
        """,
    ),
    "the script's own `def train(config)` is not the agent's `trainer.train(batch)` method (HL012; CORL, AC)": (
        "HL012",
        """
        class Learner:
            def train(self, batch):
                loss = self.q(batch).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()

        def train(config, buffer):
            q_network = TwinQ(4, 2).to(config.device)
            trainer = Learner(q_network)
            for t in range(config.max_timesteps):
                batch = buffer.sample(256)
                trainer.train(batch)
        """,
    ),
    "a checkpoint named by the RL time step `t` is a new file each save (HL021; CORL, AC)": (
        "HL021",
        """
        def train(config, trainer, buffer):
            for t in range(config.max_timesteps):
                loss = trainer.loss(buffer.sample(256))
                loss.backward()
                trainer.opt.step()
                if (t + 1) % config.eval_freq == 0:
                    torch.save(trainer.state_dict(), os.path.join(config.checkpoints_path, f"checkpoint_{t}.pt"))
        """,
    ),
    "`save_pretrained(dir_named_by_step, max_shard_size='100GB')` writes a new directory (HL021; GaLore, AC)": (
        "HL021",
        """
        def train(args, model, loader, optimizer):
            update_step = 0
            for batch in loader:
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                update_step += 1
                if update_step % args.save_every == 0:
                    current_model_directory = f"{args.save_dir}/model_{update_step}"
                    model.module.save_pretrained(current_model_directory, max_shard_size="100GB")
        """,
    ),
    "a loss weight kept by `__init__` from a number parameter is a Python number (HL005; torchreid, AC)": (
        "HL005",
        """
        class Engine:
            def __init__(self, model, optimizer, weight_t=1.0, use_pix=True):
                self.weight_t = weight_t
                self.cri_pix = build_loss().to("cuda") if use_pix else None
                self.model, self.optimizer = model, optimizer

            def train_step(self, imgs):
                out = self.model(imgs.cuda(non_blocking=True))
                loss = 0
                if self.weight_t > 0:
                    loss = loss + self.weight_t * out.mean()
                if self.cri_pix:
                    loss = loss + self.cri_pix(out)
                loss.backward()
                self.optimizer.step()
        """,
    ),
    "the dicts a model function returns beside its loss hold numbers (HL002; OpenPCDet, gmflow)": (
        "HL002",
        """
        def train_one_epoch(model, optimizer, loader, model_func, tbar):
            model.cuda()
            scaler = torch.cuda.amp.GradScaler()
            for batch in loader:
                loss, tb_dict, disp_dict = model_func(model, batch)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                tbar.set_postfix(disp_dict)
        """,
    ),
    "a save switched off by hand with `if False and ...` is dead code (HL021; OpenPCDet, AD)": (
        "HL021",
        """
        def train(model, loader, optimizer, ckpt_dir):
            for batch in loader:
                loss = model(batch.cuda(non_blocking=True)).mean()
                loss.backward()
                optimizer.step()
                if False and ckpt_dir is not None:
                    torch.save(model.state_dict(), ckpt_dir + "/latest_model.pth")
        """,
    ),
    "a checkpoint named by the RL episode is a new file each save (HL021; PlaNet, AD)": (
        "HL021",
        """
        def main(args, model, env, optimizer):
            for episode in range(args.episodes):
                loss = model(env.sample().cuda(non_blocking=True)).mean()
                loss.backward()
                optimizer.step()
                if episode % args.checkpoint_interval == 0:
                    torch.save({"model": model.state_dict()}, os.path.join(args.results, "models_%d.pth" % episode))
        """,
    ),
    "a loader over an iteration-based batch sampler is one pass: no persistent workers needed (HL011; AD)": (
        "HL011",
        """
        class Trainer:
            def __init__(self, args, train_dataset, train_sampler):
                train_batch_sampler = make_batch_data_sampler(train_sampler, args.batch_size, args.max_iters)
                self.train_loader = DataLoader(train_dataset, batch_sampler=train_batch_sampler,
                                               num_workers=4, pin_memory=True)

            def train(self):
                self.model.cuda()
                for iteration, (images, targets) in enumerate(self.train_loader):
                    loss = self.model(images.cuda(non_blocking=True)).mean()
                    loss.backward()
                    self.optimizer.step()
        """,
    ),
    "`x['mse'].item() if hasattr(x['mse'], 'item') else x['mse']` is a Python number after (HL002; world-models)": (
        "HL002",
        """
        def get_loss(model, x, include_reward):
            mse = model.reward_loss(x) if include_reward else 0
            return dict(mse=mse, loss=model(x).mean() + mse)

        def data_pass(model, loader, optimizer, pbar):
            cum_mse = 0
            for i, x in enumerate(loader):
                losses = get_loss(model, x.cuda(non_blocking=True), True)
                losses["loss"].backward()
                optimizer.step()
                cum_mse += losses["mse"].item() if hasattr(losses["mse"], "item") else losses["mse"]
                pbar.set_postfix_str("mse={mse:10.6f}".format(mse=cum_mse / (i + 1)))
        """,
    ),
    "sample images saved as 'latest' are no checkpoint (HL021; review)": (
        "HL021",
        """
        def train(model, loader, optimizer, visualizer):
            for step, x in enumerate(loader):
                fake = model(x.cuda(non_blocking=True))
                fake.mean().backward()
                optimizer.step()
                if step % 100 == 0:
                    visualizer.save_images(fake, "latest")
        """,
    ),
    "a print gate whose period defaults to 50 is a boundary (HL001)": (
        "HL001",
        PRINT_GATE.format(period=50),
    ),
    "`.data[0]` of a batch is its first row, not a read (HL001)": (
        "HL001",
        """
        def train(model, loader, opt, firsts):
            for images in loader:
                out = model(images.cuda(non_blocking=True))
                out.mean().backward()
                opt.step()
                firsts.append(out.data[0])
        """,
    ),
    "a test batch every 10 steps evaluated under no_grad (HL018)": (
        "HL018",
        TEST_BATCH_EVERY_10 + "                with torch.no_grad():\n"
        "                    pred = classifier(data[0].cuda(non_blocking=True))\n",
    ),
}

REPORTED = {
    "PyTorch-GAN's `imgs.type(Tensor)` with `Tensor = torch.cuda.FloatTensor if cuda else ...` (HL012)": (
        "HL012",
        GAN_TENSOR.format(real="imgs.type(Tensor)", z="Tensor(imgs.size(0), 100).normal_()"),
    ),
    "PyTorch-GAN's `Tensor(np.random.normal(...))`: host noise copied every step (HL024)": (
        "HL024",
        GAN_TENSOR.format(real="imgs.cuda(non_blocking=True)", z="Tensor(np.random.normal(0, 1, (64, 100)))"),
    ),
    "a test batch every 10 steps inside the training loop, run without no_grad (HL018; PointNet, Z)": (
        "HL018",
        TEST_BATCH_EVERY_10 + "                pred = classifier(data[0].cuda(non_blocking=True))\n",
    ),
    "a loss set to 0. in the else of a config test, read under the same test (HL001; Wav2Lip, Z)": (
        "HL001",
        SYNC_LOSS_BY_FLAG + "            running += sync_loss.item()\n",
    ),
    "`loss.data[0]`, PyTorch 0.3's `.item()`, every step (HL001; ssd.pytorch)": (
        "HL001",
        """
        def train(net, loader, opt, criterion):
            loc_loss = 0
            for images, targets in loader:
                loss_l = criterion(net(images.cuda(non_blocking=True)), targets)
                loss_l.backward()
                opt.step()
                loc_loss += loss_l.data[0]
        """,
    ),
    "a host image moved every step on the path where another flag did not move them all (HL012; NeRF)": (
        "HL012",
        """
        def train(model, images, opt, device, use_batching, i_train):
            if use_batching:
                images = torch.Tensor(images).to(device)
            for i in range(1000):
                if use_batching:
                    target = images[i]
                else:
                    img_i = np.random.choice(i_train)
                    target = images[img_i]
                    target = torch.Tensor(target).to(device)
                loss = model(target).mean()
                loss.backward()
                opt.step()
        """,
    ),
    "a replay buffer's device tensors, made in `__init__`, indexed with a NumPy index array (HL024; CORL, AC)": (
        "HL024",
        """
        class ReplayBuffer:
            def __init__(self, n, d, device="cpu"):
                self._states = torch.zeros((n, d), dtype=torch.float32, device=device)
                self._size = 0

            def sample(self, batch_size):
                indices = np.random.randint(0, self._size, size=batch_size)
                return self._states[indices]

        def train(data, model, opt, device):
            model.to(device)
            buffer = ReplayBuffer(100000, 17, device=device)
            for t in range(1000):
                batch = buffer.sample(256)
                loss = model(batch).mean()
                loss.backward()
                opt.step()
        """,
    ),
    "`model.module.save('latest')` in the training loop overwrites the latest checkpoint (HL021; pix2pixHD)": (
        "HL021",
        """
        def train(model, loader, opt, save_latest_freq):
            total_steps = 0
            for data in loader:
                loss = model(data["label"].cuda(non_blocking=True)).mean()
                loss.backward()
                opt.step()
                total_steps += 1
                if total_steps % save_latest_freq == 0:
                    model.module.save("latest")
        """,
    ),
    "`misc.save_model(..., epoch=epoch, epoch_name='last')`: a fixed name (HL021; MAR)": (
        "HL021",
        """
        import util.misc as misc

        def main(args, model, loader, optimizer):
            for epoch in range(args.epochs):
                for x in loader:
                    loss = model(x.cuda(non_blocking=True))
                    loss.backward()
                    optimizer.step()
                if epoch % args.save_last_freq == 0:
                    misc.save_model(args=args, model=model, optimizer=optimizer, epoch=epoch, epoch_name="last")
        """,
    ),
    "CUDA mixed precision with the batch moved inside a model function: rank 0's `.item()` (HL001; OpenPCDet)": (
        "HL001",
        """
        def train_one_epoch(model, optimizer, loader, model_func, rank, use_amp):
            scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
            for batch in loader:
                with torch.cuda.amp.autocast(enabled=use_amp):
                    loss, tb_dict, disp_dict = model_func(model, batch)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                if rank == 0:
                    disp_dict.update({"loss": loss.item()})
        """,
    ),
    "`torch.bincount` on the device reads its maximum on the host to size its output (HL006; MTAN, AD)": (
        "HL006",
        """
        def train(model, loader, opt, n):
            mat = torch.zeros(n, n, device="cuda")
            for x, target in loader:
                pred = model(x.cuda(non_blocking=True))
                loss = pred.mean()
                loss.backward()
                opt.step()
                inds = n * target.cuda(non_blocking=True) + pred.argmax(1)
                mat += torch.bincount(inds.flatten(), minlength=n**2).reshape(n, n)
        """,
    ),
    "indexing with a mask made by `&` of two comparisons (HL006; MTAN's confusion matrix, AD)": (
        "HL006",
        """
        def train(model, loader, opt, n):
            for x, target in loader:
                pred = model(x.cuda(non_blocking=True)).argmax(1)
                target = target.cuda(non_blocking=True)
                k = (target >= 0) & (target < n)
                inds = n * target[k] + pred[k]
                loss = model.loss(inds)
                loss.backward()
                opt.step()
        """,
    ),
    "`masked_select` of a parameter whose name says nothing is still a tensor method (HL006; MTAN, AD)": (
        "HL006",
        """
        def depth_error(x_pred, x_output):
            mask = (torch.sum(x_output, dim=1) != 0).unsqueeze(1)
            return x_output.masked_select(mask).mean()

        def train(model, loader, opt, dataset):
            for sample in loader:
                out = model(sample["image"].cuda(non_blocking=True))
                loss = out.mean()
                loss.backward()
                opt.step()
                err = depth_error(out, dataset.depth_for(sample))
        """,
    ),
    "`.item()` of the losses a helper returns as `dict(loss=..., gmm=...)` (HL001; world-models, AE)": (
        "HL001",
        """
        def get_loss(model, x):
            gmm = model(x).mean()
            return dict(gmm=gmm, loss=gmm * 2)

        def data_pass(model, loader, optimizer):
            cum_loss = 0
            for x in loader:
                losses = get_loss(model, x.cuda(non_blocking=True))
                optimizer.zero_grad()
                losses["loss"].backward()
                optimizer.step()
                cum_loss += losses["loss"].item()
        """,
    ),
    "a full reduction's `.data[0]` every critic step (HL001; wgan-gp, AB)": (
        "HL001",
        """
        def train(D, loader, opt, norms):
            for real in loader:
                gradients = D.grads(real.cuda(non_blocking=True))
                norms.append(gradients.norm(2, dim=1).mean().data[0])
                D(real).mean().backward()
                opt.step()
        """,
    ),
    "a step helper whose name only contains `eval`/`test`/`log` as part of a word still steps (HL001; review)": (
        "HL001",
        """
        import steps

        def train(model, loader, optimizer):
            for x in loader:
                loss = model(x.cuda(non_blocking=True)).mean()
                steps.train_retrieval(loss, optimizer)
                print(loss.item())
        """,
    ),
    "a disparity map unpacked beside the loss is a tensor (HL005; review)": (
        "HL005",
        """
        def train(model, loader, optimizer):
            for imgL, imgR in loader:
                loss, pred_disp = model(imgL.cuda(non_blocking=True), imgR.cuda(non_blocking=True))
                loss.backward()
                optimizer.step()
                if pred_disp.max() > 192:
                    print("large")
        """,
    ),
    "a subscript of a device tensor in a conditional expression stays a tensor (HL005; review)": (
        "HL005",
        """
        def train(model, loader, optimizer):
            w = torch.ones(10, device="cuda")
            for i, x in enumerate(loader):
                s = w[i] if i < 10 else 1.0
                if s > 0.5:
                    loss = model(x.cuda(non_blocking=True)).mean()
                    loss.backward()
                    optimizer.step()
        """,
    ),
    "a sampler sized by `num_iters_per_epoch` is iterated every epoch (HL011; review)": (
        "HL011",
        """
        def main(args, ds, model, optimizer):
            model.cuda()
            sampler = RandomSampler(ds, replacement=True, num_samples=args.num_iters_per_epoch * 32)
            loader = DataLoader(ds, batch_size=32, sampler=sampler, num_workers=4, pin_memory=True)
            for epoch in range(args.epochs):
                for x in loader:
                    loss = model(x.cuda(non_blocking=True)).mean()
                    loss.backward()
                    optimizer.step()
        """,
    ),
    "images moved once for a graph, then rebound by the loop, are copied blocking every step (HL012; review)": (
        "HL012",
        """
        def train(model, loader, optimizer, writer, images, use_cuda):
            if use_cuda:
                images = images.cuda()
            writer.add_graph(model, images)
            for images, labels in loader:
                loss = model(images.cuda()).mean()
                loss.backward()
                optimizer.step()
        """,
    ),
    "a buffer's device tensor that is None without rewards is still a device tensor (HL024; review)": (
        "HL024",
        """
        class Buffer:
            def __init__(self, n, device, with_rewards=True):
                self._r = torch.zeros(n, device=device) if with_rewards else None

            def sample(self, b):
                idx = np.random.randint(0, 10, size=b)
                return self._r[idx]

        def train(model, opt, device):
            model.to(device)
            buf = Buffer(100, device)
            for t in range(10):
                loss = model(buf.sample(4)).mean()
                loss.backward()
                opt.step()
        """,
    ),
    "appending `model.data_loss` keeps its graph: the name has no `.data` attribute in it (HL019; review)": (
        "HL019",
        """
        def train(model, loader, opt, hist):
            for x in loader:
                model(x.cuda(non_blocking=True))
                model.data_loss.backward()
                opt.step()
                hist.append(model.data_loss)
        """,
    ),
    "a print gate whose period defaults to 1 opens every step (HL001; MusicTransformer, AE)": (
        "HL001",
        PRINT_GATE.format(period=1),
    ),
    "a penalty's and a full reduction's `.data[0]` every critic step (HL001; wgan-gp, AB)": (
        "HL001",
        """
        def critic_step(D, real, fake, opt, penalty_fn, losses, norms):
            gradient_penalty = penalty_fn(D, real, fake)
            losses.append(gradient_penalty.data[0])
            norms.append(D.grads(real).norm(2, dim=1).mean().data[0])
            d_loss = D(fake).mean() - D(real).mean() + gradient_penalty
            d_loss.backward()
            opt.step()

        def train(D, loader, opt, penalty_fn, losses, norms):
            for real, fake in loader:
                critic_step(D, real.cuda(non_blocking=True), fake, opt, penalty_fn, losses, norms)
        """,
    ),
    "a final test loop running `classifier(points)` without no_grad (HL018; PointNet, Z)": (
        "HL018",
        """
        def main(classifier, dataloader, testdataloader, optimizer, epochs):
            for epoch in range(epochs):
                for points, target in dataloader:
                    loss = F.nll_loss(classifier(points.cuda(non_blocking=True)), target.cuda(non_blocking=True))
                    loss.backward()
                    optimizer.step()
            for i, (points, target) in enumerate(testdataloader):
                classifier = classifier.eval()
                pred = classifier(points.cuda(non_blocking=True))
        """,
    ),
    "a validation loop whose no_grad covers only the copies, not the forward (HL018; Continual-Learning, Z)": (
        "HL018",
        """
        class Agent:
            def predict(self, inputs):
                self.model.eval()
                return self.model.forward(inputs)

            def validation(self, dataloader):
                self.eval()
                for i, (input, target) in enumerate(dataloader):
                    with torch.no_grad():
                        input = input.cuda()
                    output = self.predict(input)
        """,
    ),
    "a nested constant list made into a device tensor every step (HL024; YOLOv3/v5 losses)": (
        "HL024",
        """
        def train(model, loader, opt, device):
            for x, y in loader:
                p = model(x.to(device, non_blocking=True))
                off = torch.tensor([[0, 0], [1, 0], [0, 1]], device=device).float()
                (p.sum() * off.sum()).backward()
                opt.step()
        """,
    ),
    "a shape slice made into a device tensor every step (HL024; YOLOv9 loss)": (
        "HL024",
        """
        def train(model, loader, opt, device):
            for x, y in loader:
                p = model(x.to(device, non_blocking=True))
                size = torch.tensor(p.shape[2:], device=device)
                (p.sum() * size.sum()).backward()
                opt.step()
        """,
    ),
    "checkpoints saved beside sample images named by the epoch are still in place (HL021; dome272, Y)": (
        "HL021",
        """
        def train(model, ema_model, loader, opt, epochs, save_images, run):
            for epoch in range(epochs):
                for x in loader:
                    model(x.cuda(non_blocking=True)).mean().backward()
                    opt.step()
                if epoch % 10 == 0:
                    save_images(ema_model(None), f"results/{run}/{epoch}_ema.jpg")
                    torch.save(model.state_dict(), f"models/{run}/ckpt.pt")
        """,
    ),
    "a helper saving to best_model.pt or to a per-step name, its dict made by a method (HL021; pSp, Y)": (
        "HL021",
        """
        import os

        class Coach:
            def train(self):
                for batch in self.loader:
                    self.net(batch.cuda(non_blocking=True)).mean().backward()
                    self.optimizer.step()
                    self.global_step += 1
                    if self.global_step % self.save_interval == 0:
                        self.checkpoint_me(self.is_best)

            def checkpoint_me(self, is_best):
                save_name = "best_model.pt" if is_best else f"iteration_{self.global_step}.pt"
                save_dict = self.__get_save_dict()
                torch.save(save_dict, os.path.join(self.checkpoint_dir, save_name))

            def __get_save_dict(self):
                return {"state_dict": self.net.state_dict(), "opts": vars(self.opts)}
        """,
    ),
    "a resume skip naming `last_epoch` is no log gate: what follows it runs every step (HL001; W)": (
        "HL001",
        """
        def train(model, loader, opt, step, last_epoch, per_epoch):
            for it, (x, y) in enumerate(loader):
                if it < step - last_epoch * per_epoch:
                    continue
                loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
                loss.backward()
                opt.step()
                print(loss.item())
        """,
    ),
    "what follows a size-divisibility `continue` runs every step (HL007; W)": (
        "HL007",
        """
        def train(model, loader, opt, world):
            for j, (x, y) in enumerate(loader):
                if world > 1 and x.size(0) % world != 0:
                    continue
                loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
                L = loss.detach().cpu().numpy()
                loss.backward()
                opt.step()
        """,
    ),
    "a step method with zero_grad and an optimizer step but no backward of its own is hot (HL001; X)": (
        "HL001",
        """
        class Trainer:
            def gen_update(self, x):
                self.gen_opt.zero_grad()
                acc = self.model(x.cuda(non_blocking=True), "gen_update")
                self.gen_opt.step()
                return acc.mean().item()
        """,
    ),
    "a script whose torch comes through a star import of the project (HL001)": (
        "HL001",
        """
        from modeling.deeplab import *
        def training(model, loader, optimizer, criterion):
            for i, sample in enumerate(loader):
                image, target = sample["image"].cuda(), sample["label"].cuda()
                loss = criterion(model(image), target)
                loss.backward()
                optimizer.step()
                train_loss = loss.item()
        """,
    ),
    "a shared loop whose `is_validate=True` calls evaluate without no_grad (HL018)": (
        "HL018",
        """
        def train(model, loader, opt, is_validate=False):
            if is_validate:
                model.eval()
            else:
                model.train()
            for x, y in loader:
                loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
                if not is_validate:
                    loss.backward()
                    opt.step()

        def main(model, train_loader, val_loader, opt, epochs):
            for epoch in range(epochs):
                train(model, train_loader, opt)
                train(model, val_loader, opt, is_validate=True)
        """,
    ),
    "a same-file loss module's forward, called through its instance, copies host-made zeros (HL012)": (
        "HL012",
        """
        class YoloLoss(torch.nn.Module):
            def __init__(self, device):
                super().__init__()
                self.device = device

            def build_target(self, pred, labels):
                target = torch.zeros(pred.size(0), 85).to(self.device)
                return target

            def forward(self, pred, labels):
                return ((pred - self.build_target(pred, labels)) ** 2).mean()

        def train(model, loader, opt, device):
            criterion = YoloLoss(device)
            for x, y in loader:
                loss = criterion(model(x.to(device, non_blocking=True)), y)
                loss.backward()
                opt.step()
        """,
    ),
    "a NumPy `np.r_` index into a device tensor, read and written every step (HL024)": (
        "HL024",
        """
        import numpy as np
        def train(model, loader, opt):
            for x, y in loader:
                out = model(x.cuda(non_blocking=True))
                out[..., np.r_[0:4, 5:10]] *= 2.0
                out.mean().backward()
                opt.step()
        """,
    ),
    "`if bool(loss == 0): continue` branches on the device loss (HL005)": (
        "HL005",
        """
        def train(model, loader, opt):
            for x, y in loader:
                loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
                if bool(loss == 0):
                    continue
                loss.backward()
                opt.step()
        """,
    ),
    "`.cpu()` of a tensor moved with `.to(self.device)` (HL007)": (
        "HL007",
        """
        class Trainer:
            def step(self, model, x, opt):
                box = torch.zeros(4, 4).to(self.device)
                box[:, 0] = model(x).detach()[:4, 0]
                anchors = box.cpu()
                model(x).mean().backward()
                opt.step()
                return anchors

            def fit(self, model, loader, opt):
                for x in loader:
                    self.step(model, x.cuda(non_blocking=True), opt)
        """,
    ),
    "a best-model save named from the total epoch count, not the epoch (HL021)": (
        "HL021",
        """
        def train(model, loader, opt):
            for x in loader:
                model(x.cuda(non_blocking=True)).mean().backward()
                opt.step()

        def main(model, loader, opt, epochs, evaluate):
            name = "{}_{}".format(128, epochs)
            best = 0.0
            for epoch in range(1, epochs + 1):
                train(model, loader, opt)
                acc = evaluate(model)
                if acc > best:
                    best = acc
                    torch.save(model.state_dict(), "results/{}_model.pth".format(name))
        """,
    ),
    "a save_checkpoint() helper called from the loop writes in place (HL021)": (
        "HL021",
        """
        def save_checkpoint(state, filename="checkpoint.pth.tar"):
            torch.save(state, filename)
        def train(model, loader, opt, epochs, device):
            for epoch in range(epochs):
                for x, y in loader:
                    model(x.to(device, non_blocking=True)).sum().backward()
                    opt.step()
                save_checkpoint({"model": model.state_dict()})
        """,
    ),
    "a get_grad_norm() helper reads every parameter at every update (HL001)": (
        "HL001",
        """
        def get_grad_norm(model):
            total = 0.0
            for p in model.parameters():
                total += p.grad.norm().item() ** 2
            return total ** 0.5
        def train(model, loader, opt, device):
            for x, y in loader:
                model(x.to(device, non_blocking=True)).sum().backward()
                norm = get_grad_norm(model)
                opt.step()
        """,
    ),
    "synchronize through an alias (HL020)": (
        "HL020",
        """
        synchronize = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        def train(model, loader, opt):
            for x, y in loader:
                synchronize()
                model(x).sum().backward()
                opt.step()
        """,
    ),
    "a read under the accumulation gate runs every update (HL001)": (
        "HL001",
        """
        def train(model, loader, opt, accum, device):
            for step, (x, y) in enumerate(loader):
                loss = model(x.to(device, non_blocking=True), y) / accum
                loss.backward()
                if (step + 1) % accum == 0:
                    opt.step()
                    opt.zero_grad()
                    print(loss.item())
        """,
    ),
    "indexing a device tensor with a Python list every step (HL024)": (
        "HL024",
        """
        KEEP = [0, 2, 5]
        def train(model, loader, opt, device):
            for x, y in loader:
                x = x.to(device, non_blocking=True)
                out = model(x)
                loss = out[:, KEEP].sum()
                loss.backward()
                opt.step()
        """,
    ),
    "accumulation under no_backward_sync without dividing the loss (HL016)": (
        "HL016",
        """
        def train(fabric, model, loader, opt, n):
            for i, (x, y) in enumerate(loader):
                is_accumulating = (i + 1) % n != 0
                with fabric.no_backward_sync(model, enabled=is_accumulating):
                    loss = F.cross_entropy(model(x), y)
                    fabric.backward(loss)
                if not is_accumulating:
                    opt.step()
                    opt.zero_grad()
        """,
    ),
    "a shared loop run with train=False never calls eval() (HL018)": (
        "HL018",
        """
        class Trainer:
            def _run_batch(self, x, y, train):
                with torch.set_grad_enabled(train):
                    loss = self.model(x, y)
                if train:
                    loss.backward()
                    self.optimizer.step()
            def _run_epoch(self, loader, train=True):
                for x, y in loader:
                    self._run_batch(x, y, train)
            def fit(self):
                for epoch in range(3):
                    self._run_epoch(self.train_loader, train=True)
                    self._run_epoch(self.test_loader, train=False)
        """,
    ),
    "a device check is no opt-in: timing every step with synchronize (HL020)": (
        "HL020",
        """
        import time
        def train(model, loader, opt, device):
            for x, y in loader:
                t0 = time.time()
                model(x.to(device, non_blocking=True)).sum().backward()
                opt.step()
                if device == "cuda":
                    torch.cuda.synchronize()
                dt = time.time() - t0
        """,
    ),
    "a loss scaler that steps the optimizer makes the loop a training loop (HL001)": (
        "HL001",
        """
        def train_one_epoch(model, loader, optimizer, loss_scaler, device):
            for step, (x, y) in enumerate(loader):
                loss = model(x.to(device, non_blocking=True), y)
                loss_value = loss.item()
                loss_scaler(loss, optimizer, parameters=model.parameters())
        """,
    ),
    "save_on_master straight over checkpoint.pth every epoch (HL021)": (
        "HL021",
        """
        import os, utils
        def fit(model, loader, opt, args, device):
            for epoch in range(args.epochs):
                for x, y in loader:
                    model(x.to(device, non_blocking=True)).sum().backward()
                    opt.step()
                utils.save_on_master({"model": model.state_dict()}, os.path.join(args.out, "checkpoint.pth"))
        """,
    ),
    "a callback a trainer calls every batch saves in place (HL021)": (
        "HL021",
        """
        def batch_end_callback(trainer):
            if trainer.iter_num % 500 == 0:
                torch.save(trainer.model.state_dict(), "model.pt")
        trainer.set_callback("on_batch_end", batch_end_callback)
        """,
    ),
    "a logger's update() handed device tensors reads each (HL002)": (
        "HL002",
        """
        def train(model, criterion, loader, opt, metric_logger, device):
            for x, y in loader:
                loss_dict = criterion(model(x.to(device, non_blocking=True)), y)
                losses = sum(loss_dict.values())
                losses.backward()
                opt.step()
                metric_logger.update(loss=losses, **loss_dict)
        """,
    ),
    "%-formatting a tensor for a progress bar every step (HL002)": (
        "HL002",
        """
        def train(model, loader, opt, pbar, device):
            mloss = torch.zeros(3, device=device)
            for i, (x, y) in enumerate(loader):
                loss, items = model(x.to(device, non_blocking=True), y)
                loss.backward()
                opt.step()
                mloss = (mloss * i + items) / (i + 1)
                pbar.set_description(("%10s" + "%10.4g" * 3) % (f"{i}", *mloss))
        """,
    ),
    "a Dataset copying each sample to the GPU in __getitem__ (HL012)": (
        "HL012",
        """
        class Samples(torch.utils.data.Dataset):
            def __init__(self, data, device):
                self.data, self.device = data, device
            def __getitem__(self, i):
                return self.data[i].to(self.device)
        """,
    ),
    "any() over per-parameter finiteness reads one value per parameter (HL005)": (
        "HL005",
        """
        def train(model, loader, opt, device):
            for x, y in loader:
                model(x.to(device, non_blocking=True)).sum().backward()
                if any(not torch.isfinite(p.grad).all() for p in model.parameters()):
                    continue
                opt.step()
        """,
    ),
    "a step reached through helpers makes the caller's loop hot (HL001)": (
        "HL001",
        """
        class Loop:
            def run_loop(self):
                while self.step < 1000:
                    self.run_step(next(self.data))
            def run_step(self, batch):
                self.forward_backward(batch)
                self.optimize()
            def forward_backward(self, batch):
                loss = self.model(batch.to(self.device, non_blocking=True))
                loss.backward()
                self.last = loss.item()
            def optimize(self):
                self.opt.step()
        """,
    ),
    "multiplying by the loss scale is not dividing by the accumulation (HL016)": (
        "HL016",
        """
        def train(model, loader, opt, micro, loss_scale, device):
            for step, batch in enumerate(loader):
                for i in range(0, len(batch), micro):
                    loss = model(batch[i:i + micro].to(device, non_blocking=True)).mean()
                    (loss * loss_scale).backward()
                opt.step()
        """,
    ),
    "zero_grad(set_to_none=args.flag) whose store_true flag defaults to False (HL013)": (
        "HL013",
        """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--set_grads_to_none", action="store_true")
        args = parser.parse_args()
        def train(model, loader, opt, device):
            for x in loader:
                model(x.to(device, non_blocking=True)).sum().backward()
                opt.step()
                opt.zero_grad(set_to_none=args.set_grads_to_none)
        """,
    ),
    "a return inside a helper called every step does not make its branch run once (HL024)": (
        "HL024",
        """
        class T:
            def forward_backward(self, batch):
                if self.last_stage:
                    loss = self.model(batch.to(self.device, non_blocking=True)).sum()
                    loss.backward()
                    return loss
                return torch.tensor([-1.0], device=self.device)
            def fit(self, loader):
                for batch in loader:
                    self.forward_backward(batch)
                    self.optimizer.step()
        """,
    ),
    "a writer that exists is no log gate: its update reads every step (HL002)": (
        "HL002",
        """
        def train(model, loader, opt, log_writer, mixup, device):
            for x, y in loader:
                out = model(x.to(device, non_blocking=True))
                loss = F.cross_entropy(out, y)
                loss.backward()
                opt.step()
                if mixup is None:
                    class_acc = (out.argmax(-1) == y).float().mean()
                else:
                    class_acc = None
                if log_writer is not None:
                    log_writer.update(class_acc=class_acc, head="loss")
        """,
    ),
    "a lambda's parameter is not the outer variable of the same name (HL012)": (
        "HL012",
        """
        import time
        def train(model, loader, opt):
            for text, images in loader:
                t = time.time()
                text, images = map(lambda t: t.cuda(), (text, images))
                model(text, images).backward()
                opt.step()
        """,
    ),
    "set_epoch only when distributed, the sampler built always (HL015)": (
        "HL015",
        """
        def main(args, ds):
            sampler = DistributedSampler(ds, shuffle=True)
            loader = DataLoader(ds, sampler=sampler)
            for epoch in range(args.epochs):
                if args.distributed:
                    loader.sampler.set_epoch(epoch)
                train_one_epoch(loader)
        """,
    ),
    "a save helper from another file given only a fixed name (HL021)": (
        "HL021",
        """
        import utils
        def main(model, loader, opt, args, device):
            best = 0.0
            for epoch in range(args.epochs):
                for x, y in loader:
                    model(x.to(device, non_blocking=True)).sum().backward()
                    opt.step()
                acc = evaluate(model)
                if acc > best:
                    utils.save_model(args=args, model=model, optimizer=opt, epoch="best")
        """,
    ),
    "micro-batches summed per optimizer step without dividing (HL016)": (
        "HL016",
        """
        def learn(model, loader, opt, accelerator, num_mb):
            for minibatch in loader:
                for microbatch in minibatch:
                    loss = model(microbatch)
                    accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
        """,
    ),
    "a best checkpoint saved in place through save_state (HL021)": (
        "HL021",
        """
        import os
        class T:
            def save(self, directory):
                self.accelerator.save_state(directory)
            def learn(self, loader):
                best = -1.0
                for epoch in range(10):
                    for batch in loader:
                        self.accelerator.backward(self.model(batch))
                        self.opt.step()
                    reward = self.evaluate()
                    if reward > best:
                        self.save(os.path.join(self.ckpt_dir, "best_checkpoint"))
        """,
    ),
    "multi-GPU code that moves data inside its model still syncs on an assert (HL005)": (
        "HL005",
        """
        from torch.nn.parallel import DistributedDataParallel
        def do_train(model, loader, opt, start, end):
            model = DistributedDataParallel(model, device_ids=[0])
            for data, iteration in zip(loader, range(start, end)):
                losses = sum(model(data).values())
                assert torch.isfinite(losses).all()
                losses.backward()
                opt.step()
        """,
    ),
    "a norm kept from clip_grad_norm_ after a 0. default, read every step (HL001)": (
        "HL001",
        """
        def train(model, loader, opt, clip):
            for x, y in loader:
                x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                model(x, y).backward()
                gnorm = 0.0
                if clip is not None:
                    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                opt.step()
                stats = float(gnorm)
        """,
    ),
    "an autograd Function's output read every step (HL001)": (
        "HL001",
        """
        def train(model, loader, opt):
            for batch in loader:
                batch = batch.cuda(non_blocking=True)
                model(batch).backward()
                opt.step()
                spread = float(AllGatherMean.apply(batch.var(dim=0).mean()))
        """,
    ),
    "a step loop over phases inside a loop that fetches the batch: copies are per step (HL012)": (
        "HL012",
        """
        def run(G, D, phases, loader, device):
            it = iter(loader)
            while True:
                imgs, labels = next(it)
                imgs = imgs.to(device)
                for phase in phases:
                    phase.loss(imgs).backward()
                    phase.opt.step()
        """,
    ),
    "a step handed to a timer makes its loop the training loop (HL001)": (
        "HL001",
        """
        def train(model, loader, opt, timer):
            for x in loader:
                x = x.cuda(non_blocking=True)
                def train_step():
                    loss = model(x)
                    loss.backward()
                    opt.step()
                    return loss
                _, ms = timer(train_step)
                width = float(Sync.apply(x.std()))
        """,
    ),
    "a side file the run reloads on restart, overwritten in place (HL021)": (
        "HL021",
        """
        def main(model, loader, opt, args):
            bank_path = args.out + "/bank.pth"
            bank = torch.load(bank_path)["bank"]
            for epoch in range(args.epochs):
                for x in loader:
                    model(x).backward()
                    opt.step()
                torch.save({"bank": bank}, bank_path)
        """,
    ),
    "a named mask, its inverse and .bool() index a device tensor every step (HL006)": (
        "HL006",
        """
        def nce(features, device):
            sim = features @ features.T
            mask = torch.eye(sim.shape[0], dtype=torch.bool).to(device)
            return sim[~mask].view(sim.shape[0], -1)

        def train(model, loader, opt, device):
            for x in loader:
                x = x.to(device, non_blocking=True)
                loss = nce(model(x), device).mean()
                loss.backward()
                opt.step()
        """,
    ),
    "a step closure returned by a factory reads every step, wherever it is called (HL001)": (
        "HL001",
        """
        def make_train_step(G, D, g_opt, d_opt, n_critic):
            def train(x):
                x = x.cuda(non_blocking=True)
                for _ in range(n_critic):
                    d_loss = D(G.sample()).mean() - D(x).mean()
                    d_loss.backward()
                    d_opt.step()
                g_loss = -D(G.sample()).mean()
                g_loss.backward()
                g_opt.step()
                return {"G": float(g_loss.item()), "D": float(d_loss.item())}
            return train
        """,
    ),
    "an RL script saving its actor-critic over the same file every save interval (HL021)": (
        "HL021",
        """
        import os
        def main(actor_critic, agent, rollouts, args, num_updates):
            actor_critic.cuda()
            for j in range(num_updates):
                loss = actor_critic(rollouts).mean()
                loss.backward()
                agent.optimizer.step()
                if j % args.save_interval == 0:
                    save_path = os.path.join(args.save_dir, args.algo)
                    torch.save([actor_critic, None], os.path.join(save_path, args.env_name + ".pt"))
        """,
    ),
    "math.isnan of a device grad norm every step (HL001)": (
        "HL001",
        """
        import math
        def train(model, loader, opt):
            for x, y in loader:
                x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                model(x, y).backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                overflow = math.isnan(grad_norm)
                opt.step()
        """,
    ),
    "num_workers passed positionally (HL011)": (
        "HL011",
        """
        device = "cuda"
        w = torch.zeros(1).to(device)
        loader = DataLoader(ds, 64, True, None, None, 4)
        for batch in loader:
            pass
        """,
    ),
}


@pytest.mark.parametrize("name", list(QUIET))
def test_false_alarms_stay_quiet(name):
    code, src = QUIET[name]
    assert all(c != code for _, c in codes(src)), (name, codes(src))


@pytest.mark.parametrize("name", list(REPORTED))
def test_missed_problems_are_reported(name):
    code, src = REPORTED[name]
    assert any(c == code for _, c in codes(src)), (name, codes(src))


def test_methods_of_a_same_file_class_instance_are_hot_and_take_their_callers_kinds():
    """`agent = Agent(...)` then `agent.grad_norm()` every step: `Agent.grad_norm`'s per-parameter `.item()`
    is hot. `stopper.check(loss.item())` passes a float: the method's branch on it reads nothing."""
    src = """
import torch

class Agent:
    def __init__(self, net):
        self.net = net

    def grad_norm(self):
        return sum(p.grad.norm().item() for p in self.net.parameters())

class Stopper:
    def __init__(self):
        self.best = float("inf")

    def check(self, value):
        if value < self.best:
            self.best = value

def main(net, loader, opt):
    net.cuda()
    agent = Agent(net)
    stopper = Stopper()
    for x, y in loader:
        loss = ((net(x.cuda(non_blocking=True)) - y.cuda(non_blocking=True)) ** 2).mean()
        loss.backward()
        norm = agent.grad_norm()
        opt.step()
        stopper.check(loss.item())
"""
    found = {(f.line, f.code) for f in lint_source(textwrap.dedent(src))}
    lines = textwrap.dedent(src).splitlines()
    assert (next(i + 1 for i, t in enumerate(lines) if "p.grad.norm().item()" in t), "HL001") in found
    assert not any(code == "HL005" for _, code in found)


def test_a_batch_copied_into_a_preallocated_device_tensor_is_hl012():
    """Faster R-CNN's loop: `im_data = im_data.cuda()` once, then every step
    `im_data.data.resize_(data[0].size()).copy_(data[0])` - a blocking host-to-device copy. With
    `non_blocking=True`, or into a tensor never moved to the device, nothing is reported."""
    src = """
import torch

def train(model, dataloader, opt, iters):
    im_data = torch.FloatTensor(1).cuda()
    host_buf = torch.FloatTensor(1)
    model.cuda()
    data_iter = iter(dataloader)
    for step in range(iters):
        data = next(data_iter)
        im_data.data.resize_(data[0].size()).copy_(data[0])
        im_data.resize_(data[0].size()).copy_(data[0], non_blocking=True)
        host_buf.resize_(data[1].size()).copy_(data[1])
        loss = model(im_data).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
    lines = textwrap.dedent(src).splitlines()
    found = sorted(line for line, code in {(f.line, f.code) for f in lint_source(textwrap.dedent(src))}
                   if code == "HL012")  # fmt: skip
    assert found == [next(i + 1 for i, t in enumerate(lines) if "im_data.data.resize_" in t)]


def test_str_format_of_a_tensor_is_hl002_and_a_printed_percent_format_is_reported_once():
    """Tacotron 2: `print("... {:.6f}".format(iteration, grad_norm))` with the device norm from
    `clip_grad_norm_`; `print("norm %.3f" % grad_norm)` is one finding, not two."""
    src = """
import torch

def main(model, loader, opt):
    model.cuda()
    for x, y in loader:
        loss = model(x.cuda(non_blocking=True)).mean()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        print("step {} norm {:.6f}".format(1, grad_norm))
        print("norm %.3f" % grad_norm)
        print("lr {:.6f}".format(opt.param_groups[0]["lr"]))
"""
    lines = textwrap.dedent(src).splitlines()
    found = [f.line for f in lint_source(textwrap.dedent(src)) if f.code == "HL002"]
    at = [next(i + 1 for i, t in enumerate(lines) if key in t) for key in (".format(1, grad_norm)", "%.3f")]
    assert found == at


def test_batch_p_patterns_saves_named_by_a_metric_to_cpu_helpers_and_returned_loaders():
    """From held-out batch P, after its score was recorded: a checkpoint named by its accuracy is a new file
    each time, but the `best` branch's fixed name is an overwrite (the assignment just before the save
    decides); `float(to_cpu(loss))` reads a host tensor; a loader built, named and returned by a same-file
    builder is judged by what the caller does with it (re-iterated every epoch: persistent workers)."""
    src = """
import torch
from torch.utils.data import DataLoader

def to_cpu(t):
    return t.detach().cpu()

def make_loader(ds, workers):
    loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=workers, pin_memory=True)
    return loader

def main(model, ds, opt, epochs, mode, accu):
    model.cuda()
    loader = make_loader(ds, 8)
    for epoch in range(epochs):
        for x in loader:
            loss = model(x.cuda(non_blocking=True)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            value = float(to_cpu(loss))
        if mode == "all":
            name = "model_accu_{accu:3.3f}.chkpt".format(accu=accu)
            torch.save(model.state_dict(), name)
        elif mode == "best":
            name = "model.chkpt"
            torch.save(model.state_dict(), name)
"""
    lines = textwrap.dedent(src).splitlines()
    found = {(f.line, f.code) for f in lint_source(textwrap.dedent(src))}

    def at(text: str, nth: int = 0) -> int:
        return [i + 1 for i, t in enumerate(lines) if text in t][nth]

    assert (at("torch.save", 1), "HL021") in found and (at("torch.save", 0), "HL021") not in found
    assert not any(line == at("value = float") for line, _ in found)
    assert (at("loader = DataLoader"), "HL011") in found


def test_star_imports_of_the_project_are_followed(tmp_path):
    (tmp_path / "utils.py").write_text("import torch\n\ndef accuracy(scores, targets):\n"
                                       "    return (scores.argmax(-1) == targets).float().sum().item()\n")  # fmt: skip
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        from utils import *

        def main(model, loader, opt):
            model.cuda()
            for x, y in loader:
                scores = model(x.cuda(non_blocking=True))
                loss = torch.nn.functional.cross_entropy(scores, y.cuda(non_blocking=True))
                loss.backward()
                opt.step()
                acc = accuracy(scores, y)
    """)
    )
    found = {(f.line, f.code): f.message for f in lint_source(script.read_text(), str(script))}
    line = next(i + 1 for i, t in enumerate(script.read_text().splitlines()) if "acc = accuracy" in t)
    assert "utils.py" in found[(line, "HL001")]


def test_feed_data_and_set_input_methods_run_every_step():
    """KAIR/BasicSR's `feed_data` and CycleGAN's `set_input` are called once per step from a loop in another
    file: their blocking copies are per-step. A method of another name that copies once is not."""
    src = """
import torch

class ModelPlain:
    def __init__(self, opt):
        self.device = torch.device("cuda")
        self.net = torch.nn.Linear(4, 4).to(self.device)

    def feed_data(self, data):
        self.L = data["L"].to(self.device)

    def set_input(self, batch):
        self.A = batch["A"].to(self.device, non_blocking=True)

    def load(self, data):
        self.ref = data.to(self.device)
"""
    lines = textwrap.dedent(src).splitlines()
    found = [f.line for f in lint_source(textwrap.dedent(src)) if f.code == "HL012"]
    assert found == [next(i + 1 for i, t in enumerate(lines) if 'self.L = data["L"]' in t)]


def test_a_cuda_call_on_a_tensor_already_on_the_device_is_not_a_copy():
    """MelGAN's loop: `x_t = x_t.cuda()` is the batch copy (reported); afterwards `x_t.cuda()`, the output of a
    module given it (`netG(s_t.cuda())`) and `.detach()` of those are on the device already - no copy. A host
    factory sized by a device tensor's shape (`torch.rand(x.size(0))`) is still made on the host."""
    src = """
import torch

def main(netG, netD, fft, loader, opt):
    netG.cuda()
    for x_t in loader:
        x_t = x_t.cuda()
        s_t = fft(x_t).detach()
        x_pred_t = netG(s_t.cuda())
        d_fake = netD(x_pred_t.cuda().detach())
        d_real = netD(x_t.cuda())
        alpha = torch.rand(x_t.size(0), 1).cuda()
        loss = (d_fake - d_real).mean() * alpha.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""
    lines = textwrap.dedent(src).splitlines()
    found = sorted(f.line for f in lint_source(textwrap.dedent(src)) if f.code == "HL012")
    assert found == [next(i + 1 for i, t in enumerate(lines) if key in t) for key in ("x_t = x_t.cuda()", "alpha =")]


def test_loader_options_in_a_dict_call_are_read():
    """Pytorch-UNet: `loader_args = dict(batch_size=b, num_workers=os.cpu_count(), pin_memory=True)` then
    `DataLoader(train_set, shuffle=True, **loader_args)` iterated every epoch: no persistent workers."""
    src = """
import os
import torch
from torch.utils.data import DataLoader

def train(model, train_set, opt, epochs):
    model.cuda()
    loader_args = dict(batch_size=8, num_workers=os.cpu_count(), pin_memory=True)
    train_loader = DataLoader(train_set, shuffle=True, **loader_args)
    for epoch in range(epochs):
        for x in train_loader:
            model(x.cuda(non_blocking=True)).mean().backward()
            opt.step()
"""
    found = {f.code: f.message for f in lint_source(textwrap.dedent(src))}
    assert "persistent_workers" in found["HL011"] and "pin_memory" not in found["HL011"]


def test_a_full_batch_test_function_without_no_grad_is_hl018():
    """pygcn: `def test(): model.eval(); output = model(features, adj)` - one forward over the whole graph, no
    loop, no `torch.no_grad()`. With `@torch.no_grad()` nothing is reported; a `test_*` pytest function is not
    an evaluation function."""
    src = """
import torch

def test(model, features, adj):
    model.eval()
    output = model(features, adj)
    return output.argmax(-1)

@torch.no_grad()
def validate(model, features, adj):
    model.eval()
    return model(features, adj)

def test_shapes(model, features, adj):
    model.eval()
    assert model(features, adj).shape[0] == 3
"""
    found = [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]
    line = next(i + 1 for i, t in enumerate(textwrap.dedent(src).splitlines()) if t.startswith("def test("))
    assert found == [(line, "HL018")]


def test_batch_r_patterns_named_gates_and_numpy_scalar_indices():
    """From held-out batch R, after its score was recorded: monodepth2 logs under `if early_phase or
    late_phase:` with `early_phase = batch_idx % freq == 0 and step < 2000` assigned in the loop - a log gate
    by name; NeRF's `img_i = np.random.choice(i_train)` is one number, so `images[img_i]` copies no index
    array (while `np.random.choice(n, size=8)` is one)."""
    src = """
import numpy as np
import torch

def train(model, loader, opt, images, i_train, freq):
    model.cuda()
    for batch_idx, x in enumerate(loader):
        loss = model(x.cuda(non_blocking=True)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        early_phase = batch_idx % freq == 0 and batch_idx < 2000
        late_phase = batch_idx % 2000 == 0
        if early_phase or late_phase:
            print(loss.cpu().data)
        img_i = np.random.choice(i_train)
        target = images[img_i]
        rows = np.random.choice(len(i_train), size=8)
        batch = images[rows]
"""
    lines = textwrap.dedent(src).splitlines()
    found = sorted((f.line, f.code) for f in lint_source(textwrap.dedent(src)))
    assert found == [(next(i + 1 for i, t in enumerate(lines) if "images[rows]" in t), "HL024")]


def test_a_script_that_gets_torch_through_a_star_import_is_linted():
    """DeepLab's train.py never imports torch itself: `from modeling.deeplab import *` brings it. Its calls of
    `torch.optim` and `.backward()` make it PyTorch code, so its loop is checked."""
    src = textwrap.dedent("""
        from modeling.deeplab import *

        def training(model, loader, criterion):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for i, sample in enumerate(loader):
                image, target = sample["image"].cuda(), sample["label"].cuda()
                loss = criterion(model(image), target)
                loss.backward()
                optimizer.step()
                train_loss = loss.item()
    """)
    assert "HL001" in {f.code for f in lint_source(src)}
    assert lint_source("def test_names():\n    for s in ['a', 'b']:\n        print(s.upper())\n") == []
