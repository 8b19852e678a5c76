"""Optimizers, parameter groups and LR schedules.

Parameter groups. Weight decay pulls weights towards zero; on biases, normalization gains and
embedding tables that only hurts, so those go to a no-decay group. Which parameters those are is
decided by the *module that owns them* (`nn.Embedding`, any norm layer) and by shape (vectors and
scalars), not by guessing from names, so a `LayerNorm` called `ln_f` or an RMSNorm from another
library is still found. Layer-wise LR decay (`layer_decay`) scales the LR of block k of L by
`layer_decay ** (L + 1 - k)`: embeddings (before the first block) get the smallest LR, the head
(after the last block) the full LR. The block order is the model's largest `ModuleList`/`Sequential`
of blocks, or the list a model returns from `hotloop_blocks()`.

Implementation. The fused kernels (`fused=True`) are used wherever the device has them, CPU
included. DESIGN.md first said "foreach elsewhere"; measured on this project's 2-core CPU (8x
256x256 Linear, AdamW) a fused step took 0.57 ms against 7.1 ms for foreach, and the fused path also
keeps the step counters on the parameter's device and skips inf/NaN steps inside the kernel when a
GradScaler hands it `found_inf` - no host read. foreach remains the fallback. The train step calls a fused
Adam/AdamW through `FusedStep`, which skips `step()`'s per-call list building (`bench/probes/fused_step.py`).

Schedules are closed-form factors of the peak LR, applied by `LambdaLR` once per optimizer step
(never per micro-batch). Step s (0-based) trains with `lr * factor(s)`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.optim import optimizer as _torch_optimizer

from hotloop.config import TrainConfig
from hotloop.errors import ConfigError

NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
    nn.modules.batchnorm._NormBase,
    *((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()),
)
NO_DECAY_TYPES: tuple[type[nn.Module], ...] = (nn.Embedding, nn.EmbeddingBag, *NORM_TYPES)


def _is_norm_like(module: nn.Module) -> bool:
    return isinstance(module, NORM_TYPES) or "norm" in type(module).__name__.lower()


def find_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's blocks in forward order: `model.hotloop_blocks()`, else its largest block list."""
    if hasattr(model, "hotloop_blocks"):
        return list(model.hotloop_blocks())
    best: list[nn.Module] = []
    best_params = 0
    for module in model.modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)) and len(module) > 1:
            children = list(module)
            if len({type(c) for c in children}) != 1:
                continue
            n = sum(p.numel() for p in module.parameters())
            if n > best_params:
                best, best_params = children, n
    return best


def _owned_parameters(model: nn.Module) -> Iterator[tuple[str, nn.Module, nn.Parameter]]:
    seen: set[int] = set()
    for mod_name, module in model.named_modules():
        for p_name, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            yield (f"{mod_name}.{p_name}" if mod_name else p_name), module, p


def param_groups(model: nn.Module, weight_decay: float, layer_decay: float | None = None) -> list[dict[str, Any]]:
    """Decay/no-decay groups, split further by layer when `layer_decay` is set.

    Each group carries `lr_scale` (multiplied into the LR) and `names` (for reports and tests).
    """
    blocks = find_blocks(model) if layer_decay not in (None, 1.0) else []
    block_of: dict[int, int] = {}
    for i, block in enumerate(blocks):
        for p in block.parameters():
            block_of.setdefault(id(p), i + 1)
    n_layers = len(blocks)
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    seen_block = False
    for name, module, p in _owned_parameters(model):
        if not p.requires_grad:
            continue
        no_decay = isinstance(module, NO_DECAY_TYPES) or _is_norm_like(module) or p.ndim < 2
        if blocks:
            if id(p) in block_of:
                layer = block_of[id(p)]
                seen_block = True
            else:
                layer = n_layers + 1 if seen_block else 0
        else:
            layer = 0
        key = (layer, no_decay)
        if key not in groups:
            scale = layer_decay ** (n_layers + 1 - layer) if blocks else 1.0
            groups[key] = {
                "params": [],
                "names": [],
                "weight_decay": 0.0 if no_decay else weight_decay,
                "lr_scale": scale,
                "layer": layer,
            }
        groups[key]["params"].append(p)
        groups[key]["names"].append(name)
    if not groups:
        raise ConfigError("the model has no trainable parameters (all have requires_grad=False)")
    return [groups[k] for k in sorted(groups)]


def _implementation(choice: str, device: torch.device) -> dict[str, bool]:
    if choice == "auto":
        choice = "fused" if device.type in ("cuda", "cpu", "xpu", "mps") else "foreach"
    if choice == "fused":
        return {"fused": True}
    if choice == "foreach":
        return {"foreach": True}
    return {"foreach": False}


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    groups = param_groups(model, cfg.weight_decay, cfg.layer_decay)
    for g in groups:
        g["lr"] = cfg.lr * g["lr_scale"]
    o = cfg.optim
    impl = _implementation(o.implementation, device)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=(o.beta1, o.beta2), eps=o.eps, **impl)
    if cfg.optimizer == "adam":
        # Adam's weight_decay is L2 in the gradient, kept per group as for AdamW.
        return torch.optim.Adam(groups, lr=cfg.lr, betas=(o.beta1, o.beta2), eps=o.eps, **impl)
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=o.momentum, **impl)


# ---------------------------------------------------------------------------------------------
# Schedules


class LRFactor:
    """Closed-form LR multiplier for optimizer step s; a picklable callable for `LambdaLR`."""

    def __init__(self, kind: str, total: int, warmup: int, min_ratio: float) -> None:
        self.kind, self.total, self.warmup, self.min_ratio = kind, max(1, total), warmup, min_ratio

    def __call__(self, s: int) -> float:
        if self.kind == "onecycle":
            return onecycle_factor(s, self.total, self.warmup)
        if s < self.warmup:
            return (s + 1) / self.warmup
        if self.kind == "constant":
            return 1.0
        span = max(1, self.total - self.warmup)
        p = min(1.0, (s - self.warmup) / span)
        if self.kind == "linear":
            return 1.0 - p
        floor = self.min_ratio if self.kind == "warmup_cosine" else 0.0
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * p))


def onecycle_factor(s: int, total: int, up: int, div: float = 25.0, final_div: float = 1e4) -> float:
    """OneCycle (Smith): cosine from 1/div up to 1 over `up` steps, then cosine down to 1/(div*final_div)."""
    start, end = 1.0 / div, 1.0 / (div * final_div)
    if s < up:
        p = s / max(1, up)
        return start + (1.0 - start) * 0.5 * (1.0 - math.cos(math.pi * p))
    p = min(1.0, (s - up) / max(1, total - up))
    return end + (1.0 - end) * 0.5 * (1.0 + math.cos(math.pi * p))


def default_warmup(cfg: TrainConfig, total: int) -> int:
    if cfg.warmup_steps is not None:
        return cfg.warmup_steps
    if cfg.schedule in ("warmup_cosine", "onecycle"):
        return max(1, round(0.05 * total))
    return 0


class Schedule(torch.optim.lr_scheduler.LambdaLR):
    """hotloop's schedule: a `LambdaLR` with one closed-form factor for every group, stepped cheaply.

    `LRScheduler.step` goes through generic machinery (a wrapper, `get_lr`, a closed-form check, a
    factor call per group): about 30 us of host time per optimizer step on this project's CPU, which a
    launch-bound GPU step waits for. Here a step computes the factor once and sets each group's LR; the
    state dict, `get_last_lr()` and everything else are LambdaLR's.
    """

    def step(self, epoch: int | None = None) -> None:  # type: ignore[override]
        if epoch is not None:
            super().step(epoch)
            return
        self.last_epoch += 1
        f = self.lr_lambdas[0](self.last_epoch)
        lrs = [base * f for base in self.base_lrs]
        for g, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            g["lr"] = lr
        self._last_lr = lrs


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int) -> Schedule:
    total = cfg.schedule_steps or total_steps
    factor = LRFactor(cfg.schedule, total, default_warmup(cfg, total), cfg.min_lr_ratio)
    return Schedule(optimizer, factor)


# ---------------------------------------------------------------------------------------------
# The user's own optimizer and scheduler


def is_plateau(scheduler: Any) -> bool:
    """ReduceLROnPlateau steps on a metric, not once per optimizer step: hotloop steps it at evaluations."""
    return isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def _optimizer_class(factory: Any) -> type | None:
    """The Optimizer class behind `factory` (a class, or a functools.partial of one), else None."""
    import functools

    while isinstance(factory, functools.partial):
        factory = factory.func
    return factory if isinstance(factory, type) and issubclass(factory, torch.optim.Optimizer) else None


def resolve_optimizer(
    given: Any, model: nn.Module, cfg: TrainConfig, device: torch.device, note: Any = print
) -> torch.optim.Optimizer:
    """hotloop's AdamW (`given` None), the user's optimizer instance, or one built by the user's factory.

    A factory that is an Optimizer class (or a `functools.partial` of one) is called with hotloop's
    decay/no-decay parameter groups; any other callable is called with the model. Called after FSDP
    sharding, so a factory sees the sharded parameters (an instance built before cannot).
    """
    if given is None:
        return build_optimizer(model, cfg, device)
    if isinstance(given, torch.optim.Optimizer):
        opt = given
    elif callable(given):
        if _optimizer_class(given) is not None:
            groups = param_groups(model, cfg.weight_decay, cfg.layer_decay)
            opt = given([{k: v for k, v in g.items() if k not in ("lr_scale", "layer")} for g in groups])
        else:
            opt = given(model)
        if not isinstance(opt, torch.optim.Optimizer):
            raise ConfigError(f"the optimizer factory returned a {type(opt).__name__}, not a torch.optim.Optimizer")
    else:
        raise ConfigError(
            f"optimizer= takes a torch.optim.Optimizer or a factory (model or param groups -> Optimizer), "
            f"got {type(given).__name__}"
        )
    owned = {id(p) for p in model.parameters()}
    foreign = [p for g in opt.param_groups for p in g["params"] if id(p) not in owned]
    if foreign:
        raise ConfigError(
            f"the optimizer holds {len(foreign)} parameter(s) that are not the model's (built on another model, or "
            "before sharding?); pass a factory, e.g. optimizer=functools.partial(torch.optim.AdamW, lr=1e-3)"
        )
    d = opt.defaults
    if not d.get("fused") and _has_fused(opt):
        note(
            f"hotloop: note: {type(opt).__name__} is not fused: its step launches several kernels per parameter "
            "tensor (fused AdamW ran 12x faster than foreach on this project's CPU) and a skipped non-finite "
            f"step costs a copy of the weights and moments; pass fused=True to {type(opt).__name__} if you can"
        )
    return opt


def _has_fused(opt: torch.optim.Optimizer) -> bool:
    return type(opt) in (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD, torch.optim.Adagrad)


def resolve_scheduler(given: Any, optimizer: torch.optim.Optimizer) -> Any:
    """The user's scheduler instance, or the one their factory builds for `optimizer`."""
    LRScheduler = torch.optim.lr_scheduler.LRScheduler
    sched = given
    if not isinstance(given, (LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)):
        if not callable(given):
            raise ConfigError(
                f"scheduler= takes a torch.optim.lr_scheduler.LRScheduler or a factory optimizer -> LRScheduler, "
                f"got {type(given).__name__}"
            )
        sched = given(optimizer)
    if not isinstance(sched, (LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)):
        raise ConfigError(f"the scheduler factory returned a {type(sched).__name__}, not an LRScheduler")
    if sched.optimizer is not optimizer:
        raise ConfigError(
            "the scheduler was built on another optimizer than the one hotloop trains with; pass a factory "
            "(scheduler=lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000))"
        )
    return sched


def load_scheduler_state(scheduler: Any, state: dict[str, Any]) -> None:
    """Restore a schedule's position. hotloop's own schedule keeps this run's shape (its `LRFactor`s come
    from the config, e.g. a changed `schedule_steps`); any other scheduler is restored as saved."""
    lambdas = getattr(scheduler, "lr_lambdas", None)
    if lambdas is not None and all(isinstance(f, LRFactor) for f in lambdas):
        state = dict(state, lr_lambdas=[None] * len(lambdas))
    scheduler.load_state_dict(state)


_GROUP_LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")
_SCHED_LR_ATTRS = ("base_lrs", "max_lrs", "min_lrs", "_last_lr", "eta_min")


def scale_lr(optimizer: torch.optim.Optimizer, scheduler: Any, factor: float) -> None:
    """Multiply every LR of the run by `factor` from now on (the rollback backoff), whatever the scheduler.

    The current LR of each group and every LR the schedule derives later ones from (`base_lrs` for
    closed forms such as LambdaLR, the current LR and `eta_min` for recursive ones such as
    CosineAnnealingLR, `max_lr`/`min_lr` for OneCycleLR) are scaled, so the schedule's shape is kept at the
    lower level. The scaled values live in the optimizer's and the scheduler's state dicts, so a resumed
    run continues at the same LRs.
    """
    for g in optimizer.param_groups:
        for k in _GROUP_LR_KEYS:
            if isinstance(g.get(k), (int, float)) and not isinstance(g.get(k), bool):
                g[k] = g[k] * factor
    if scheduler is None:
        return
    for attr in _SCHED_LR_ATTRS:
        v = getattr(scheduler, attr, None)
        if isinstance(v, list):
            setattr(scheduler, attr, [x * factor if isinstance(x, (int, float)) else x for x in v])
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            setattr(scheduler, attr, v * factor)


class FusedStep:
    """`optimizer.step()` for PyTorch's fused Adam/AdamW, without the per-call bookkeeping around the kernel.

    Why. Each `step()` rebuilds its tensor lists in Python (`_init_group` walks every parameter's state,
    then the tensors are regrouped by device and dtype) before one `_fused_adamw_` kernel per group. On a
    small model that is most of the step's host time: on the bench `mlp` model (this project's 2-core CPU,
    2026-11-23) `step()` with the non-finite flag took 168-179 us a call and this class 44-87 us
    (`bench/probes/fused_step.py`, three runs; the two kernels alone take about 29 us), and a launch-bound
    GPU step waits on the host just the same.

    How. The first call (and any call the plan cannot serve) is the optimizer's own `step()`; it creates
    the state. The plan then keeps, per group, the lists `_init_group` would build, and later calls run
    the ops PyTorch's `_fused_adam` runs: the step counters advance, then the fused kernel runs with the
    group's current hyperparameters. PyTorch adds 1 and subtracts `found_inf` after the kernel (two foreach
    ops per group); here `1 - found_inf` is added once for all groups - the same counters, since a skipped
    step's kernel changes nothing. The result is bit for bit the optimizer's own (`tests/unit/test_fused_step.py`).

    Never wrong, sometimes slow: `step()` runs instead where a parameter has no gradient this step, a group
    is capturable/differentiable/not fused or has a tensor LR (the whole-step CUDA graph's capture), a step
    hook is registered, or the state was replaced since the plan (`load_state_dict` swaps the state dict
    and the groups; a group's first parameter's moments are checked too) - then it plans again.
    """

    KINDS = (torch.optim.Adam, torch.optim.AdamW)

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.plan: list[tuple] | None = None
        self.state: Any = None
        self.groups: Any = None
        self.steps: list[torch.Tensor] = []
        self.applies = type(optimizer) in self.KINDS and all(g.get("fused") for g in optimizer.param_groups)

    def __call__(self, found_inf: torch.Tensor | None = None) -> None:
        plan = self.plan if self.applies and self._valid() else None
        grads = [[p.grad for p in params] for _, _, params, *_ in plan] if plan is not None else []
        if plan is None or any(g is None for group in grads for g in group):  # (a parameter without a gradient)
            self._own_step(found_inf)
            return
        if found_inf is None:
            torch._foreach_add_(self.steps, 1)
        else:  # (the tensor-list overload: a device tensor as the scalar overload's `other` is read on the host)
            torch._foreach_add_(self.steps, [1 - found_inf] * len(self.steps))  # see the class docstring
        for (group, kernel, params, exp_avgs, exp_avg_sqs, max_sqs, steps), g in zip(plan, grads, strict=True):
            beta1, beta2 = group["betas"]
            kernel(params, g, exp_avgs, exp_avg_sqs, max_sqs, steps, amsgrad=group["amsgrad"], lr=group["lr"],
                   beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"],
                   maximize=group["maximize"], grad_scale=None, found_inf=found_inf)  # fmt: skip

    def _own_step(self, found_inf: torch.Tensor | None) -> None:
        """The optimizer's `step()`, handed the flag as a GradScaler hands it over; then plan again."""
        opt = self.optimizer
        opt.grad_scale, opt.found_inf = None, found_inf  # type: ignore[attr-defined]
        try:
            opt.step()
        finally:
            del opt.grad_scale, opt.found_inf  # type: ignore[attr-defined]
        if self.applies:
            self.plan = self._make_plan()

    def _valid(self) -> bool:
        opt = self.optimizer
        if self.plan is None or opt.state is not self.state or opt.param_groups is not self.groups:
            return False
        if opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks:
            return False
        if _torch_optimizer._global_optimizer_pre_hooks or _torch_optimizer._global_optimizer_post_hooks:
            return False
        for group, _, params, exp_avgs, *_ in self.plan:
            if group["capturable"] or group["differentiable"] or not group["fused"]:
                return False
            if isinstance(group["lr"], torch.Tensor) or any(isinstance(b, torch.Tensor) for b in group["betas"]):
                return False
            if opt.state[params[0]].get("exp_avg") is not exp_avgs[0]:
                return False
        return True

    def _make_plan(self) -> list[tuple] | None:
        opt = self.optimizer
        self.state, self.groups = opt.state, opt.param_groups
        plan = []
        if len({p.device for g in opt.param_groups for p in g["params"]}) > 1:
            return None
        for group in opt.param_groups:
            params = group["params"]
            if not params:
                continue
            if len({(p.device, p.dtype) for p in params}) > 1 or any(p.is_complex() for p in params):
                return None  # the kernel takes one device and dtype per call; PyTorch's step regroups
            if any(type(p.data) is not torch.Tensor for p in params):
                return None  # DTensor (FSDP2) and other tensor subclasses: PyTorch's own step
            states = [opt.state.get(p) for p in params]
            if any(not st or "exp_avg" not in st for st in states):
                return None  # a parameter has not stepped yet (no gradient so far)
            max_sqs = [st["max_exp_avg_sq"] for st in states] if group["amsgrad"] else []
            decoupled = group.get("decoupled_weight_decay", isinstance(opt, torch.optim.AdamW))
            kernel = torch._fused_adamw_ if decoupled else torch._fused_adam_
            plan.append((group, kernel, params, [st["exp_avg"] for st in states], [st["exp_avg_sq"] for st in states],
                         max_sqs, [st["step"] for st in states]))  # fmt: skip
        self.steps = [t for *_, steps in plan for t in steps]
        return plan
