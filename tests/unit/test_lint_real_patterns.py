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


QUIET = {
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
}

REPORTED = {
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
    "num_workers passed positionally (HL011)": (
        "HL011",
        """
        device = "cuda"
        loader = DataLoader(ds, 64, True, None, None, 4)
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
