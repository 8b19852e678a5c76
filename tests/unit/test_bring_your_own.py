"""What users bring: Hugging Face models, padded dict samples with a collate_fn, their own optimizer and
scheduler, torchmetrics, callbacks with device statistics, and tensor token counts.

transformers and torchmetrics are test extras (`pip install -e '.[test]'`); the models are built from
small configs, nothing is downloaded. References: loss falls and eval works; resumes equal the
uninterrupted run bit for bit (CPU, fp32); the hot loop makes no host read between log boundaries.
Run: `python -m pytest tests/unit/test_bring_your_own.py`.
"""

from __future__ import annotations

import functools
import json
import math
import shutil

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

from hotloop import Callback, TrainConfig, Trainer
from hotloop import checkpoint as ckpt_io
from hotloop.doctor import HostReadCounter

from .helpers import Regressor, regression_data

VOCAB, SEQ = 64, 16


def _cfg(run_dir, **kw) -> TrainConfig:
    base = dict(device="cpu", batch_size=8, max_steps=30, lr=3e-3, log_every=10, eval_every=15, run_dir=str(run_dir),
                progress="off", tensorboard=False, schedule="constant", seed=0)  # fmt: skip
    base.update(kw)
    return TrainConfig(**base)


def _rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _lm_tokens(n: int, seed: int = 0) -> torch.Tensor:
    """Learnable sequences: each row counts up from a random start (mod VOCAB)."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (n, 1), generator=g)
    return (start + torch.arange(SEQ)) % VOCAB


def _gpt2():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2,
                                  bos_token_id=0, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg)


class LMDict(Dataset):
    def __init__(self, ids: torch.Tensor) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


# -- Hugging Face models with the default loss_fn -------------------------------------------------


def test_hf_causal_lm_trains_evaluates_and_resumes_exactly(tmp_path):
    ids = _lm_tokens(256)
    data, val = LMDict(ids[:224]), LMDict(ids[224:])
    full = Trainer(_gpt2(), _cfg(tmp_path / "full", ckpt_every=10, keep_last=5, lr=1e-2))
    full.fit(data, val)
    rows = [r for r in _rows(tmp_path / "full") if "loss" in r]
    assert rows[0]["loss"] > rows[-1]["loss"] + 1.0, rows  # ln(64) = 4.16 at the start
    assert "val_loss" in _rows(tmp_path / "full")[-1]
    assert not any(k in rows[0] for k in ("logits", "past_key_values"))
    shutil.copytree(tmp_path / "full", tmp_path / "resumed")
    for f in ckpt_io.committed(tmp_path / "resumed"):
        if f.step > 20:
            ckpt_io._manifest_path(f.path).unlink()
            f.path.unlink()
    resumed = Trainer(_gpt2(), _cfg(tmp_path / "resumed", ckpt_every=10, keep_last=5, lr=1e-2, resume="auto"))
    resumed.fit(data, val)
    for (k, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), k


def test_hf_sequence_classifier_trains_with_the_default_loss(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=SEQ, num_labels=3)  # fmt: skip
    model = transformers.BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, VOCAB, (384, SEQ), generator=g)
    labels = ids[:, 0] % 3  # the class is readable from the first token
    data = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    trainer = Trainer(model, _cfg(tmp_path, max_steps=60, log_every=20, eval_every=0, num_classes=3))
    trainer.fit(data, {k: v[:64] for k, v in data.items()})
    rows = [r for r in _rows(tmp_path) if "loss" in r]
    assert abs(rows[0]["loss"] - math.log(3)) < 0.5 and rows[-1]["loss"] < rows[0]["loss"] - 0.3, rows
    assert trainer.validate({k: v[:64] for k, v in data.items()})["val_loss"] < rows[0]["loss"]


def test_hf_teacher_and_student_distill(tmp_path):
    transformers = pytest.importorskip("transformers")
    from hotloop.distill import Distiller, StudentWithTemperature, Temperature

    teacher = _gpt2()
    teacher.config.use_cache = True
    scfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2,
                                   bos_token_id=0, eos_token_id=0)  # fmt: skip
    student = StudentWithTemperature(transformers.GPT2LMHeadModel(scfg), Temperature(2.0))
    distiller = Distiller(teacher, alpha=0.5, shift_labels=True)
    assert teacher.config.use_cache is False  # the seeds: no KV cache in the teacher while distilling
    ids = _lm_tokens(128)
    trainer = Trainer(student, _cfg(tmp_path, eval_every=0), loss_fn=distiller)
    trainer.fit({"input_ids": ids, "labels": ids})
    rows = [r for r in _rows(tmp_path) if "loss" in r]
    assert {"kd_loss", "ce_loss", "temperature"} <= set(rows[-1]) and rows[-1]["loss"] < rows[0]["loss"]
    assert distiller.teacher_forwards == 30 and not any(p.grad is not None for p in teacher.parameters())


# -- data with a collate_fn ----------------------------------------------------------------------


class VariableLength(Dataset):
    """Dict samples of different lengths: default_collate cannot stack them."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.lengths = torch.randint(3, SEQ, (n,), generator=g).tolist()
        self.starts = torch.randint(0, VOCAB, (n,), generator=g).tolist()

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = (self.starts[i] + torch.arange(self.lengths[i])) % VOCAB
        return {"input_ids": ids, "labels": ids}


def pad(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    width = max(len(s["input_ids"]) for s in samples)
    out = {"input_ids": torch.zeros(len(samples), width, dtype=torch.long)}
    out["labels"] = torch.full((len(samples), width), -100)
    out["attention_mask"] = torch.zeros(len(samples), width, dtype=torch.long)
    for i, s in enumerate(samples):
        n = len(s["input_ids"])
        out["input_ids"][i, :n], out["labels"][i, :n], out["attention_mask"][i, :n] = s["input_ids"], s["labels"], 1
    return out


def test_collate_fn_serves_training_and_validation_loaders(tmp_path):
    calls = {"n": 0}

    def counting_pad(samples):
        calls["n"] += 1
        return pad(samples)

    trainer = Trainer(_gpt2(), _cfg(tmp_path), collate_fn=counting_pad)
    trainer.fit(VariableLength(200), VariableLength(40))
    assert calls["n"] >= 30 + 5  # 30 training batches, and the validation batches
    rows = [r for r in _rows(tmp_path) if "loss" in r]
    assert rows[-1]["loss"] < rows[0]["loss"]


# -- the user's optimizer and scheduler ----------------------------------------------------------


def _regression_run(run_dir, optimizer, scheduler, **kw) -> Trainer:
    torch.manual_seed(0)
    model = Regressor(dropout=0.1)
    opt = optimizer(model) if callable(optimizer) and not isinstance(optimizer, functools.partial) else optimizer
    trainer = Trainer(model, _cfg(run_dir, max_steps=40, eval_every=0, ckpt_every=10, keep_last=5, **kw),
                      optimizer=opt, scheduler=scheduler)  # fmt: skip
    trainer.fit(regression_data(256))
    return trainer


def _cosine(opt):
    return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=40, eta_min=1e-4)


@pytest.mark.parametrize(
    "optimizer",
    [
        functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9),  # a factory: gets hotloop's decay groups
        lambda model: torch.optim.AdamW(model.parameters(), lr=3e-3, fused=True),  # an instance
    ],
    ids=["sgd-factory", "adamw-instance"],
)
def test_user_cosine_annealing_resumes_exactly(tmp_path, optimizer):
    full = _regression_run(tmp_path / "full", optimizer, _cosine)
    lrs = [r["lr"] for r in _rows(tmp_path / "full") if "lr" in r]
    assert lrs[0] > lrs[-1] > 0  # the user's schedule ran, once per optimizer step
    shutil.copytree(tmp_path / "full", tmp_path / "resumed")
    for f in ckpt_io.committed(tmp_path / "resumed"):
        if f.step > 20:
            ckpt_io._manifest_path(f.path).unlink()
            f.path.unlink()
    resumed = _regression_run(tmp_path / "resumed", optimizer, _cosine, resume="auto")
    for a, b in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert resumed.scheduler.last_epoch == 40


def test_rollback_backs_off_a_user_scheduler(tmp_path):
    """A loss spike at steps 26-30 rolls back to the checkpoint of step 20 with a CosineAnnealingLR: every LR
    from then on is half the uninterrupted schedule's (base LR and eta_min scaled alike)."""
    calls = {"n": 0}

    def spiky(model, batch):
        calls["n"] += 1
        loss = model(*batch)
        return loss * 1000 if 26 <= calls["n"] <= 30 else loss

    def run(run_dir, loss_fn):
        torch.manual_seed(0)
        model = Regressor()
        cfg = _cfg(run_dir, max_steps=40, log_every=5, eval_every=0, ckpt_every=10, keep_last=5)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=True)
        Trainer(model, cfg, loss_fn=loss_fn, optimizer=opt, scheduler=_cosine).fit(regression_data(256))
        return {r["step"]: r for r in _rows(run_dir)}

    clean = run(tmp_path / "clean", None)
    rolled = run(tmp_path / "rolled", spiky)
    events = [r for r in rolled.values() if r.get("event") == "rollback"]
    assert len(events) == 1 and events[0]["step"] == 20, rolled
    assert rolled[40]["lr"] == pytest.approx(0.5 * clean[40]["lr"], rel=1e-6)


def test_foreign_optimizer_is_a_clear_error(tmp_path):
    from hotloop import ConfigError

    other = nn.Linear(2, 2)
    with pytest.raises(ConfigError, match="not the model's"):
        Trainer(Regressor(), _cfg(tmp_path), optimizer=torch.optim.SGD(other.parameters(), lr=0.1))


def test_non_fused_user_optimizer_gets_a_one_line_note(tmp_path, capsys):
    model = Regressor()
    Trainer(model, _cfg(tmp_path), optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True))
    out = capsys.readouterr().out
    assert "not fused" in out and len([line for line in out.splitlines() if "fused" in line]) == 1


# -- torchmetrics, callbacks and token counts at the boundary's single read -----------------------


class Classifier(nn.Module):
    def __init__(self, acc_train, acc_val_sink=None) -> None:
        super().__init__()
        self.net = nn.Linear(8, 3)
        self.acc = acc_train

    def forward(self, x, y):
        logits = self.net(x)
        self.acc.update(logits.argmax(-1), y)
        return {"loss": nn.functional.cross_entropy(logits, y), "acc": self.acc, "logits": logits}


class Stats(Callback):
    """A user's on-device statistic: the mean |weight| of the first layer, read with hotloop's row."""

    def log_tensors(self, trainer):
        return {"w_abs": trainer.model.net.weight.detach().abs().mean()}


def _classification(n=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long()


def test_torchmetrics_and_callback_tensors_reach_metrics_jsonl_in_the_one_read(tmp_path):
    torchmetrics = pytest.importorskip("torchmetrics")
    acc = torchmetrics.Accuracy(task="multiclass", num_classes=3, validate_args=False)  # checks read the device
    model = Classifier(acc)
    counter = HostReadCounter()

    class Label(Callback):
        def on_step_end(self, trainer, output):
            counter.label = trainer.state.step

    trainer = Trainer(model, _cfg(tmp_path, lr=0.05, eval_every=10), callbacks=[Stats(), Label()],
                      batch_tokens=lambda b: (b[1] >= 0).sum())  # fmt: skip
    counter.label = 0
    with counter:
        trainer.fit(_classification(), _classification(128, seed=1))
    rows = _rows(tmp_path)
    assert all(0.0 <= r["acc"] <= 1.0 and 0.0 <= r["val_acc"] <= 1.0 for r in rows), rows
    assert rows[-1]["acc"] > 0.6 and "w_abs" in rows[0] and rows[-1]["tokens_per_s"] > 0
    assert trainer.state.tokens == 30 * 8
    # Validation had its own state: the last row's train accuracy covers the 10 steps of the interval only.
    x, y = _classification()
    per_label = counter.by_label()
    for step in range(30):  # boundaries at 10 and 20 (log + eval); 30 is the final one
        expected = 1 if step in (10, 20) else 0
        assert per_label.get(step, 0) <= expected, (step, [r for r in counter.reads if r.label == step])


def test_validation_metric_state_is_kept_apart_from_training(tmp_path):
    torchmetrics = pytest.importorskip("torchmetrics")
    acc = torchmetrics.Accuracy(task="multiclass", num_classes=3)
    trainer = Trainer(Classifier(acc), _cfg(tmp_path, max_steps=5, log_every=100, eval_every=0))
    trainer.fit(_classification())
    acc.reset()
    acc.update(torch.tensor([0, 1]), torch.tensor([0, 1]))  # a training state of 2/2 correct
    trainer._step_fn.metric_objects["acc"] = acc
    val = trainer.validate(_classification(128, seed=1))
    assert "val_acc" in val
    assert acc.compute().item() == 1.0 and acc.tp.sum().item() == 2  # training's state came back untouched


def test_kd_loss_float_temperature_makes_no_host_to_device_copy():
    from hotloop.distill import kd_loss

    s, t = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8)
    with HostReadCounter() as c:
        out = kd_loss(s, torch.randint(0, 8, (4,)), 2.0, 0.5, teacher_logits=t)
    assert c.total == 0 and out["temperature"].item() == 2.0
