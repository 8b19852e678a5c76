"""The `hotloop` command.

    hotloop fit [--config FILE] [key=value ...]    train (default: the `gpt` recipe)
    hotloop validate run_dir=DIR [key=value ...]   evaluate a saved run on its validation split
    hotloop sample run_dir=DIR [prompt="def "]     generate text from a saved `gpt` run
    hotloop fit --help-config                      every config key with its doc

User errors (an unknown key, a bad value, unusable data) print one message naming the fix, with no
traceback, and exit with status 2.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import os
import sys
from typing import Any

from hotloop.errors import ConfigError, HotloopError


def _config_help() -> str:
    from hotloop.config import TrainConfig, valid_keys

    docs = _field_docs(TrainConfig)
    lines = []
    for key in valid_keys():
        lines.append(f"  {key:<24} {docs.get(key, '')}")
    return "config keys (set as key=value, or in a YAML file passed with --config):\n" + "\n".join(lines)


def _field_docs(cls: type, prefix: str = "") -> dict[str, str]:
    """Attribute docstrings (the string under each field), read from the class source."""
    import inspect
    import typing

    try:
        tree = ast.parse(inspect.getsource(cls).lstrip())
    except (OSError, TypeError):
        return {}
    docs: dict[str, str] = {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, nxt in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[prefix + node.target.id] = str(nxt.value.value).strip()  # type: ignore[attr-defined]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            docs.update(_field_docs(hints[f.name], prefix + f.name + "."))
    return docs


def _fit(args: argparse.Namespace) -> int:
    from hotloop.config import load_config
    from hotloop.recipes import DEFAULT_RECIPE, get_recipe

    if args.help_config:
        print(_config_help())
        return 0
    cfg = load_config(args.config, args.overrides, default_recipe=DEFAULT_RECIPE)
    if cfg.doctor:
        from hotloop.doctor.report import run_doctor

        rest = [o for o in args.overrides if o.split("=", 1)[0].strip() != "doctor"]
        config = ["--config", args.config] if args.config else []
        return run_doctor(["python", "-m", "hotloop", "fit", *config, *rest])
    if cfg.recipe is None:
        raise ConfigError("hotloop fit needs a recipe (recipe=gpt); to train your own model use hotloop.Trainer")
    try:
        get_recipe(cfg.recipe).run(cfg)
    finally:  # at the end of every run, a preempted one included
        _write_report(cfg.run_dir)
    return 0


def _write_report(run_dir: str) -> None:
    import os
    from pathlib import Path

    if os.environ.get("RANK", "0") != "0" or not (Path(run_dir) / "metrics.jsonl").is_file():
        return
    from hotloop.report import write_report

    try:
        print(f"hotloop: report: {write_report([run_dir])}", flush=True)
    except Exception as e:  # the run's own outcome matters more than its report
        print(f"hotloop: could not write the report of {run_dir}: {e}", file=sys.stderr)


def _report(args: argparse.Namespace) -> int:
    from hotloop.report import write_report

    print(write_report(args.run_dirs, out=args.out))
    return 0


def _keyvals(items: list[str], allowed: dict[str, Any]) -> dict[str, Any]:
    out = dict(allowed)
    for item in items:
        if "=" not in item:
            raise ConfigError(f"expected key=value, got `{item}`")
        k, v = item.split("=", 1)
        if k not in allowed:
            close = difflib.get_close_matches(k, list(allowed), n=1)
            hint = f"; did you mean `{close[0]}`?" if close else f"; allowed: {', '.join(allowed)}"
            raise ConfigError(f"unknown key `{k}`{hint}")
        default = allowed[k]
        try:
            out[k] = type(default)(v) if default is not None and not isinstance(default, str) else v
        except ValueError:
            raise ConfigError(f"invalid value for `{k}`: {v!r}; expected {type(default).__name__}") from None
    if out.get("run_dir") is None:
        raise ConfigError("run_dir=DIR is required (the directory of a finished `hotloop fit` run)")
    return out


def _sample(args: argparse.Namespace) -> int:
    from hotloop.recipes.gpt import load_model, sample_text

    opts = _keyvals(
        args.overrides,
        {
            "run_dir": None,
            "prompt": "def ",
            "max_new_tokens": 300,
            "temperature": 0.8,
            "top_k": 50,
            "seed": 0,
            "device": "auto",
        },
    )
    model, _, dev = load_model(opts["run_dir"], opts["device"])
    print(
        sample_text(
            model, opts["prompt"], opts["max_new_tokens"], dev, opts["temperature"], opts["top_k"] or None, opts["seed"]
        )
    )
    return 0


def _validate(args: argparse.Namespace) -> int:
    from hotloop.config import build_config, parse_overrides
    from hotloop.recipes.corpus import eval_windows, load_corpus
    from hotloop.recipes.gpt import load_model
    from hotloop.trainer import Trainer

    opts = _keyvals(args.overrides, {"run_dir": None, "device": "auto", "eval_batches": 16})
    from hotloop.checkpoint import load_checkpoint

    if load_checkpoint(opts["run_dir"])["config"].get("recipe") == "classify":
        from hotloop.recipes.classify import load_for_validation

        model, cfg, val_data = load_for_validation(opts["run_dir"], opts["device"])
        for k, v in Trainer(model, cfg).validate(val_data).items():
            print(f"{k}: {v:.4f}")
        return 0
    model, cfg, _ = load_model(opts["run_dir"], opts["device"])
    cfg = build_config(
        parse_overrides([f"device={opts['device']}", f"eval_batches={opts['eval_batches']}"]), base=cfg.to_dict()
    )
    _, val = load_corpus()
    trainer = Trainer(model, cfg)
    metrics = trainer.validate(eval_windows(val, cfg.gpt.block_size, cfg.batch_size, cfg.eval_batches or 16))
    for k, v in metrics.items():
        print(f"{k}: {v:.4f}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from hotloop.benchmarks import check_variants, run_bench

    variants = [v.strip() for v in args.variants.split(",")] if args.variants else None
    check_variants(variants, args.device)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda but no CUDA device is available; use --device cpu")
    if args.workload == "overhead":
        from hotloop.benchmarks.overhead import run_overhead

        rows = run_overhead(rounds=args.rounds, steps=args.steps or 2000)
        if args.json:
            import json
            from pathlib import Path

            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    run_bench(args.workload, args.device, variants, rounds=args.rounds, steps=args.steps, json_path=args.json)
    return 0


def _lint(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hotloop.lint import RULES, explain, lint_paths, load_settings
    from hotloop.lint import output as fmt

    if args.explain:
        code = args.explain.upper()
        if code not in RULES:
            raise ConfigError(f"unknown rule `{args.explain}`; rules: {', '.join(RULES)}")
        print(explain(code))
        return 0
    paths = args.paths or ["."]
    for p in paths:
        if not Path(p).exists():
            raise ConfigError(f"no such file or directory: {p}")
    settings = load_settings(Path(paths[0]).resolve() if Path(paths[0]).is_dir() else Path(paths[0]).resolve().parent)

    def codes(value: str | None, key: str) -> list[str] | None:
        if value:
            return [c.strip().upper() for c in value.split(",") if c.strip()]
        return [str(c).upper() for c in settings.get(key, [])] or None

    fixes: dict = {}
    findings = lint_paths(paths, select=codes(args.select, "select"), ignore=codes(args.ignore, "ignore"),
                          exclude=list(settings.get("exclude", [])), fix=args.fix, fixes=fixes)  # fmt: skip
    if args.fix:  # on stderr, so --format json/sarif on stdout stays machine-readable
        print(fmt.fix_summary(fixes), file=sys.stderr)
    print({"text": fmt.text, "json": fmt.as_json, "sarif": fmt.sarif}[args.format](findings))
    return 1 if findings else 0


def _doctor(args: argparse.Namespace) -> int:
    from hotloop.doctor.report import run_doctor

    cmd = list(args.command_line)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        usage = "hotloop doctor [--steps N] [--json FILE] [--trace FILE] -- python SCRIPT [ARGS...]"
        raise ConfigError(f"nothing to run: {usage}")
    return run_doctor(cmd, steps=args.steps, json_path=args.json, trace=args.trace)


def _one_line(text: str) -> str:
    """An error is one line: control characters (a key typed with a newline, say) are shown escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hotloop", description="A PyTorch training engine whose hot loop never waits on the host."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    fit = sub.add_parser("fit", help="train (default recipe: gpt)")
    fit.add_argument("--config", help="YAML file of config keys")
    fit.add_argument("--help-config", action="store_true", help="list every config key")
    fit.add_argument("overrides", nargs="*", metavar="key=value")
    fit.set_defaults(func=_fit)
    val = sub.add_parser("validate", help="evaluate a saved gpt run on its validation split")
    val.add_argument("overrides", nargs="*", metavar="key=value")
    val.set_defaults(func=_validate)
    smp = sub.add_parser("sample", help="generate text from a saved gpt run")
    smp.add_argument("overrides", nargs="*", metavar="key=value")
    smp.set_defaults(func=_sample)
    doc = sub.add_parser("doctor", help="run a training script and report its host syncs and step time")
    doc.add_argument("--steps", type=int, default=0,
                     help="stop cleanly after N optimizer steps (backward() calls when the script builds no "
                     "torch.optim optimizer; 0: run to the end)")  # fmt: skip
    doc.add_argument("--json", help="write the report as JSON")
    doc.add_argument("--trace", help="write a Chrome trace (torch.profiler) of optimizer steps 2-4 to FILE")
    doc.add_argument("command_line", nargs=argparse.REMAINDER, metavar="-- python SCRIPT [ARGS...]")
    doc.set_defaults(func=_doctor)
    lint = sub.add_parser(
        "lint", help="find training-loop anti-patterns in Python files (rules HL001...)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="suppressing findings:\n"
        "  # noqa: HL001        on a line: skip that rule there (a bare `# noqa` skips every rule)\n"
        "  # sync: <why>        on a line: an intended host read (a value the host must have, e.g. a\n"
        "                       data-dependent stop); silences the sync rules HL001/2/5/6/7/22/23 there\n"
        "  [tool.hotloop.lint]  in pyproject.toml: select = [...], ignore = [...], exclude = [...]\n"
        "exit status: 0 clean, 1 findings, 2 usage error",
    )  # fmt: skip
    lint.add_argument("paths", nargs="*", metavar="PATH", help="files or directories (default: .)")
    lint.add_argument("--format", choices=["text", "json", "sarif"], default="text")
    lint.add_argument("--select", help="comma-separated codes or prefixes to check (e.g. HL001,HL01)")
    lint.add_argument("--ignore", help="comma-separated codes or prefixes to skip")
    lint.add_argument("--fix", action="store_true",
                      help="apply the safe mechanical fixes (HL003, HL012, HL013; see --explain) and print, on "
                      "stderr, each change and each fixable finding left alone with the reason")  # fmt: skip
    lint.add_argument("--explain", metavar="CODE", help="explain a rule: why, a bad and a good example, the fix")
    lint.set_defaults(func=_lint)
    rep = sub.add_parser("report", help="write a self-contained HTML report of one or more runs (curves overlaid)")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    rep.add_argument("--out", help="the HTML file (default: RUN_DIR/report.html of the first run)")
    rep.set_defaults(func=_report)
    bench = sub.add_parser("bench", help="benchmark hotloop against plain PyTorch, Lightning and Accelerate")
    bench.add_argument(
        "--workload",
        choices=["mlp", "cnn", "gpt", "gpt2", "overhead"],
        default="mlp",
        help="gpt2: GPT-2 small's real shape (CUDA); overhead: per-step host cost on Linear(8,8)",
    )
    bench.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    bench.add_argument(
        "--variants",
        help="comma-separated subset of plain,naive,hotloop,lightning,accelerate "
        "(default: those five), hotloop-graphs (CUDA only: compile=reduce-overhead), hotloop-step-graph "
        "(CUDA only: cuda_graph=step) and hotloop-eager (CUDA only: cuda_graph=off)",
    )
    bench.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is reported")
    bench.add_argument("--steps", type=int, help="measured steps per round (after warmup)")
    bench.add_argument("--json", help="write the result rows to this JSON file")
    bench.set_defaults(func=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    code: int | None = None
    try:
        code = args.func(args)
        return code
    except HotloopError as e:
        print(f"hotloop: error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hotloop: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `hotloop lint . | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (no second error at interpreter exit)
        return 0
    except Exception as e:
        dist_mod = sys.modules.get("hotloop.distributed")
        if dist_mod is not None and dist_mod.is_secondary_failure(e):
            # Another rank failed first (its own error is printed by that rank): say so in one line.
            rank = os.environ.get("RANK", "?")
            first = str(e).splitlines()[0][:200] if str(e) else ""
            print(f"hotloop: rank {rank} stopped: a collective failed, most likely because another rank did "
                  f"({type(e).__name__}: {first})", file=sys.stderr)  # fmt: skip
            return 1
        raise
    finally:
        dist_mod = sys.modules.get("hotloop.distributed")
        if dist_mod is not None:
            dist_mod.teardown(failed=code != 0)  # (None: an exception is on its way out)


if __name__ == "__main__":
    sys.exit(main())
