"""The gate model: which `if` blocks of a hot region run at a boundary (log/eval/save, once per interval)
and which run every step (an accumulation window's optimizer update, the `else:` of a gate).

A test with `%` or a name whose words say log/eval/save/... is a boundary; one whose body steps the
optimizer (`if (i + 1) % accum == 0: optimizer.step()`) is an *update gate*, as hot as the loop. An early
exit (`if not should_log: return`, a `continue` guard naming a period) gates what follows in its block; a
block ending in raise/exit (and return/break when the hot region is the loop) runs once. Mixed into
`analysis.ModuleInfo`.
"""

from __future__ import annotations

import ast
import re

from hotloop.lint.syntax import (
    assigned_values,
    dotted,
    method_name,
    param_defaults,
    passed_for,
    target_names,
    walk_local,
)

GATE_WORDS = {
    "log", "logging", "print", "eval", "evaluate", "evaluation", "val", "valid", "validate", "validation", "save",
    "saving", "checkpoint", "checkpointing", "ckpt", "verbose", "debug", "report", "display", "last", "sample",
    "generate", "visualize", "vis", "plot", "interval", "every", "freq", "frequency", "profile", "profiling",
    "benchmark", "timing", "logs", "metric", "metrics", "console", "tick", "statistics",
    "elapsed", "profiler",  # a wall-clock boundary (`if profiler.totals["train"] > 60:`, retinanet-examples)
    "done",  # an episode's end (`if player.done:` resets the environment: once an episode, A3C)
}  # fmt: skip
UPDATE_GATE = re.compile(r"accum|sync_gradients|grad_acc|update_freq|gradient_accumulation|micro", re.I)
# The counters a membership test reads as a schedule (`if iteration in testing_iterations:`): narrower than
# `COUNTER` below, since `if idx in keep:` or `if i in bad_ids:` filters data, not steps.
SCHEDULE_COUNTER = re.compile(r"(global_)?(it|iter|iters|iteration|step|epoch|i_?iter|n_?iter)")
STEP_RECEIVER = re.compile(r"(opt|optim|optimizer|scaler|engine)", re.I)  # (DeepSpeed: `model_engine.step()`)


def is_optimizer_step(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step"
            and bool(STEP_RECEIVER.search(dotted(node.func.value) or "")))  # fmt: skip


def gate_word(name: str) -> bool:
    """A name saying log/eval/save/... (`last_epoch` is the epoch a run resumed from, not a last-step test)."""
    words = re.split(r"[_\W]+|(?<=[a-z])(?=[A-Z])", name.lower())
    return name.lower() != "last_epoch" and any(w in GATE_WORDS for w in words)


def is_gate(test: ast.expr) -> bool:
    """A periodic boundary: `%`, or a name that says log/eval/save/... - not an object's existence test
    (`if log_writer is not None:` holds on every step of a run that has one)."""
    existence = {id(x) for c in ast.walk(test) if isinstance(c, ast.Compare)
                 and all(isinstance(op, (ast.Is, ast.IsNot)) for op in c.ops) for x in ast.walk(c)}  # fmt: skip
    for n in ast.walk(test):
        if id(n) in existence:
            continue
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and not _a_size(n.left) and not _a_rank(n.left):
            return True
        if isinstance(n, ast.Call) and dotted(n.func) in ("np.mod", "numpy.mod", "math.fmod") and len(n.args) == 2:
            return True  # `if np.mod(batch_id, 100) == 1:` (stylized-neural-painting): `%` by another name
        if isinstance(n, ast.Name) and gate_word(n.id):
            return True
        if isinstance(n, ast.Compare) and isinstance(n.ops[0], ast.In) and SCHEDULE_COUNTER.fullmatch(dotted(n.left)):
            return True  # `if iteration in testing_iterations:` (gaussian-splatting): a few scheduled steps
        if isinstance(n, ast.Attribute) and gate_word(n.attr):
            return True
    return False


EVAL_PHASE = re.compile(r"(val|valid|validation|eval|evaluation|test|testing|dev)", re.I)


def _phase_branch(test: ast.expr) -> bool | None:
    """Which side of `if split == 'valid':` / `if phase != 'train':` only evaluation takes (a loop running train
    and then valid passes, Sentence-VAE's): True for the body, False for the `else`; None for any other test.
    A flag named for the phase (`if train: ... else:` in pytorch-vqa's `run(..., train=False)`, `if not is_eval:`)
    says the same."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    flag = dotted(test.operand if negated else test).rpartition(".")[2].lower()  # type: ignore[attr-defined]
    if flag and (phase := re.fullmatch(r"(is_|do_|in_)?(train|training|(val|valid|validation|eval|evaluation|test|"
                                       r"testing|validate|evaluate))", flag)):  # fmt: skip
        return bool(phase.group(3)) != negated
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
        return None
    const = next((x.value for x in (test.left, *test.comparators) if isinstance(x, ast.Constant)), None)
    if not isinstance(const, str) or not (EVAL_PHASE.fullmatch(const) or const.lower() in ("train", "training")):
        return None
    return bool(EVAL_PHASE.fullmatch(const)) == isinstance(test.ops[0], ast.Eq)


def _a_rank(e: ast.expr) -> bool:
    """`args.rank % ngpus_per_node == 0` (BTS, the ImageNet example): which process this is, the same on every
    step - a main-process test, not a period."""
    return bool(re.search(r"(^|_)rank$|^gpu$", dotted(e).rpartition(".")[2]))


def _a_size(e: ast.expr) -> bool:
    """`X.size(0) % world_size`, `len(batch) % n`, `x.shape[0] % k`: a divisibility test of a size (a batch
    that does not split evenly), not a period."""
    return any(isinstance(n, ast.Call) and (dotted(n.func) == "len" or method_name(n) == "size")
               or isinstance(n, ast.Attribute) and n.attr == "shape" for n in ast.walk(e))  # fmt: skip


def terminal(stmt: ast.stmt, loop: bool) -> bool:
    """A statement after which the hot loop does not go on: raise, sys.exit()/exit()/quit(), and - when the
    hot region is a loop, not a function called every step - return and break. Such a block runs once."""
    if isinstance(stmt, ast.Raise) or loop and isinstance(stmt, (ast.Return, ast.Break)):
        return True
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and dotted(stmt.value.func) in (
        "sys.exit", "exit", "quit", "os._exit")  # fmt: skip


def negated(test: ast.expr) -> bool:
    """`if step % n != 0:` / `if not is_log_step:`: the gated statements are in the `else:`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        # `if not (itr % save_every):` is `itr % save_every == 0`, and `if not skip_statistics:` (rlkit) opens
        # the boundary: the gated statements are in the body
        skip = re.match(r"(skip|no|disable)_", dotted(test.operand).rpartition(".")[2])
        return not (isinstance(test.operand, ast.BinOp) and isinstance(test.operand.op, ast.Mod) or skip)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
        return isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is False  # `debug == False`
    return isinstance(test, ast.Compare) and all(isinstance(op, ast.NotEq) for op in test.ops)


COUNTER = re.compile(r"step|iter|update|^(i|it|idx|batch_idx|global_step)$", re.I)


def first_value(n: ast.If) -> bool:
    """`if loss_ema is None: loss_ema = loss.item()`: the body gives the tested name its value, so it runs once
    (the first step); the `else:` is the per-step path."""
    t = n.test
    if not (
        isinstance(t, ast.Compare)
        and len(t.ops) == 1
        and isinstance(t.ops[0], ast.Is)
        and isinstance(t.comparators[0], ast.Constant)
        and t.comparators[0].value is None
        and dotted(t.left)
    ):
        return False
    return any(isinstance(s, ast.Assign) and any(dotted(x) == dotted(t.left) for x in s.targets) for s in n.body)


def first_step(test: ast.expr) -> bool:
    """`step == 0`, `self.get_num_updates() == 0`, `epoch == start and i == 0`: a test true on the first
    step only (a counter equal to zero, no `%`); also `batch_idx < 5` (gnn-explainer's plots of an epoch's first
    batches): a counter below a small literal, true on a handful of steps; and a counter equal to `n - 1`, the last
    pass only."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    for c in parts:
        few = (isinstance(c, ast.Compare) and len(c.ops) == 1 and isinstance(c.ops[0], (ast.Lt, ast.LtE))
               and isinstance(c.comparators[0], ast.Constant) and type(c.comparators[0].value) is int)  # fmt: skip
        if few and 0 < c.comparators[0].value <= 10 and isinstance(c.left, ast.Name) and COUNTER.search(c.left.id):  # type: ignore[attr-defined]
            return True
        if not (isinstance(c, ast.Compare) and len(c.ops) == 1 and isinstance(c.ops[0], ast.Eq)):
            continue
        sides = [c.left, c.comparators[0]]
        final = [x for x in sides if isinstance(x, ast.BinOp) and isinstance(x.op, ast.Sub)
                 and ast.unparse(x.right) == "1"]  # fmt: skip  # `if it == (max_model_iter - 1):` the last pass only
        if final and any(isinstance(x, ast.Name) and COUNTER.search(x.id) for x in sides):
            return True
        zero = [x for x in sides if isinstance(x, ast.Constant) and x.value == 0]
        other = [x for x in sides if x not in zero]
        if zero and other and not any(isinstance(b, ast.BinOp) for b in ast.walk(other[0])):
            last = dotted(other[0].func if isinstance(other[0], ast.Call) else other[0]).rpartition(".")[2]
            if COUNTER.search(last):
                return True
    return False


TARGETS = re.compile(r"targets?|labels?|y|ys|tgt|gt")
# (and the method forms: cramming's `if not loss.detach().isfinite():`)
ANOMALY = re.compile(r"(^|[^\w.])(torch\.|math\.|np\.)?(isnan|isinf)\(|\.(isnan|isinf)\(\)|^not .*isfinite\(")
FINITE = re.compile(r"(^|[^\w.])(torch\.|math\.|np\.)?isfinite\(|\.isfinite\(\)")


def anomaly_branch(n: ast.If) -> list[ast.stmt]:
    """The branch of `n` taken only on a bad step: the body of `if torch.isnan(loss):` or `if not
    torch.isfinite(loss):`, the `else:` of `if not torch.isnan(loss):` (whose body is every good step)."""
    text = ast.unparse(n.test)
    negated, core = text.startswith("not "), text.removeprefix("not ")
    if ANOMALY.search(core) and not FINITE.search(core):
        return n.orelse if negated else n.body
    if FINITE.search(core):
        return n.body if negated else n.orelse
    return []


class GateModel:
    """Mixed into ModuleInfo: needs `parent` and `enclosing_loop`."""

    parent: dict

    def is_update_gate(self, node: ast.If) -> bool:
        """`if (i + 1) % accum == 0: optimizer.step()` (or `if self.t_step == 0: self.learn(...)`): runs every
        optimizer update, not at a boundary. A test naming a log/eval boundary (`not is_accumulating and step %
        eval.interval == 0`) is a boundary."""
        steps = getattr(self, "step_functions", set())  # (or a same-file step: Udacity's `self.learn(...)`)
        if any(is_optimizer_step(n) or method_name(n) == "zero_grad" or self.local_target(n) in steps  # type: ignore[attr-defined]
               for s in node.body for n in ast.walk(s) if isinstance(n, ast.Call)):  # fmt: skip
            return True
        names = [n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else n.value
                 for n in ast.walk(node.test) if isinstance(n, (ast.Name, ast.Attribute))
                 or isinstance(n, ast.Constant) and isinstance(n.value, str)]  # fmt: skip  # (`params["eval_every"]`)
        if any(gate_word(x) and not UPDATE_GATE.search(x) for x in names):
            return False
        said = {m.group(0).lower() for m in UPDATE_GATE.finditer(ast.unparse(node.test))}
        return bool(said) and said != {"update_freq"}  # (fairseq's `update_freq` accumulates; with no optimizer
        # step in the body, pt-dec's `index % update_freq` refreshes a progress bar)

    def cli_default(self, e: ast.expr, across: bool = False) -> object:
        """The default of `args.<name>` from this module's `add_argument("--name", default=...)` (store_true:
        False, store_false: True); `...` when unknown. With `across`, also from the project module whose
        function made `args` (only HL013 asks: a gate or a loader judged by another file's defaults moved
        labelled findings both ways, KGAT's `--cf_print_every 1` log gate among them)."""
        if not isinstance(e, ast.Attribute):  # (also `self.params.print_freq` holding the flag: consistent_depth)
            return ...
        cache = self.__dict__.setdefault("_cli", None)
        if cache is None:
            cache = self._cli = {}
            for n in self.nodes:  # type: ignore[attr-defined]
                if isinstance(n, ast.Call) and method_name(n) == "add_argument" and n.args:
                    flags = [a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                    kws = {k.arg: k.value for k in n.keywords if k.arg}
                    if "default" in kws and isinstance(kws["default"], ast.Constant):
                        value = kws["default"].value
                    elif isinstance(kws.get("action"), ast.Constant) and kws["action"].value in (
                        "store_true",
                        "store_false",
                    ):
                        value = kws["action"].value == "store_false"
                    else:
                        continue
                    for f in flags:
                        cache[kws["dest"].value if isinstance(kws.get("dest"), ast.Constant) else
                              f.lstrip("-").replace("-", "_")] = value  # fmt: skip
        if e.attr in cache or not across or getattr(self, "_cli_asking", 0) or not isinstance(e.value, ast.Name):
            return cache.get(e.attr, ...)
        from hotloop.lint.imports import Project, defining, load_module  # (imports builds on this module)

        # `args = parse_args_paired_training()` from the project's `training_utils.py` (img2img-turbo): its parser
        for made in assigned_values(e.value.id, self.nodes):  # type: ignore[attr-defined]
            target = Project.of(self).callee(made) if isinstance(made, ast.Call) else None  # type: ignore[arg-type]
            file = defining(*target)[0] if target is not None else None
            other = load_module(file, file.stat().st_mtime) if file is not None else None
            if other is not None and other is not self:
                other._cli_asking = 1  # type: ignore[attr-defined]  # (one file away: no chains, no cycles)
                try:
                    found = other.cli_default(e)
                finally:
                    other._cli_asking = 0  # type: ignore[attr-defined]
                if found is not ...:
                    return found
        return ...

    def boundary_gate(self, node: ast.If) -> bool:
        if isinstance(node.test, ast.Name) and any(isinstance(c, ast.Call) and dotted(c.func) == node.test.id
                                                   for s in node.body for c in ast.walk(s)):  # fmt: skip
            return False  # `if log: log(train_loss=loss.item())` (doctr): the function exists on every step, if at all
        if self._off_where_hot(node, on=True):
            return False
        elif_ = len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)  # (OLMo's save gates: one after another)
        if node.orelse and not elif_ and _bound_in(node.body) & _bound_in(node.orelse):
            return False  # `if which == 0: exstyle = ... else: exstyle, instyle = ...` (DualStyleGAN): alternate steps
        opens = is_gate(node.test) or self._named_gate(node.test, node) or self._wraps(node) or self._gated_value(node)
        return (opens and not self.is_update_gate(node) and not self._period_of_one(node.test, node)
                and self.cli_default(node.test) is not True)  # fmt: skip
        # `if args.log:` with `--no_log` storing False into it (YOLACT): on by default, so its body runs every step

    def _off_where_hot(self, node: ast.If, on: bool = False) -> bool:
        """`if calc_acc:` in `def forward(model, batch, calc_acc=False)` (nanoT5) whose every call from hot code
        leaves the flag at its default (or passes False/None): the branch runs only for the other callers. With
        `on`, the other way: omnimotion's `compute_all_losses(..., write_logs=True)` called every step with the
        default, or structurenet's `forward(..., log_tb=not conf.no_tb_log)` with `--no_tb_log` a store_true,
        runs its `if log_tb and tb_writer is not None:` block every step - no log gate, whatever the name says."""
        t, fn = node.test, self.enclosing_function(node)  # type: ignore[attr-defined]
        if on and isinstance(t, ast.BoolOp) and isinstance(t.op, ast.And):
            t = t.values[0]  # (the rest asks whether a writer exists: it does on every step of a run that has one)
        if not isinstance(t, ast.Name) or getattr(self, "_asking", 0):
            return False
        default = param_defaults(fn).get(t.id)
        if default is None:
            return False
        self._asking = 1  # (a call's own hotness may ask this again)
        try:
            hot = [c for c in self.calls_to.get(fn.name, []) if self.in_hot(c)]  # type: ignore[attr-defined]
        finally:
            self._asking = 0
        given = [passed_for(fn, c, t.id) or default for c in hot]  # type: ignore[union-attr]
        return bool(hot) and all(self._truth(g) is on for g in given)

    def _truth(self, e: ast.expr) -> bool | None:
        """What a flag argument is on a default run: a constant, `not <flag>`, or a parsed flag's default."""
        if isinstance(e, ast.Constant):
            return bool(e.value)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            inner = self._truth(e.operand)
            return None if inner is None else not inner
        value = self.cli_default(e) if isinstance(e, ast.Attribute) else ...
        if value is ... and isinstance(e, ast.Attribute) and e.attr.startswith("no_"):
            return False  # `--no_tb_log`, parsed in a module not at hand: a switch that is off unless given
        return value if isinstance(value, bool) else None

    def _gated_value(self, node: ast.If) -> bool:
        """`storer = self._pre_call(is_train, storer)` then `if storer is not None:` (disentangling-vae): the
        same-file helper hands back None except under its own `n % record_every == 1` test: a log gate. Also
        in a function given that value (`_kl_normal_loss(mean, logvar, storer)`) for the parameter tested."""
        t = node.test
        if not (isinstance(t, ast.Compare) and isinstance(t.ops[0], ast.IsNot) and isinstance(t.left, ast.Name)):
            return False
        return self._gated_name(t.left.id, self.enclosing_function(node), 1)  # type: ignore[attr-defined]

    def _gated_name(self, name: str, fn: ast.AST, depth: int) -> bool:
        values = assigned_values(name, walk_local(fn))
        helpers = [f for v in values if isinstance(v, ast.Call) for f in self.targets_of(v)]  # type: ignore[attr-defined]
        if helpers:
            return all(any(isinstance(i, ast.If) and is_gate(i.test) for i in walk_local(f))
                       and any(isinstance(a, (ast.Assign, ast.Return)) and isinstance(a.value, ast.Constant)
                               and a.value.value is None for a in walk_local(f)) for f in helpers)  # fmt: skip
        args = getattr(fn, "args", None)
        params = [a.arg for a in [*args.posonlyargs, *args.args]] if args is not None and not values else []
        if depth == 0 or name not in params:
            return False
        given = [passed_for(fn, c, name) for c in self.calls_to.get(fn.name, [])]  # type: ignore[attr-defined]
        return bool(given) and all(isinstance(g, ast.Name) and self._gated_name(
            g.id, self.enclosing_function(g), depth - 1) for g in given)  # type: ignore[attr-defined]  # fmt: skip

    def _wraps(self, node: ast.If) -> bool:
        """`if i_batch >= rays.shape[0]: rays = rays[torch.randperm(n)]; i_batch = 0` (NeRF): a counter the loop
        advances, reset to 0 where it reaches its end: the body runs once per pass over the data."""
        if not (isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
                and isinstance(node.test.ops[0], (ast.GtE, ast.Gt))):  # fmt: skip
            return False
        name, loop = node.test.left.id, self.enclosing_loop(node)  # type: ignore[attr-defined]
        reset = any(isinstance(s, ast.Assign) and [dotted(t) for t in s.targets] == [name]
                    and isinstance(s.value, ast.Constant) and s.value.value == 0 for s in node.body)  # fmt: skip
        return reset and loop is not None and any(isinstance(a, ast.AugAssign) and dotted(a.target) == name
                                                  for a in ast.walk(loop))  # fmt: skip

    def _period_of_one(self, test: ast.expr, at: ast.AST) -> bool:
        """`if (batch_num + 1) % print_modulus == 0:` with `print_modulus=1` the default of the function's
        parameter or of the script's flag: by default the gate opens every step, so its body is hot."""
        mods = [n.right for n in ast.walk(test) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)]
        return bool(mods) and all(self._one_by_default(m, at) for m in mods)

    def _one_by_default(self, e: ast.expr, at: ast.AST) -> bool:
        if isinstance(e, ast.Name):
            fn = self.enclosing_function(at)  # type: ignore[attr-defined]
            # (`log_step = args.log_step` earlier in the function: GPT2-Chinese's `--log_step` defaults to 1)
            values = assigned_values(e.id, walk_local(fn)) if fn is not None else []
            e = param_defaults(fn).get(
                e.id, values[0] if len(values) == 1 and isinstance(values[0], ast.Attribute) else e
            )  # (not nanoGPT's `log_interval = 1`, which its configs override)
        value = e.value if isinstance(e, ast.Constant) else self.cli_default(e)  # type: ignore[attr-defined]
        return type(value) is int and value == 1

    def _named_gate(self, test: ast.expr, node: ast.AST) -> bool:
        """`early_phase = batch_idx % log_frequency == 0 and ...` then `if early_phase or late_phase:` (monodepth2):
        a name assigned a gate expression in the same loop body (per step, not a run's `rank`) is that gate."""
        names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        loop = self.enclosing_loop(node)  # type: ignore[attr-defined]
        scope = [n for n in ast.walk(loop) if isinstance(n, (ast.Assign, ast.AnnAssign))] if names and loop else []
        return any(is_gate(v) for name in names for v in assigned_values(name, scope))

    def _after_early_exit(self, stmt: ast.AST, block: list[ast.stmt]) -> bool:
        """`if not should_log: return` earlier in the same block: what follows runs at the boundary only. A
        `continue` guard naming a period (`if cur_nimg < tick_start + kimg_per_tick: continue`) skips to the
        next step until the boundary, whichever way its test is written."""
        for s in block:
            if s is stmt:
                return False
            if (
                isinstance(s, ast.If)
                and is_gate(s.test)
                and s.body
                and (isinstance(s.body[-1], ast.Continue) or negated(s.test) and isinstance(s.body[-1], ast.Return))
                and not self._steps_after(s, block)  # DrQ-v2's `if step % self.update_every_steps != 0: return`
            ):
                return True
            if (isinstance(s, ast.If) and s.body and isinstance(s.body[-1], ast.Continue)
                    and any(is_optimizer_step(x) for b in s.body for x in ast.walk(b))):  # fmt: skip
                return True  # `if mode == TRAIN: ...; optimizer.step(); continue` (NeuralClassifier): evaluation after
        return False

    def _steps_after(self, guard: ast.If, block: list[ast.stmt]) -> bool:
        """What follows the early exit takes the optimizer step (itself or through a same-file step function):
        the guard is the update cadence, and what it lets through runs every update."""
        rest = block[block.index(guard) + 1 :]
        steps = getattr(self, "step_functions", set())
        return any(isinstance(c, ast.Call) and (is_optimizer_step(c) or self.local_target(c) in steps)  # type: ignore[attr-defined]
                   for stmt in rest for c in ast.walk(stmt))  # fmt: skip

    def _inference_branch(self, n: ast.If | ast.IfExp, child: ast.AST) -> bool:
        """In a `forward`, the branch taken without targets (`if targets is None:` / the `else` of `if targets
        is not None:`): generation's path, which a training step (always given targets) never takes. Or the
        evaluation side of a phase test (`_phase_branch`)."""
        test = n.test
        if (side := _phase_branch(test)) is not None:  # `if split == 'valid':` in a loop over splits
            branch = n.body if side else n.orelse
            return child is branch or isinstance(branch, list) and child in branch
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot))
                and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None
                and isinstance(test.left, ast.Name) and TARGETS.fullmatch(test.left.id)):  # fmt: skip
            return False
        if getattr(self.enclosing_function(n), "name", "") != "forward":
            return False
        without = n.body if isinstance(test.ops[0], ast.Is) else n.orelse
        return child is without or isinstance(without, list) and child in without

    def _gated(self, node: ast.AST, stop: ast.AST) -> bool:
        child, n = node, self.parent.get(node)
        while n is not None:
            for field in ("body", "orelse"):
                block = getattr(n, field, None)
                if isinstance(block, list) and child in block and self._after_early_exit(child, block):
                    return True
            if n is stop:
                return False
            if isinstance(n, ast.If) and child is not n.test:
                branch = n.body if child in n.body else n.orelse
                inner_break = branch and isinstance(branch[-1], ast.Break) and self.enclosing_loop(n) is not stop
                if branch and not inner_break and terminal(branch[-1], isinstance(stop, (ast.For, ast.AsyncFor,
                                                                                          ast.While))):  # fmt: skip
                    return True  # `if not finite: print(loss.item()); sys.exit(1)`: runs once, at the end
            if isinstance(n, (ast.If, ast.IfExp)) and child is not n.test and self._inference_branch(n, child):
                return True
            if isinstance(n, ast.If) and child in n.body and self._off_where_hot(n):
                return True  # `if calc_acc:` with `calc_acc=False`, which the training loop's call does not pass
            if isinstance(n, ast.If) and child is not n.test and child in anomaly_branch(n):
                return True  # `if torch.isnan(loss): print(...); continue`: only on a bad step, not every step
            # (not when it lets an update through: `if self.t_step == 0: self.learn(...)` with `t_step` a period)
            if isinstance(n, ast.If) and child in n.body and (first_step(n.test) or first_value(n)) and not (
                    self.is_update_gate(n)):  # fmt: skip
                return True  # `if self.get_num_updates() == 0: torch.cuda.empty_cache()`: the first step only
            if isinstance(n, ast.ExceptHandler):
                return True  # `except FloatingPointError: grad_norm = torch.tensor(0.0).cuda()`: on a failure only
            if isinstance(n, ast.If) and child is not n.test and self.boundary_gate(n):
                branch = n.orelse if negated(n.test) else n.body
                if child in branch:
                    return True
            child, n = n, self.parent.get(n)
        return False


def _bound_in(block: list[ast.stmt]) -> set[str]:
    """The names the statements of `block` assign, anywhere inside them."""
    return {n for s in block for a in ast.walk(s) if isinstance(a, ast.Assign) for t in a.targets
            for n in target_names(t)}  # fmt: skip
