"""Every rule: at least two positives and two look-alike negatives (the good pattern from the seeds).

A case is (code, source, expected): expected True means the code must be reported for the snippet,
False that it must not be.
"""

from __future__ import annotations

import textwrap

import pytest

from hotloop.lint import lint_source

LOOP = """
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
def train(model, loader, optimizer, device, log_every=50):
    running = torch.zeros(())
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        out = model(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
{body}
"""


def in_loop(body: str) -> str:
    return LOOP.format(body=textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8))


CASES = [
    # HL001
    ("HL001", in_loop("v = loss.item()"), True),
    ("HL001", in_loop("v = float(loss)"), True),
    ("HL001", in_loop("running += loss.detach()"), False),
    ("HL001", in_loop("if step % log_every == 0:\n    print(running.item())"), False),
    ("HL001", in_loop("v = loss.item()  # sync: debug"), False),
    (
        "HL001",
        "import torch\ndef run(loader, device):\n    for b in loader:\n"
        "        loss = train_step(b.to(device, non_blocking=True))\n"
        "        print(loss.item())\n",
        True,
    ),
    (
        "HL001",
        "import torch\ndef train_epoch(model, loader, opt):\n    total = torch.zeros(())\n"
        "    for x, y in loader:\n        loss = model(x, y)\n        loss.backward()\n        opt.step()\n"
        "        total += loss.detach()\n    return total.item()\n"
        "def fit(model, loader, opt):\n    for epoch in range(3):\n        print(train_epoch(model, loader, opt))\n",
        False,
    ),
    # HL002
    ("HL002", in_loop('print(f"loss {loss}")'), True),
    ("HL002", in_loop("print(loss)"), True),
    ("HL002", in_loop('print(f"step {step}")'), False),
    ("HL002", in_loop('if step % log_every == 0:\n    print(f"loss {loss}")'), False),
    # HL003
    ("HL003", "import torch\nnorms = [p.grad.norm() for p in ps]\nt = torch.tensor(norms)\n", True),
    ("HL003", "import torch\ndef f(a: torch.Tensor, b: torch.Tensor):\n    return torch.tensor([a, b])\n", True),
    ("HL003", "import torch\nt = torch.tensor([1.0, 2.0])\n", False),
    ("HL003", "import torch\ndef f(a: torch.Tensor, b: torch.Tensor):\n    return torch.stack([a, b])\n", False),
    # HL004
    ("HL004", "import torch\ndef f(tensors):\n    return max(t.abs().max() for t in tensors)\n", True),
    ("HL004", "import torch\ndef f(grads):\n    return max(g.abs().max() for g in grads)\n", True),
    ("HL004", "import torch\ndef f(a: torch.Tensor, b: torch.Tensor):\n    return max(a, b)\n", True),
    ("HL004", "import torch\ndef f(xs):\n    return max(len(x) for x in xs)\n", False),
    ("HL004", "import torch\ndef f(grads):\n    return torch.stack([g.abs().max() for g in grads]).max()\n", False),
    # HL005
    ("HL005", in_loop("if loss < 0.1:\n    break"), True),
    ("HL005", in_loop("if torch.isnan(loss):\n    continue"), True),
    ("HL005", in_loop("if step > 100:\n    break"), False),
    ("HL005", in_loop("scale = torch.where(loss > 1, 0.5, 1.0)"), False),
    ("HL005", in_loop("if out.grad is not None:\n    pass"), False),
    # HL006
    ("HL006", in_loop("kept = out[out > 0]"), True),
    ("HL006", in_loop("idx = torch.nonzero(y)"), True),
    ("HL006", in_loop("kept = torch.where(out > 0, out, 0)"), False),
    ("HL006", in_loop("kept = out[:, 0]"), False),
    # HL007
    ("HL007", in_loop("preds = out.argmax(-1).cpu()"), True),
    ("HL007", in_loop("vals = loss.tolist()"), True),
    ("HL007", in_loop("preds = out.argmax(-1)"), False),
    ("HL007", in_loop("if step % log_every == 0:\n    vals = running.tolist()"), False),
    # HL008
    ("HL008", in_loop("act = lambda t: t * 2\nout = act(out)"), True),
    ("HL008", in_loop("def helper(t):\n    return t + 1\nout = helper(out)"), True),
    ("HL008", in_loop("scaled = lambda t: t * step\nout = scaled(out)"), False),
    ("HL008", "def helper(t):\n    return t + 1\nfor x in range(3):\n    helper(x)\n", False),
    # HL009
    ("HL009", "import torch\ndef f(grads):\n    return torch._foreach_norm(grads)\n", True),
    ("HL009", "import torch\nnorms = torch._foreach_norm([p.grad for p in ps])\n", True),
    ("HL009", "import torch\ndef f(grads):\n    return torch._foreach_norm([g.float() for g in grads])\n", False),
    (
        "HL009",
        "import torch\ndef f(grads):\n    if grads[0].dtype == torch.float32:\n"
        "        return torch._foreach_norm(grads)\n",
        False,
    ),
    # HL010
    (
        "HL010",
        "import torch\ndef kd(self, teacher, s, x):\n    with torch.inference_mode():\n        t = teacher(x)\n"
        "    return (s / self.T - t / self.T).pow(2).mean()\n",
        True,
    ),
    (
        "HL010",
        "import torch\ndef kd(teacher, s, x, temperature):\n    with torch.inference_mode():\n"
        "        t_logits = teacher(x)\n    return t_logits / temperature\n",
        True,
    ),
    (
        "HL010",
        "import torch\ndef kd(self, teacher, s, x):\n    with torch.no_grad():\n        t = teacher(x)\n"
        "    return (s / self.T - t / self.T).pow(2).mean()\n",
        False,
    ),
    (
        "HL010",
        "import torch\ndef predict(model, x):\n    with torch.inference_mode():\n        out = model(x)\n"
        "    return out.argmax(-1)\n",
        False,
    ),
    # HL011
    (
        "HL011",
        "import torch\nfrom torch.utils.data import DataLoader\ndev = 'cuda'\nw = torch.zeros(1).to(dev)\n"
        "l = DataLoader(ds, batch_size=8, num_workers=2, persistent_workers=True)\n",
        True,
    ),
    # no workers: the main thread loads; pinning there adds a copy, and there is nothing to keep alive
    (
        "HL011",
        "import torch\nfrom torch.utils.data import DataLoader\ndev = 'cuda'\nw = torch.zeros(1).to(dev)\n"
        "l = DataLoader(ds, batch_size=8)\n",
        False,
    ),
    (
        "HL011",
        "from torch.utils.data import DataLoader\nl = DataLoader(ds, batch_size=8, num_workers=4)\n"
        "for epoch in range(3):\n    for b in l:\n        pass\n",
        True,
    ),
    (
        "HL011",
        "import torch\nfrom torch.utils.data import DataLoader\ndev = 'cuda'\nw = torch.zeros(1).to(dev)\n"
        "l = DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True, persistent_workers=True)\n",
        False,
    ),
    ("HL011", "from torch.utils.data import DataLoader\nl = DataLoader(ds, batch_size=8)\n", False),
    # HL012
    ("HL012", in_loop("m = masks[step].to(device)"), True),
    ("HL012", in_loop("w = weights[step].cuda()"), True),
    ("HL012", in_loop("x = x.to(device)"), False),  # moved above, by the `x, y = x.to(...), y.to(...)` unpacking
    ("HL012", in_loop("y = y.cuda()"), False),
    ("HL012", in_loop("x = x.to(device, non_blocking=True)"), False),
    ("HL012", in_loop("x = x.to(torch.float16)"), False),
    # HL013
    ("HL013", "def f(opt):\n    opt.zero_grad(set_to_none=False)\n", True),
    ("HL013", "def f(model):\n    model.zero_grad(set_to_none=False)\n", True),
    ("HL013", "def f(opt):\n    opt.zero_grad()\n", False),
    ("HL013", "def f(opt):\n    opt.zero_grad(set_to_none=True)\n", False),
    # HL014
    (
        "HL014",
        "import torch\ndef fit(model, loader, opt, epochs):\n"
        "    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=1000)\n"
        "    for epoch in range(epochs):\n        for x, y in loader:\n            model(x).sum().backward()\n"
        "            opt.step()\n        sched.step()\n",
        True,
    ),
    (
        "HL014",
        "import torch\ndef fit(model, loader, opt, epochs):\n"
        "    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10)\n"
        "    for epoch in range(epochs):\n        for x, y in loader:\n            model(x).sum().backward()\n"
        "            opt.step()\n            sched.step()\n",
        True,
    ),
    (
        "HL014",
        "import torch\ndef fit(model, loader, opt, epochs):\n"
        "    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=1000)\n"
        "    for epoch in range(epochs):\n        for x, y in loader:\n            model(x).sum().backward()\n"
        "            opt.step()\n            sched.step()\n",
        False,
    ),
    (
        "HL014",
        "import torch\ndef fit(model, loader, opt, epochs):\n"
        "    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)\n"
        "    for epoch in range(epochs):\n        for x, y in loader:\n            model(x).sum().backward()\n"
        "            opt.step()\n        sched.step()\n",
        False,
    ),
    # HL015
    ("HL015", "from torch.utils.data import DistributedSampler\nsampler = DistributedSampler(ds)\n", True),
    (
        "HL015",
        "from torch.utils.data.distributed import DistributedSampler\n"
        "l = DataLoader(ds, sampler=DistributedSampler(ds))\n",
        True,
    ),
    (
        "HL015",
        "from torch.utils.data import DistributedSampler\nsampler = DistributedSampler(ds)\n"
        "for epoch in range(3):\n    sampler.set_epoch(epoch)\n",
        False,
    ),
    ("HL015", "from torch.utils.data import RandomSampler\nsampler = RandomSampler(ds)\n", False),
    # HL016
    (
        "HL016",
        "def train(model, loader, opt, accum):\n    for i, (x, y) in enumerate(loader):\n"
        "        loss = model(x, y)\n        loss.backward()\n        if (i + 1) % accum == 0:\n"
        "            opt.step()\n            opt.zero_grad()\n",
        True,
    ),
    (
        "HL016",
        "def train(model, loader, opt, scaler, accum):\n    for i, (x, y) in enumerate(loader):\n"
        "        loss = model(x, y)\n        scaler.scale(loss).backward()\n        if (i + 1) % accum == 0:\n"
        "            scaler.step(opt)\n",
        True,
    ),
    (
        "HL016",
        "def train(model, loader, opt, accum):\n    for i, (x, y) in enumerate(loader):\n"
        "        loss = model(x, y) / accum\n        loss.backward()\n        if (i + 1) % accum == 0:\n"
        "            opt.step()\n",
        False,
    ),
    (
        "HL016",
        "def train(model, loader, opt, accum):\n    for i, (x, y) in enumerate(loader):\n"
        "        loss = model(x, y)\n        (loss / accum).backward()\n        if (i + 1) % accum == 0:\n"
        "            opt.step()\n",
        False,
    ),
    # HL017
    (
        "HL017",
        "import torch\ndef step(loss, scaler, opt, model):\n    scaler.scale(loss).backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    scaler.step(opt)\n",
        True,
    ),
    (
        "HL017",
        "from torch.nn.utils import clip_grad_value_\ndef step(loss, scaler, opt, model):\n"
        "    scaler.scale(loss).backward()\n    clip_grad_value_(model.parameters(), 1.0)\n",
        True,
    ),
    (
        "HL017",
        "import torch\ndef step(loss, scaler, opt, model):\n    scaler.scale(loss).backward()\n"
        "    scaler.unscale_(opt)\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
        False,
    ),
    (
        "HL017",
        "import torch\ndef step(loss, opt, model):\n    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
        False,
    ),
    # HL018
    (
        "HL018",
        "def evaluate(model, loader):\n    model.eval()\n    for x, y in loader:\n        out = model(x)\n",
        True,
    ),
    (
        "HL018",
        "import torch\n@torch.no_grad()\ndef validate(model, loader):\n    for x, y in loader:\n"
        "        out = model(x)\n",
        True,
    ),
    (
        "HL018",
        "import torch\n@torch.no_grad()\ndef validate(model, loader):\n    model.eval()\n"
        "    for x, y in loader:\n        out = model(x)\n",
        False,
    ),
    (
        "HL018",
        "import torch\ndef evaluate(model, loader):\n    model.eval()\n    with torch.no_grad():\n"
        "        for x, y in loader:\n            out = model(x)\n",
        False,
    ),
    # HL019
    # (a list made before the loop keeps every step's graph; one made anew each step is dropped with it)
    ("HL019", in_loop("losses.append(loss)").replace("running = torch.zeros(())", "losses = []"), True),
    ("HL019", in_loop("outs.append(out)").replace("running = torch.zeros(())", "outs = []"), True),
    ("HL019", in_loop("losses = []\nlosses.append(loss)"), False),
    ("HL019", in_loop("losses = []\nlosses.append(loss.detach())"), False),
    ("HL019", in_loop("steps = []\nsteps.append(step)"), False),
    # HL020
    ("HL020", in_loop("torch.cuda.synchronize()"), True),
    ("HL020", in_loop("torch.cuda.empty_cache()"), True),
    ("HL020", "import torch\ntorch.cuda.synchronize()\n", False),
    ("HL020", in_loop("torch.cuda.set_device(0)"), False),
    # HL021
    ("HL021", in_loop("torch.save(model.state_dict(), 'ckpt.pt')"), True),
    ("HL021", in_loop("if step % 1000 == 0:\n    torch.save(model.state_dict(), path)"), True),
    ("HL021", "import os, torch\n" + in_loop("torch.save(model.state_dict(), tmp)\nos.replace(tmp, 'ckpt.pt')"), False),
    ("HL021", "import torch\ndef save(model):\n    torch.save(model.state_dict(), 'final.pt')\n", False),
    # HL022
    ("HL022", in_loop("idx = torch.where(y > 0)"), True),
    ("HL022", in_loop("r = out.repeat_interleave(y)"), True),
    ("HL022", in_loop("r = out.repeat_interleave(y, output_size=64)"), False),
    ("HL022", in_loop("r = torch.where(y > 0, out, 0)"), False),
    # HL023
    ("HL023", in_loop("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)"), True),
    (
        "HL023",
        "from torch.nn.utils import clip_grad_norm_\n"
        + in_loop("clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)"),
        True,
    ),
    ("HL023", in_loop("norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"), False),
    ("HL023", "import torch\ntorch.nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)\n", False),
    # HL024
    ("HL024", in_loop("w = torch.tensor([1.0, 2.0], device=device)"), True),
    ("HL024", in_loop("sel = out[[0, 2, 5]]"), True),
    ("HL024", in_loop("w = torch.ones(2, device=device)"), False),
    ("HL024", "import torch\nw = torch.tensor([1.0, 2.0], device='cuda')\n", False),
    # HL025
    ("HL025", in_loop("f = torch.compile(lambda t: t * 2)"), True),
    ("HL025", in_loop("def g(t):\n    return t * step\nf = torch.compile(g)"), True),
    ("HL025", "import torch\ndef g(t):\n    return t\nf = torch.compile(g)\n", False),
    ("HL025", in_loop("out = compiled(x)"), False),
]


@pytest.mark.parametrize("code, source, expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule(code, source, expected):
    if "import torch" not in source:
        source = "import torch\n" + source  # rules apply to modules that use PyTorch
    found = [f for f in lint_source(source, "case.py") if f.code == code]
    assert bool(found) == expected, (code, source, found)


def test_modules_without_pytorch_are_not_checked():
    src = "def evaluate(model, loader):\n    for x in loader:\n        model(x)\n"
    assert lint_source(src) == []
    assert [f.code for f in lint_source("import torch\n" + src)] == ["HL018", "HL018"]


def test_every_rule_has_two_positives_and_two_negatives():
    from hotloop.lint import RULES

    for code in RULES:
        if code == "HL000":
            continue
        pos = sum(1 for c, _, e in CASES if c == code and e)
        neg = sum(1 for c, _, e in CASES if c == code and not e)
        assert pos >= 2 and neg >= 2, code
