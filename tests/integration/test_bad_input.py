"""Property-based bad input (hypothesis): mutated config YAML, `key=value` arguments, checkpoint bytes,
manifests and metrics.jsonl. Each case ends in a valid result or one `HotloopError` line (exit 2 from the
CLI) naming the file or field - never another exception, never a partly written run directory, never a
lost previous run - and resume still picks the newest intact checkpoint.
Run: `python -m pytest tests/integration/test_bad_input.py` (about 200 generated cases).
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from hotloop import HotloopError, TrainConfig, Trainer  # noqa: E402
from hotloop import checkpoint as ckpt_io  # noqa: E402
from hotloop.cli import main  # noqa: E402
from hotloop.config import load_config, valid_keys  # noqa: E402

from ..unit.helpers import Regressor, regression_data  # noqa: E402

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
KEYS = valid_keys()
VALUES = st.one_of(st.sampled_from(["0", "-1", "1e9", "nan", "inf", "", "null", "true", "auto", "x", "[1, 2]", "{a: 1}",
                                    "1.5", "cuda:9", "SIGNOPE", "3"]), st.text(max_size=8))  # fmt: skip


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("hotloop: error:") and "Traceback" not in err, err
    return lines[0]


@settings(max_examples=60, **SETTINGS)
@given(args=st.lists(st.tuples(st.one_of(st.sampled_from(KEYS), st.text(min_size=1, max_size=10)), VALUES),
                     min_size=1, max_size=3))  # fmt: skip
def test_key_value_arguments(args, tmp_path_factory, capsys):
    items = [f"{k}={v}" for k, v in args]
    try:
        load_config(None, items, default_recipe="gpt")
        return  # a valid configuration (training it is tested elsewhere)
    except HotloopError:
        pass
    run_dir = tmp_path_factory.mktemp("kv") / "run"
    assert main(["fit", *items, f"run_dir={run_dir}"]) == 2
    line = _one_error_line(capsys)
    assert "`" in line or "key=value" in line  # names the key or shows the expected form
    assert not run_dir.exists()  # nothing written before the config was valid


BASE_YAML = yaml.safe_dump({"max_steps": 100, "batch_size": 16, "lr": 3e-4, "gpt": {"n_layer": 2, "n_head": 2},
                            "optim": {"beta2": 0.95}, "schedule": "cosine"})  # fmt: skip


@settings(max_examples=40, **SETTINGS)
@given(cut=st.integers(0, len(BASE_YAML)), junk=st.text(max_size=6), pos=st.integers(0, len(BASE_YAML)))
def test_mutated_config_yaml(cut, junk, pos, tmp_path_factory, capsys):
    text = BASE_YAML[:cut] + BASE_YAML[cut + 1 :]
    text = text[:pos] + junk + text[pos:]
    d = tmp_path_factory.mktemp("yaml")
    path = d / "cfg.yaml"
    path.write_text(text)
    try:
        load_config(path, [], default_recipe="gpt")
        return
    except HotloopError:
        pass
    assert main(["fit", "--config", str(path), f"run_dir={d / 'run'}"]) == 2
    _one_error_line(capsys)
    assert not (d / "run").exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A run with checkpoints at steps 5 and 10 (the newest gets mutated; 5 must then be picked)."""
    run_dir = tmp_path_factory.mktemp("trained")
    cfg = TrainConfig(device="cpu", batch_size=16, max_steps=10, log_every=5, eval_every=0, ckpt_every=5,
                      run_dir=str(run_dir), progress="off", tensorboard=False)  # fmt: skip
    Trainer(Regressor(), cfg).fit(regression_data(256))
    return run_dir


def _resume(run_dir: Path) -> Trainer:
    cfg = TrainConfig(device="cpu", batch_size=16, max_steps=12, log_every=5, eval_every=0, ckpt_every=5,
                      run_dir=str(run_dir), progress="off", tensorboard=False, resume="auto")  # fmt: skip
    t = Trainer(Regressor(), cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "skipping checkpoint ...: corrupted" is the expected warning
        t.fit(regression_data(256))
    return t


def _copy(trained: Path, tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("mut") / "run"
    shutil.copytree(trained, d)
    return d, ckpt_io.checkpoint_path(d, 10)


@settings(max_examples=25, **SETTINGS)
@given(pos=st.integers(0, 10**9), byte=st.integers(0, 255), truncate=st.booleans(), rehash=st.booleans())
def test_mutated_checkpoint_bytes(pos, byte, truncate, rehash, trained, tmp_path_factory):
    run_dir, newest = _copy(trained, tmp_path_factory)
    data = bytearray(newest.read_bytes())
    pos %= len(data)
    if truncate:
        data = data[:pos]
    else:
        data[pos] = byte
    newest.write_bytes(bytes(data))
    if rehash:  # the manifest matches the mutated bytes: only the loader stands between them and the run
        files = {newest.name: {"size": len(data), "sha256": ckpt_io.sha256_file(newest)}}
        ckpt_io._manifest_path(newest).write_text(json.dumps({"format": 1, "step": 10, "files": files}))
    try:
        t = _resume(run_dir)
    except HotloopError as e:
        assert rehash and str(newest) in str(e)  # an intact-looking file that is not a state: named, one line
        return
    assert t.state.step == 12  # resumed from an intact checkpoint (5, or 10 if the byte changed nothing)


@settings(max_examples=25, **SETTINGS)
@given(edit=st.sampled_from(["drop", "garbage", "size", "sha", "files", "empty", "list"]))
def test_mutated_manifest_falls_back_to_the_newest_intact(edit, trained, tmp_path_factory):
    run_dir, newest = _copy(trained, tmp_path_factory)
    mpath = ckpt_io._manifest_path(newest)
    m = json.loads(mpath.read_text())
    if edit == "drop":
        mpath.unlink()
    elif edit == "garbage":
        mpath.write_text("{not json")
    elif edit == "size":
        m["files"][newest.name]["size"] += 1
    elif edit == "sha":
        m["files"][newest.name]["sha256"] = "0" * 64
    elif edit == "files":
        m["files"] = {"step_00000010.pt": "x"}
    elif edit == "empty":
        mpath.write_text("")
    else:
        mpath.write_text("[]")
    if edit in ("size", "sha", "files"):
        mpath.write_text(json.dumps(m))
    t = _resume(run_dir)
    assert t.state.step == 12
    assert [r for r in t.history if r.get("event") == "resume"][0]["reason"] == "from step_00000005.pt"


@settings(max_examples=25, **SETTINGS)
@given(lines=st.lists(st.one_of(st.text(max_size=30), st.just('{"step": "x"}'), st.just("[1,2]"),
                                st.just('{"step": 99, "loss": "nan"}')), max_size=5))  # fmt: skip
def test_mutated_metrics_jsonl(lines, trained, tmp_path_factory):
    from hotloop.report import write_report

    run_dir, _ = _copy(trained, tmp_path_factory)
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write("\n".join(lines) + "\n")
    write_report([run_dir])  # the report reads what it can
    t = _resume(run_dir)
    assert t.state.step == 12
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(isinstance(r, dict) for r in rows) and rows[-1]["step"] == 12
    assert torch.isfinite(torch.tensor([r["loss"] for r in rows if isinstance(r.get("loss"), float)])).all()
