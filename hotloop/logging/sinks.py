"""The sinks `loggers=` names, and building them for a run.

    loggers=auto                        metrics.jsonl + TensorBoard when installed (and tensorboard=true)
    loggers=jsonl,csv,tensorboard       any of: jsonl, csv, tensorboard, wandb, mlflow
    Trainer(..., loggers=[my_sink])     plus any object with log(row) and an optional close()

metrics.jsonl is always written (it is the source of truth the report and resume read) and the console
follows `progress`. W&B and MLflow go through their own libraries (optional extras), carry the resolved
config, and a resumed run (`resume=...`) continues the same W&B/MLflow run: its id is kept in the run
directory. W&B honours `WANDB_MODE=offline`; MLflow writes to `$MLFLOW_TRACKING_URI`, else a local SQLite
store, `run_dir/mlflow.db` (MLflow 3 retired the plain file store).
"""

from __future__ import annotations

import csv
import importlib.util
import math
import os
import uuid
from pathlib import Path
from typing import Any

from hotloop.errors import ConfigError

KNOWN = ("jsonl", "csv", "tensorboard", "wandb", "mlflow")
EXTRA = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def parse_loggers(value: str) -> list[str]:
    names = [n.strip().lower() for n in value.split(",") if n.strip()]
    if names == ["auto"]:
        return names
    for n in names:
        if n not in KNOWN:
            raise ConfigError(f"invalid value for `loggers`: {n!r}; allowed: auto or a comma-separated list of "
                              f"{', '.join(KNOWN)}")  # fmt: skip
    return names


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class CsvSink:
    """`metrics.csv`: one row per boundary; a column that appears later rewrites the header (small files)."""

    fast = True
    name = "csv"

    def __init__(self, path: Path) -> None:
        self.path, self.columns, self.rows = path, [], []
        if path.is_file():  # a resumed run: keep the rows the run already wrote
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                self.columns, self.rows = list(reader.fieldnames or []), list(reader)

    def log(self, row: dict[str, Any]) -> None:
        flat = {k: (";".join(map(str, v)) if isinstance(v, list) else v) for k, v in row.items()}
        new = [k for k in flat if k not in self.columns]
        self.rows.append(flat)
        if new or not self.path.is_file():
            self.columns += new
            tmp = self.path.with_suffix(".csv.tmp")
            with open(tmp, "w", newline="") as f:
                w = csv.DictWriter(f, self.columns)
                w.writeheader()
                w.writerows(self.rows)
            os.replace(tmp, self.path)
        else:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, self.columns).writerow(flat)


class WandbSink:
    """Weights & Biases through `wandb`; the run id lives in `run_dir/wandb_run_id` so a resume continues it."""

    name = "wandb"

    def __init__(self, run_dir: Path, config: dict[str, Any], resumed: bool, project: str | None = None) -> None:
        import wandb

        id_file = run_dir / "wandb_run_id"
        run_id = id_file.read_text().strip() if resumed and id_file.is_file() else uuid.uuid4().hex[:12]
        self.run = wandb.init(project=project or os.environ.get("WANDB_PROJECT", "hotloop"), id=run_id,
                              resume="allow", config=config, dir=str(run_dir), name=run_dir.name)  # fmt: skip
        id_file.write_text(run_id)

    def log(self, row: dict[str, Any]) -> None:
        values = {k: v for k, v in _numbers(row).items() if k not in ("step",)}
        if "event" in row:
            values[f"event/{row['event']}"] = 1.0
        self.run.log(values, step=int(row["step"]))

    def close(self) -> None:
        self.run.finish()


class MlflowSink:
    """MLflow through `mlflow`; params are the resolved config, the run id lives in `run_dir/mlflow_run_id`."""

    name = "mlflow"

    def __init__(self, run_dir: Path, config: dict[str, Any], resumed: bool) -> None:
        import mlflow

        self.mlflow = mlflow
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"
        self.client = mlflow.tracking.MlflowClient(tracking_uri=uri)
        id_file = run_dir / "mlflow_run_id"
        if resumed and id_file.is_file():
            self.run_id = id_file.read_text().strip()
        else:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "hotloop")
            exp = self.client.get_experiment_by_name(name)
            exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(name)
            self.run_id = self.client.create_run(exp_id, run_name=run_dir.name).info.run_id
            for k, v in _flatten(config).items():
                self.client.log_param(self.run_id, k, str(v)[:500])
            id_file.write_text(self.run_id)

    def log(self, row: dict[str, Any]) -> None:
        step = int(row["step"])
        metrics = [self.mlflow.entities.Metric(k, v, 0, step) for k, v in _numbers(row).items()
                   if k != "step" and math.isfinite(v)]  # fmt: skip
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def build_sinks(names: list[str], run_dir: Path, config: dict[str, Any], resumed: bool, tensorboard: bool) -> list[Any]:
    """The named sinks (metrics.jsonl always; `auto`: TensorBoard when installed and `tensorboard` is on)."""
    from hotloop.logging.jsonl import JsonlSink
    from hotloop.logging.tensorboard import TensorBoardSink, tensorboard_available

    wanted = (
        ["jsonl", *(["tensorboard"] if tensorboard and tensorboard_available() else [])] if names == ["auto"] else names
    )
    for n in wanted:
        if n in EXTRA and importlib.util.find_spec(EXTRA[n]) is None:
            raise ConfigError(f"loggers={n} needs the `{EXTRA[n]}` package: pip install 'hotloop[{EXTRA[n]}]'")
    sinks: list[Any] = [JsonlSink(run_dir / "metrics.jsonl")]
    for n in dict.fromkeys(wanted):
        if n == "csv":
            sinks.append(CsvSink(run_dir / "metrics.csv"))
        elif n == "tensorboard":
            sinks.append(TensorBoardSink(run_dir / "tensorboard"))
        elif n == "wandb":
            sinks.append(WandbSink(run_dir, config, resumed))
        elif n == "mlflow":
            sinks.append(MlflowSink(run_dir, config, resumed))
    return sinks
