"""The knowledge-distillation loss, a learnable temperature, and the loss function the Trainer calls.

    loss = alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T)) + (1 - alpha) * CE(student, labels)

- Log-softmax in fp32 whatever the autocast dtype (bf16/fp16 logits overflow and lose the tail).
- T^2 keeps the KD gradient's scale independent of T (Hinton et al.), so alpha means the same at any T.
- Padding is masked out of both terms (`mask`, or labels equal to `ignore_index`).
- Top-k teacher logits (a cache): the teacher's distribution is renormalised over its k kept tokens and
  compared with the student's log-probabilities over the *whole* vocabulary gathered at those tokens, so
  student mass outside the teacher's top-k is still penalised. With k = vocabulary size this is exactly
  the full-logit loss (tested).

The teacher must run under `torch.no_grad()`, never `torch.inference_mode()`: an inference tensor
cannot be saved for backward, and `teacher_logits / T` with a learnable T must save it (seed 004 lost a
week to this). `Distiller` runs it that way, in eval mode, outside the optimizer and the compiled graph.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hotloop.errors import HotloopError


class DistillError(HotloopError):
    """Teacher and student (or a cache) do not fit together."""


class Temperature(nn.Module):
    """T = clamp(exp(log_t), t_min, t_max): positive by construction, learnable or fixed.

    The parameter is 0-dimensional, so hotloop's optimizer puts it in the no-weight-decay group. At a
    bound the clamp stops its gradient: `at_bound` tells the caller to say so.
    """

    def __init__(self, init: float = 2.0, learnable: bool = True, t_min: float = 1.0, t_max: float = 10.0) -> None:
        super().__init__()
        if not 0.0 < t_min < t_max:
            raise DistillError(f"temperature range [{t_min}, {t_max}] is empty; need 0 < t_min < t_max")
        if not t_min <= init <= t_max:
            raise DistillError(f"distill.temperature={init} lies outside [t_min, t_max] = [{t_min}, {t_max}]")
        self.t_min, self.t_max, self.learnable = t_min, t_max, learnable
        log_t = torch.tensor(math.log(init))
        if learnable:
            self.log_t = nn.Parameter(log_t)
        else:
            self.register_buffer("log_t", log_t)

    def forward(self) -> torch.Tensor:
        return self.log_t.exp().clamp(self.t_min, self.t_max)

    def at_bound(self, value: float, rel: float = 1e-3) -> str | None:
        """'lower'/'upper' if a read value of T sits on a bound (checked at log boundaries), else None."""
        if value <= self.t_min * (1 + rel):
            return "lower"
        if value >= self.t_max * (1 - rel):
            return "upper"
        return None


def kd_loss(
    student_logits: torch.Tensor,
    labels: torch.Tensor | None,
    temperature: torch.Tensor | float,
    alpha: float,
    teacher_logits: torch.Tensor | None = None,
    teacher_topk: tuple[torch.Tensor, torch.Tensor] | None = None,
    mask: torch.Tensor | None = None,
    ignore_index: int = -100,
) -> dict[str, torch.Tensor]:
    """The KD loss over the last dimension (vocabulary); returns `loss`, `kd_loss`, `ce_loss`, `temperature`.

    Pass the teacher as full `teacher_logits` (same shape as the student's) or as `teacher_topk` =
    (values, indices) with k entries per position. Everything stays on the device (no host read).
    """
    vocab = student_logits.shape[-1]
    if teacher_logits is None and teacher_topk is None:
        raise DistillError("kd_loss needs teacher_logits or teacher_topk")
    if teacher_logits is not None and teacher_logits.shape[-1] != vocab:
        raise DistillError(
            f"teacher vocabulary {teacher_logits.shape[-1]} != student vocabulary {vocab}: distillation compares "
            "distributions over the same tokens; use a teacher with the student's tokenizer"
        )
    s = student_logits.float().reshape(-1, vocab)
    # A float T stays a Python scalar (a kernel argument): no host-to-device copy per call.
    t = temperature if isinstance(temperature, torch.Tensor) else float(temperature)
    log_q = F.log_softmax(s / t, dim=-1)
    if teacher_topk is not None:
        values, indices = teacher_topk
        k = values.shape[-1]
        log_p = F.log_softmax(values.float().reshape(-1, k) / t, dim=-1)  # renormalised over the kept k
        log_q = log_q.gather(-1, indices.reshape(-1, k).long())
    else:
        log_p = F.log_softmax(teacher_logits.float().reshape(-1, vocab) / t, dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    if mask is not None:
        valid = mask.reshape(-1).to(kl.dtype)
    elif labels is not None:
        valid = (labels.reshape(-1) != ignore_index).to(kl.dtype)
    else:
        valid = torch.ones_like(kl)
    count = valid.sum().clamp_min(1.0)
    kd = (kl * valid).sum() / count * t * t
    if labels is not None:
        ce_tok = F.cross_entropy(s, labels.reshape(-1), ignore_index=ignore_index, reduction="none")
        ce = (ce_tok * valid).sum() / count
    else:
        ce = torch.zeros((), device=s.device)
    loss = alpha * kd + (1.0 - alpha) * ce if labels is not None else kd
    return {
        "loss": loss,
        "kd_loss": kd.detach(),
        "ce_loss": ce.detach(),
        "temperature": t.detach().float() if isinstance(t, torch.Tensor) else s.new_full((), t),
    }


def logits_of(out: Any) -> torch.Tensor:
    """Logits from what a model returns: a tensor, an object with `.logits` (Hugging Face), or a tuple's first."""
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise DistillError(f"cannot find logits in the model's {type(out).__name__} output (return a tensor or .logits)")


def no_kv_cache(model: nn.Module) -> None:
    """Hugging Face models keep a key/value cache for generation unless `config.use_cache` is off: wasted
    memory and time when distilling (seed 004)."""
    config = getattr(model, "config", None)
    if config is not None and getattr(config, "use_cache", False):
        config.use_cache = False


class StudentWithTemperature(nn.Module):
    """What the Trainer optimizes: the student and the temperature (the teacher is deliberately not here).

    `forward(x)` returns (student logits, T), so it works through DDP and torch.compile wrappers too.
    Its state_dict keys are `student.*` and `temperature.log_t`.
    """

    def __init__(self, student: nn.Module, temperature: Temperature) -> None:
        super().__init__()
        self.student, self.temperature = student, temperature

    def hotloop_blocks(self) -> list[nn.Module]:
        from hotloop.optim import find_blocks

        return find_blocks(self.student)

    def forward(self, x: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return logits_of(self.student(x, **kwargs)), self.temperature()


class Distiller:
    """The Trainer's `loss_fn` for distillation.

    Batches are dicts with `x` (inputs), `y` (labels) and, from a teacher cache, `t_values`/`t_indices`
    (top-k) or `t_logits` (full); Hugging Face-style keys work too (`input_ids`, `labels`,
    `attention_mask`; with `shift_labels=True` position t predicts `labels[t + 1]`, the causal-LM
    convention, and padding in `labels` is -100). Without cached logits the teacher runs here, in eval mode
    under `torch.no_grad()`, with its key/value cache off. In evaluation (the model in eval mode) the loss
    is the plain cross-entropy, so `val_loss` compares with a student trained without distillation.
    """

    def __init__(
        self, teacher: nn.Module | None, alpha: float, vocab: int | None = None, shift_labels: bool = False
    ) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise DistillError(f"distill.alpha={alpha} must be in [0, 1] (0: no distillation, 1: KD only)")
        self.teacher, self.alpha, self.vocab, self.shift = teacher, alpha, vocab, shift_labels
        if teacher is not None:
            teacher.eval()
            teacher.requires_grad_(False)
            no_kv_cache(teacher)
        self.teacher_forwards = 0
        """Teacher forward passes made here (a host-side count; 0 when the cache serves every batch)."""

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = batch["x"] if "x" in batch else batch["input_ids"]
        y = batch["y"] if "y" in batch else batch["labels"]
        kwargs = {"attention_mask": batch["attention_mask"]} if "attention_mask" in batch else {}
        logits, t = model(x, **kwargs)
        if self.vocab is not None and logits.shape[-1] != self.vocab:
            raise DistillError(
                f"teacher vocabulary {self.vocab} != student vocabulary {logits.shape[-1]}: the student must "
                "predict over the teacher's tokens"
            )
        if self.shift:  # position t predicts token t + 1
            logits, y = logits[:, :-1], y[:, 1:]
        evaluating = not model.training or not torch.is_grad_enabled()
        if evaluating or self.alpha == 0.0:  # the student's plain CE (alpha=0: the no-distillation baseline)
            ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
            if evaluating:
                return {"loss": ce}
            return {
                "loss": ce,
                "ce_loss": ce.detach(),
                "temperature": t.detach().float(),
            }
        topk, full = None, None
        cut = slice(None, -1) if self.shift else slice(None)
        if "t_values" in batch:
            topk = (batch["t_values"][:, cut], batch["t_indices"][:, cut])
        elif "t_logits" in batch:
            full = batch["t_logits"][:, cut]
        else:
            full = self.teacher_logits(x, **kwargs)[:, cut]
        return kd_loss(logits, y, t, self.alpha, teacher_logits=full, teacher_topk=topk)

    def teacher_logits(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if self.teacher is None:
            raise DistillError("no teacher and no cached teacher logits in the batch")
        with torch.no_grad():  # not inference_mode: the result meets a learnable temperature in autograd
            out = logits_of(self.teacher(x, **kwargs))
        self.teacher_forwards += 1
        return out
