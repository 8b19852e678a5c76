"""The rule catalogue: code, one-line summary, and what `hotloop lint --explain CODE` prints.

Codes are a contract (users' noqa comments and configs name them): never renumber, only add.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    code: str
    summary: str
    why: str
    bad: str
    good: str
    severity: str = "warning"
    fixable: bool = False
    fix: str = ""  # exactly what `--fix` rewrites, and what it leaves alone


_R = [
    Rule(
        "HL000",
        "file could not be parsed (or analysed)",
        "A syntax error stops every other check for the file; so does an internal error of the linter, reported "
        "with its exception so it can be fixed (HOTLOOP_LINT_RAISE=1 shows the traceback).",
        "def f(:",
        "def f():",
        severity="error",
    ),
    Rule(
        "HL001",
        "`.item()`/`float()`/`int()`/`bool()` of a tensor in the hot loop: a host-device sync every step",
        "Reading a value on the host waits for every queued kernel; the GPU idles while Python catches up.",
        "loss_value = loss.item()",
        "running += loss.detach()  # read once per log interval",
    ),
    Rule(
        "HL002",
        "printing, logging or formatting a tensor in the hot loop: a sync every step",
        "Formatting a CUDA tensor copies it to the host, which waits for the device.",
        'print(f"loss {loss}")',
        'if step % log_every == 0:\n    print(f"loss {running.item() / log_every}")',
    ),
    Rule(
        "HL003",
        "`torch.tensor()` over tensors: one host read per element; use `torch.stack`",
        "torch.tensor copies each element through Python scalars; torch.stack stays on the device.",
        "torch.tensor([a, b, c])",
        "torch.stack([a, b, c])",
        fixable=True,
        fix="`--fix` rewrites `torch.tensor(<list or generator of tensors>)` with no other argument to "
        "`torch.stack([...])`. It leaves `torch.tensor(..., dtype=/device=)` (stack keeps the elements' dtype and "
        "device, so the result could differ) and `torch.as_tensor` (it may share memory) to you.",
    ),
    Rule(
        "HL004",
        "Python `max`/`min`/`sorted` over tensors: compares on the host, a sync per element (`sum` only adds)",
        "Python's max compares with `bool(a > b)`, reading each comparison on the host.",
        "max(t.abs().max() for t in tensors)",
        "torch.stack([t.abs().max() for t in tensors]).max()",
    ),
    Rule(
        "HL005",
        "Python branch on a tensor in the hot loop: `if`/`while`/`assert` reads it on the host",
        "The condition must be a Python bool, so the tensor is read (a sync) every step.",
        "if loss < threshold: ...",
        "x = torch.where(cond, a, b)  # or decide at a log boundary",
    ),
    Rule(
        "HL006",
        "data-dependent output size in the hot loop (`nonzero`, `masked_select`, `unique`, `bincount`, mask index)",
        "The size of the result is only known after the device computed it: a sync.",
        "kept = x[x > 0]",
        "kept = torch.where(x > 0, x, 0)",
    ),
    Rule(
        "HL007",
        "`.cpu()`/`.numpy()`/`.tolist()` in the hot loop: a device-to-host copy that waits",
        "A synchronous copy to the host stalls the device queue every step.",
        "preds.append(out.argmax(-1).cpu())",
        "preds.append(out.argmax(-1))  # concatenate and copy once",
    ),
    Rule(
        "HL008",
        "function or lambda created inside the hot loop that captures nothing that changes per step",
        "Creating a function object every iteration costs time for nothing; define it once outside the loop.",
        "for b in loader:\n    f = lambda t: t * 2",
        "def f(t): return t * 2\nfor b in loader: ...",
    ),
    Rule(
        "HL009",
        "`torch._foreach_norm` without a float32 guard: accumulates in the input dtype and overflows",
        "fp16's sum of squares overflows past 65504; the norm comes back inf.",
        "torch._foreach_norm(grads)",
        "torch._foreach_norm([g.float() for g in grads])",
    ),
    Rule(
        "HL010",
        "`torch.inference_mode()` output later combined with trainable parameters",
        "Inference tensors cannot be saved for backward: a learnable temperature gets no gradient (or errors).",
        "with torch.inference_mode():\n    t = teacher(x)\nloss = kd(s / self.T, t / self.T)",
        "with torch.no_grad():\n    t = teacher(x)",
    ),
    Rule(
        "HL011",
        "`DataLoader` without `pin_memory=True` (CUDA code) or workers without `persistent_workers`",
        "Pageable host memory makes every copy synchronous; re-forking workers each epoch costs seconds.",
        "DataLoader(ds, batch_size=64, num_workers=4)",
        "DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True, persistent_workers=True)",
    ),
    Rule(
        "HL012",
        "`.to(device)`/`.cuda()` of batch data without `non_blocking=True`",
        "A blocking copy serialises data transfer and compute; from pinned memory it can overlap.",
        "x = x.to(device)",
        "x = x.to(device, non_blocking=True)",
        fixable=True,
        fix="`--fix` adds `non_blocking=True` to a `.to(...)`/`.cuda()` call written on one line; a call spanning "
        "lines is left to you. The copy overlaps compute only from pinned memory: give the DataLoader "
        "`pin_memory=True` too.",
    ),
    Rule(
        "HL013",
        "`zero_grad(set_to_none=False)`: writes zeros into every gradient instead of dropping them",
        "set_to_none=True (the default) saves a memset per parameter and memory. A helper that zeroes each "
        "`p.grad` in place every step (`p.grad.zero_()`) does the same and is reported too.",
        "opt.zero_grad(set_to_none=False)",
        "opt.zero_grad()",
        fixable=True,
        fix="`--fix` drops `set_to_none=False` when it is the call's only argument and the call is on one line "
        "(`opt.zero_grad(set_to_none=False)` -> `opt.zero_grad()`); other forms are left to you.",
    ),
    Rule(
        "HL014",
        "LR scheduler stepped at the wrong cadence (per-batch one per epoch, or per-epoch one per batch)",
        "OneCycleLR/CyclicLR/warmup schedules count batches; StepLR/CosineAnnealingLR(T_max=epochs) count epochs.",
        "for epoch ...:\n    for b in loader: ...\n    onecycle.step()",
        "for b in loader:\n    ...\n    onecycle.step()",
    ),
    Rule(
        "HL015",
        "`DistributedSampler` whose `set_epoch` is never called: every epoch sees the same order",
        "The sampler seeds its shuffle with the epoch; without set_epoch the order repeats.",
        "sampler = DistributedSampler(ds)",
        "sampler.set_epoch(epoch)  # at the start of every epoch",
    ),
    Rule(
        "HL016",
        "gradient accumulation without dividing the loss by the number of accumulation steps",
        "Summed gradients are accum_steps times too large: the effective LR silently multiplies.",
        "loss.backward()\nif (i + 1) % accum == 0: opt.step()",
        "(loss / accum).backward()",
    ),
    Rule(
        "HL017",
        "gradient clipping after `scaler.scale(loss).backward()` without `scaler.unscale_(opt)` first",
        "The gradients are still multiplied by the loss scale (up to 65536): the clip threshold is meaningless. "
        "The same holds for a clip inside apex's `with amp.scale_loss(loss, opt) as s:` block (apex unscales "
        "when the block exits).",
        "scaler.scale(loss).backward()\nclip_grad_norm_(params, 1.0)",
        "scaler.scale(loss).backward()\nscaler.unscale_(opt)\nclip_grad_norm_(params, 1.0)",
    ),
    Rule(
        "HL018",
        "evaluation loop without `torch.no_grad()`/`inference_mode()` or without `model.eval()`",
        "Without no_grad every activation is kept for a backward that never comes; without eval dropout and "
        "batch norm stay in training mode.",
        "def evaluate(model, loader):\n    for x, y in loader: model(x)",
        "@torch.no_grad()\ndef evaluate(model, loader):\n    model.eval()\n    ...",
    ),
    Rule(
        "HL019",
        "tensor appended to a list without `.detach()` in the training loop: keeps every graph alive",
        "Each appended loss holds its whole autograd graph: memory grows every step. A running total of stepped "
        "losses (`total_loss += loss` after `loss.backward()`, reset once per epoch) does the same.",
        "losses.append(loss)",
        "losses.append(loss.detach())",
    ),
    Rule(
        "HL020",
        "`torch.cuda.synchronize()`/`empty_cache()` inside the training loop",
        "synchronize waits for the device; empty_cache throws away the allocator's cache and forces new mallocs.",
        "torch.cuda.empty_cache()",
        "# remove it; profile instead",
    ),
    Rule(
        "HL021",
        "`torch.save` straight to its final path inside the training loop",
        "A crash mid-write leaves a corrupt checkpoint where the good one was.",
        "torch.save(state, 'ckpt.pt')",
        "torch.save(state, tmp); os.replace(tmp, 'ckpt.pt')",
    ),
    Rule(
        "HL022",
        "`repeat_interleave` without `output_size` or one-argument `torch.where` in the hot loop",
        "Both have data-dependent output sizes: the host reads the size (a sync) every call.",
        "torch.where(mask)",
        "torch.where(mask, a, b)  # or repeat_interleave(r, output_size=n)",
    ),
    Rule(
        "HL023",
        "`clip_grad_norm_(..., error_if_nonfinite=True)`: reads the norm on the host every step",
        "Checking for a non-finite norm in Python needs its value: a sync per step.",
        "clip_grad_norm_(params, 1.0, error_if_nonfinite=True)",
        "norm = clip_grad_norm_(params, 1.0)  # check norm at a log boundary",
    ),
    Rule(
        "HL024",
        "`torch.tensor(list, device=...)` or indexing with a Python list in the hot loop",
        "Each builds a tensor from Python data and copies it from pageable memory every step.",
        "idx = torch.tensor([0, 2, 5], device='cuda')",
        "build it once before the loop",
    ),
    Rule(
        "HL025",
        "function created per iteration and passed to `torch.compile`: a recompile every step",
        "torch.compile guards on the function object; a new one each step misses the cache.",
        "for b in loader:\n    f = torch.compile(lambda x: x * 2)",
        "f = torch.compile(step_fn)  # once",
    ),
]

RULES: dict[str, Rule] = {r.code: r for r in _R}
SYNC_CODES = {"HL001", "HL002", "HL005", "HL006", "HL007", "HL022", "HL023"}  # silenced by `# sync: <why>`


def explain(code: str) -> str:
    r = RULES[code]
    return (
        f"{r.code}: {r.summary}\n\nWhy: {r.why}\n\nBad:\n    {r.bad.replace(chr(10), chr(10) + '    ')}\n\n"
        f"Good:\n    {r.good.replace(chr(10), chr(10) + '    ')}\n\n"
        f"Fix: {r.fix if r.fixable else 'by hand, as in Good (`hotloop lint --fix` does not change it).'}\n"
        f"Suppress one line with `# noqa: {r.code}`"
        + (" or mark an intended host read with `# sync: <why>`." if r.code in SYNC_CODES else ".")
    )
