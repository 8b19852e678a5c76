"""`hotloop report`: the verdict, the curves with their event markers, and a page that a real headless
browser (Debian's chromium) loads with no console error and no network request.
Run: `python -m pytest tests/integration/test_report.py` (the browser test skips without chromium)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from hotloop import TrainConfig, Trainer
from hotloop.report import write_report

from ..unit.helpers import Regressor, regression_data


@pytest.fixture(scope="module")
def troubled_run(tmp_path_factory):
    """A run with a loss spike (rolled back) and a non-finite step (skipped)."""
    run_dir = tmp_path_factory.mktemp("troubled")
    calls = {"n": 0}

    def loss_fn(model, batch):
        calls["n"] += 1
        loss = model(*batch)
        if calls["n"] == 12:
            return loss * float("nan")
        return loss * 1000 if 26 <= calls["n"] <= 30 else loss

    cfg = TrainConfig(device="cpu", batch_size=16, max_steps=60, log_every=5, eval_every=20, ckpt_every=10,
                      run_dir=str(run_dir), progress="off", tensorboard=False)  # fmt: skip
    with pytest.warns(UserWarning, match="non-finite"):
        Trainer(Regressor(), cfg, loss_fn=loss_fn).fit(regression_data(512), regression_data(64, seed=1))
    return run_dir


def test_verdict_curves_and_events(troubled_run):
    page = write_report([troubled_run]).read_text()
    assert re.search(r"[12] rollback\(s\); step 25: loss spike", page) and "1 skipped (first at step 12)" in page
    assert "validation loss" in page and "sha256" in page and "max_steps: 60" in page
    assert page.count("<img") >= 4 and "http://" not in page.split("</style>")[1]
    assert (troubled_run / "report_loss.png").stat().st_size > 10_000


def test_several_runs_overlay_and_no_matplotlib_still_has_tables(troubled_run, tmp_path, monkeypatch):
    other = tmp_path / "other"
    shutil.copytree(troubled_run, other)
    out = write_report([troubled_run, other], out=tmp_path / "cmp.html")
    assert "troubled" in out.read_text() and "other" in out.read_text()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    page = write_report([troubled_run], out=tmp_path / "plain.html").read_text()
    assert "matplotlib is not installed" in page and "<img" not in page and "rollback" in page


def test_report_of_a_non_run_is_one_clear_line(tmp_path):
    from hotloop import ConfigError

    with pytest.raises(ConfigError, match="no metrics.jsonl"):
        write_report([tmp_path])


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_a_headless_browser_shows_the_page_without_errors_or_network(troubled_run, tmp_path):
    page = write_report([troubled_run])
    shot = tmp_path / "shot.png"
    res = subprocess.run(["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                          "--log-level=0", "--window-size=1200,1800", f"--screenshot={shot}", page.as_uri()],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    console = [line for line in res.stderr.splitlines() if "CONSOLE" in line]
    assert not console, console  # a blocked request (the page's CSP forbids all) would show here too
    assert shot.stat().st_size > 50_000  # the plots are in the picture, not an empty page
