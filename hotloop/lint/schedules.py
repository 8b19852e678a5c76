"""HL014: a learning-rate scheduler stepped at the wrong cadence (a per-epoch schedule every batch, a
per-batch one once per epoch). Mixed into `checks.Checker`.

Only PyTorch's schedulers are judged (a project's own `utils.ReduceLROnPlateau` that wraps the optimizer is
stepped as the optimizer). A per-epoch class can be written per step: `StepLR(step_size=30000)`, a
`CosineAnnealingLR` whose `T_max` counts iterations, an `ExponentialLR` whose gamma is 0.9999 (BigVGAN) - only a
gamma written below 0.999 says per epoch.
"""

from __future__ import annotations

import ast
import re

from hotloop.lint.analysis import ModuleInfo, call_name, dotted, is_optimizer_step, method_name, walk_local
from hotloop.lint.structure import kw
from hotloop.lint.structure import src as _src

PER_BATCH_SCHED = ("OneCycleLR", "CyclicLR")
SCHED = re.compile(r"sched", re.I)  # `scheduler.step()`, `self.lr_scheduler.step()`
PER_EPOCH_SCHED = ("StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "ReduceLROnPlateau")


class ScheduleChecks:
    mi: ModuleInfo

    def add(self, code: str, node: ast.AST, message: str) -> None:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def tensor(self, e: ast.expr) -> bool:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def schedulers(self) -> None:
        kinds: dict[str, str | None] = {}
        plateaus: set[str] = set()  # PyTorch's ReduceLROnPlateau: its `step(metrics)` takes `float(metrics)`
        mixed: set[str] = set()  # `scheduler = CosineAnnealingLR(...)` or `= ReduceLROnPlateau(...)` by a flag
        for n in self.mi.nodes:
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                base = call_name(n.value).split(".")[-1]
                kind = None
                resolved = self.mi.call_name(n.value)
                if resolved.startswith("torch.") and base == "ReduceLROnPlateau":
                    plateaus.update(d for t in n.targets if (d := dotted(t)))
                if "." in resolved and not resolved.startswith("torch."):
                    kind = None  # a project's own class (`utils.ReduceLROnPlateau` wrapping the optimizer)
                elif base in PER_BATCH_SCHED or base == "LambdaLR" and "warmup" in ast.unparse(n.value).lower():
                    kind = "batch"
                elif base == "ExponentialLR" and not self._decays_fast(n.value):
                    kind = None  # `gamma=0.9999996` (BigVGAN) decays per step; a gamma from a config is unknown
                elif base in PER_EPOCH_SCHED:
                    t_max = kw(n.value, "T_max") or (n.value.args[1] if len(n.value.args) > 1 else None)
                    src = ast.unparse(t_max.value if isinstance(t_max, ast.keyword) else t_max) if t_max else ""
                    per_step = base == "CosineAnnealingLR" and re.search(r"step|iter|len\(|batch", src)
                    per_step = per_step or self._counts_iterations(n.value) or self._period_unknown(n.value)
                    kind = None if per_step else "epoch"
                if kind or base.endswith(("LR", "Plateau")) or "Scheduler" in base:
                    for t in n.targets:
                        if dotted(t):
                            if dotted(t) in kinds and kinds[dotted(t)] != kind:
                                mixed.add(dotted(t))
                            kinds[dotted(t)] = kind
        kinds = {k: v for k, v in kinds.items() if v and k not in mixed}
        self._outside_update()
        for n in self.mi.nodes:
            if (isinstance(n, ast.Call) and method_name(n) == "step" and n.args and dotted(n.func.value) in plateaus  # type: ignore[attr-defined]
                    and self.mi.in_hot(n) and self.tensor(n.args[0])):  # fmt: skip
                # BBDM steps it with the training loss every update: a host read of the loss each time
                self.add("HL001", n, f"`{ast.unparse(n)[:60]}`: ReduceLROnPlateau takes `float()` of the tensor, "
                                     "a host read every step")  # fmt: skip
            if isinstance(n, ast.Call) and method_name(n) == "step" and dotted(n.func.value) in kinds:  # type: ignore[attr-defined]
                kind = kinds[dotted(n.func.value)]  # type: ignore[attr-defined]
                hot = self.mi.in_hot(n)
                # (`scheduler.step(dev_score)` under `isinstance(scheduler, AnnealOnPlateau)`: flair's other
                # scheduler, given a metric - a per-batch schedule's step takes none)
                if kind == "batch" and not hot and self.mi.in_training_loop(n) and not n.args:
                    self.add("HL014", n, f"`{_src(n)}`: a per-batch schedule stepped once per epoch: step it per batch")
                elif kind == "epoch" and hot and not self._epoch_is_the_step(n):
                    self.add("HL014", n, f"`{_src(n)}`: a per-epoch schedule stepped every batch: step it per epoch")

    def _outside_update(self) -> None:
        """`scheduler.step()` every micro-batch beside `if i % accum_iter == 0: optimizer.step()` (the Annotated
        Transformer): the schedule advances `accum_iter` times per update, its warmup that much too short."""
        for n in self.mi.nodes:
            if not (isinstance(n, ast.Call) and method_name(n) == "step" and self.mi.in_hot(n)
                    and SCHED.search(dotted(n.func.value))):  # type: ignore[attr-defined]  # fmt: skip
                continue
            loop = self.mi.enclosing_loop(n)
            gates = [g for g in walk_local(loop) if isinstance(g, ast.If) and self.mi.enclosing_loop(g) is loop
                     and any(isinstance(o, ast.BinOp) and isinstance(o.op, ast.Mod) for o in ast.walk(g.test))
                     and any(is_optimizer_step(c) for s in g.body for c in ast.walk(s))] if loop else []  # fmt: skip
            if n.args or n.keywords or gates and self._one_by_default(gates[0]):
                continue  # `step(cur_step=i)` sets the rate from the step given; `accum_iter=1` updates every step
            if gates and not any(n in set(ast.walk(g)) for g in gates):
                self.add("HL014", n, f"`{_src(n)}` steps every micro-batch but the optimizer only every "
                                     f"`{ast.unparse(gates[0].test)}`: step it with the optimizer")  # fmt: skip

    def _one_by_default(self, gate: ast.If) -> bool:
        """The accumulation period is 1 by default (`accum_iter: int = 1`, `--accum 1`) and no call in the file
        passes another (the Annotated Transformer's `run_epoch(..., accum_iter=config["accum_iter"])` does)."""
        if not self.mi._period_of_one(gate.test, gate):
            return False
        fn = self.mi.enclosing_function(gate)
        names = {m.right.id for m in ast.walk(gate.test) if isinstance(m, ast.BinOp) and isinstance(m.right, ast.Name)}
        given = [k for c in self.mi.calls_to.get(getattr(fn, "name", ""), []) for k in c.keywords if k.arg in names]
        return all(isinstance(k.value, ast.Constant) and k.value.value == 1 for k in given)

    def _period_unknown(self, c: ast.Call) -> bool:
        """`MultiStepLR(opt, milestones=cfg.training.scheduler.milestones)` (ZeroSpeech: 300000 steps in its
        yaml): a period read from a config this file does not declare may count epochs or steps, so the cadence
        cannot be judged (a literal, or an argparse default of this file, can)."""
        given = [*c.args[1:2], *(k.value for k in c.keywords if k.arg in ("step_size", "milestones"))]
        return bool(given) and not any(isinstance(g, (ast.Constant, ast.List, ast.Tuple))
                                       or self.mi.cli_default(g) is not ... for g in given)  # fmt: skip

    def _epoch_is_the_step(self, n: ast.AST) -> bool:
        """Full-batch training (HGCN, DropEdge): the step loop is `for epoch in range(...)` itself, or the
        function stepping the schedule is called from one, so once per step is once per epoch."""
        loops = self.mi.enclosing_loops(n)
        if not loops:
            fn = self.mi.enclosing_function(n)
            loops = [x for c in self.mi.calls_to.get(getattr(fn, "name", ""), [])
                     if (x := self.mi.enclosing_loop(c)) is not None]  # fmt: skip
        return bool(loops) and all(isinstance(x, ast.For) and "epoch" in ast.unparse(x.target).lower()
                                   for x in loops[:1])  # fmt: skip

    def _decays_fast(self, c: ast.Call) -> bool:
        """`ExponentialLR(opt, gamma=0.95)`: a gamma written (or a flag default) below 0.999, a per-epoch decay."""
        g = kw(c, "gamma")
        g = g.value if g is not None else c.args[1] if len(c.args) > 1 else None
        value = g.value if isinstance(g, ast.Constant) else self.mi.cli_default(g) if g is not None else None
        return isinstance(value, float) and value < 0.999

    def _counts_iterations(self, c: ast.Call) -> bool:
        """`StepLR(opt, step_size=opts.step_size)` with `--step_size` defaulting to 10000, `MultiStepLR(opt,
        [30000, 40000])`: periods of thousands are iterations (a per-batch schedule written with a per-epoch
        class), as are names saying so (`total_itrs`, `max_iter`)."""
        given = [*c.args[1:2], *(k.value for k in c.keywords if k.arg in ("step_size", "milestones"))]
        for g in given:
            values = g.elts if isinstance(g, (ast.List, ast.Tuple)) else [g]
            for v in values:
                value = v.value if isinstance(v, ast.Constant) else self.mi.cli_default(v)
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1000:
                    return True
                if re.search(r"iter|itrs|steps", ast.unparse(v), re.I):
                    return True
        return False
