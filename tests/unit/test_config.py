"""Config: layering, typed overrides, and errors that name the field and the fix."""

from __future__ import annotations

import pytest

from hotloop import ConfigError, TrainConfig
from hotloop.config import build_config, load_config, parse_overrides, valid_keys


def test_required_top_level_fields_exist():
    keys = set(valid_keys())
    for name in (
        "max_steps",
        "epochs",
        "batch_size",
        "lr",
        "weight_decay",
        "warmup_steps",
        "schedule",
        "grad_accum",
        "clip_grad",
        "precision",
        "compile",
        "log_every",
        "eval_every",
        "run_dir",
        "seed",
        "device",
        "recipe",
    ):
        assert name in keys


def test_overrides_are_typed_by_field():
    cfg = load_config(
        None,
        ["lr=3e-4", "max_steps=1e3", "compile=true", "clip_grad=null", "gpt.n_layer=2", "device=cpu", "precision=bf16"],
    )
    assert cfg.lr == pytest.approx(3e-4) and isinstance(cfg.lr, float)
    assert cfg.max_steps == 1000 and isinstance(cfg.max_steps, int)
    assert cfg.compile is True
    assert cfg.clip_grad is None
    assert cfg.gpt.n_layer == 2
    assert cfg.precision == "bf16"


def test_unknown_key_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"max_stepz.*did you mean `max_steps`"):
        load_config(None, ["max_stepz=3"])
    with pytest.raises(ConfigError, match=r"gpt.n_layr.*`gpt.n_layer`"):
        load_config(None, ["gpt.n_layr=3"])


@pytest.mark.parametrize(
    "item, field, allowed",
    [
        ("precision=fp8", "precision", "auto, bf16, fp16, fp32"),
        ("batch_size=0", "batch_size", "positive"),
        ("lr=fast", "lr", "a number"),
        ("schedule=cosin", "schedule", "warmup_cosine"),
        ("device=gpu", "device", "cuda:N"),
        ("gpt.n_head=3", "gpt.n_head", "divisor"),
        ("grad_accum=2.5", "grad_accum", "integer"),
        ("compile=sometimes", "compile", "reduce-overhead"),
    ],
)
def test_bad_value_names_field_value_and_allowed(item, field, allowed):
    with pytest.raises(ConfigError) as e:
        load_config(None, [item])
    msg = str(e.value)
    assert f"`{field}`" in msg and item.split("=", 1)[1] in msg and allowed in msg


def test_yaml_then_cli_then_recipe_layering(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("lr: 0.01\nbatch_size: 8\ngpt:\n  n_layer: 3\noptim.beta2: 0.99\n")
    cfg = load_config(f, ["batch_size=4", "recipe=gpt", "device=cpu"])
    assert cfg.lr == 0.01 and cfg.batch_size == 4 and cfg.gpt.n_layer == 3 and cfg.optim.beta2 == 0.99
    assert cfg.max_steps == 600  # from the gpt recipe's CPU defaults
    cfg2 = load_config(None, [], default_recipe="gpt")
    assert cfg2.recipe == "gpt" and cfg2.run_dir == "runs/gpt"


def test_yaml_errors_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("bach_size: 3\n")
    with pytest.raises(ConfigError, match="batch_size"):
        load_config(typo)


def test_round_trip_and_replace(tmp_path):
    cfg = TrainConfig(max_steps=5, lr=0.1)
    cfg.save(tmp_path / "c.yaml")
    again = load_config(tmp_path / "c.yaml")
    assert again == cfg
    assert cfg.replace(**{"gpt.n_embd": 64, "gpt.n_head": 4}).gpt.n_embd == 64
    with pytest.raises(ConfigError):
        build_config({"optim": 3})


def test_parse_overrides_requires_key_value():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["max_steps"])
