"""What drives a loop besides a backward in it: the calls that make code run once per step although no step
is written there. Mixed into `analysis.ModuleInfo`, which calls these while it finds the hot regions.

- an environment stepped inside the training loop (on-policy rollouts, off-policy `while not done:` loops);
- a same-file function registered as a per-batch callback of a trainer in another file;
- a same-file generator, advanced with `next()` or iterated by a training loop: its loop runs per item;
- a loop fetching the training batches (`for x in train_loader`, `next(train_iter)`) whose step is out of sight.

And what does not: a loop over seeds or folds around a function that runs its own epochs repeats whole runs.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from hotloop.lint.syntax import assigned_values, dotted, method_name, under_no_grad, walk_local

ENV = re.compile(r"(^|[._])(envs?|\w+_envs?|environment|vec_?env)$", re.I)  # `envs.step(action)`: one environment step
WRAPPERS = ("enumerate", "tqdm", "tqdm.tqdm", "iter")  # `enumerate(gen(...))` iterates what `gen(...)` yields


EPOCH_NAMED = re.compile(r"(^|_)epoch($|_)", re.I)  # `fit_one_epoch`, `train_epoch`, `run_one_epoch_ddp`
EPOCHS = re.compile(r"^(epoch|ep|epoch_idx|epoch_id|i_epoch|cur_epoch|current_epoch)$", re.I)  # an epoch loop's name
RUN_COUNT = re.compile(
    r"^(itr|n_?runs|num_runs|runs|repeats?|n_?repeats?|num_repeats|n_?seeds|num_seeds|n_?trials|"
    r"num_trials|n_?folds|num_folds|k_?folds?)$",
    re.I,
)
RUNS = re.compile(r"^(seed|seeds|run|runs|fold|folds|trial|trials|repeat|rep|i_run|run_id|fold_idx)$", re.I)
# the keyword a trainer takes a per-step function by (decision-transformer's `get_batch=get_batch`)
PER_STEP_ARG = re.compile(
    r"^(get_batch|get_batch_fn|batch_fn|sample_batch|next_batch|loss_fn|loss_func|compute_loss|"
    r"step_fn|train_step|train_step_fn|forward_fn|closure)$"
)
# (`self.train_loader_x`, `train_loader_u`: Dassl's labelled and unlabelled loaders)
TRAIN_DATA = re.compile(
    r"^(self\.)?_*train(ing)?_?(loader|iter|iterator|dataloader|dl|data_loader)s?(_[a-z0-9]{1,2})?$", re.I
)


def unwrapped(it: ast.expr) -> ast.expr:
    """`gen(...)` of `enumerate(tqdm(gen(...)))`: what the loop really iterates."""
    while isinstance(it, ast.Call) and dotted(it.func) in WRAPPERS and it.args:
        it = it.args[0]
    return it


def yields(node: ast.AST) -> bool:
    """A generator function (or a loop of one) holds a `yield`."""
    return any(isinstance(y, (ast.Yield, ast.YieldFrom)) for y in walk_local(node))


def env_step(n: ast.AST) -> bool:
    """`envs.step(action)`, `self.env.step(a)`: one step of an environment (not an optimizer's or scheduler's)."""
    return (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
            and bool(ENV.search(dotted(n.func.value) or "")))  # fmt: skip


def repeats_runs(loop: ast.AST | None) -> bool:
    """`for seed in seeds`, `for fold in range(k)`, `for run in range(n_runs)`: each pass is a whole run."""
    target = loop.target if isinstance(loop, (ast.For, ast.AsyncFor)) else None
    if target is None:
        return False
    if any(isinstance(n, ast.Name) and RUNS.search(n.id) for n in ast.walk(target)):
        return True
    # `for ii in range(args.itr)` (the Time-Series-Library family: Autoformer, PatchTST, Time-LLM), `range(n_runs)`
    it = loop.iter  # type: ignore[union-attr]
    bound = it.args[-1] if isinstance(it, ast.Call) and dotted(it.func) == "range" and it.args else None
    name = bound.attr if isinstance(bound, ast.Attribute) else bound.id if isinstance(bound, ast.Name) else ""
    return bool(RUN_COUNT.search(name))


def runs_epochs(fn: ast.AST, hot_loops: set[ast.AST]) -> bool:
    """`fn` (not named for an epoch) loops over epochs itself: `for epoch in range(max_epoch)` is, or holds,
    one of its hot loops (GraphMAE's `pretrain`). A loop around its call that `repeats_runs` is no epoch loop."""
    if EPOCH_NAMED.search(getattr(fn, "name", "")):
        return False
    for loop in walk_local(fn):
        target = loop.target if isinstance(loop, ast.For) else None
        named = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} if target is not None else ()
        if any(EPOCHS.search(n) for n in named) and not hot_loops.isdisjoint({loop, *walk_local(loop)}):
            return True
    return False


def _data_name(it: ast.expr) -> str:
    """`train_loader` for `train_loader`, `self.train_loader`, or Graph-WaveNet's
    `dataloader['train_loader'].get_iterator()`."""
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and not it.args:
        it = it.func.value  # `loader.get_iterator()`, `loader.iter()`
    if isinstance(it, ast.Subscript) and isinstance(it.slice, ast.Constant) and isinstance(it.slice.value, str):
        return it.slice.value
    return dotted(it)


class DriverModel:
    nodes: list[ast.AST]
    hot_loops: set[ast.AST]
    train_loops: set[ast.AST]
    hot_functions: set[ast.AST]
    train_functions: set[ast.AST]
    functions: dict[str, list[ast.AST]]
    _next_targets: dict[ast.AST, list[ast.AST]]
    _iterated: dict[ast.AST, list[ast.AST]]
    parent: dict[ast.AST, ast.AST]

    def enclosing_loop(self, node: ast.AST) -> ast.AST | None:  # pragma: no cover (ModuleInfo's)
        raise NotImplementedError

    def targets_of(self, call: ast.Call) -> list[ast.AST]:  # pragma: no cover (ModuleInfo's)
        raise NotImplementedError

    def _mark(self, loop: ast.AST | None, hot: bool) -> None:  # pragma: no cover (ModuleInfo's)
        raise NotImplementedError

    def _iterates_data(self, it: ast.expr) -> bool:  # pragma: no cover (KindModel's)
        raise NotImplementedError

    def _per_step_outer(self, outer: ast.AST, loop: ast.AST) -> bool:
        """A step loop over something that is not data (a GAN's phases, `range(n_critic)`) inside a loop that
        fetches the batch itself (iterates a loader, or calls `next()` on one outside the inner loop): the
        outer loop runs once per step, not once per epoch."""
        if not isinstance(loop, (ast.For, ast.AsyncFor)) or self._iterates_data(loop.iter):
            return False
        if isinstance(outer, (ast.For, ast.AsyncFor)) and self._iterates_data(outer.iter):
            return True
        if re.search(r"accum", ast.unparse(loop.iter), re.I) and dotted(getattr(loop.iter, "func", loop)) == "range":
            return True  # `for _ in range(cfg.accumulate):` its micro-batches: the loop around it runs once per update
        inner = set(map(id, ast.walk(loop)))
        return any(isinstance(n, ast.Call) and dotted(n.func) == "next" and n.args and id(n) not in inner
                   and self.enclosing_loop(n) is outer  # (not a sibling validation loop's `next(val_iter)`: nnU-Net)
                   and self._data_iterator(n.args[0]) for n in walk_local(outer))  # fmt: skip

    def _data_iterator(self, e: ast.expr) -> bool:
        """`train_iter`, `self.loader_iter`, or `it` assigned from `iter(...)`/`cycle(...)`."""
        if re.search(r"loader|iter|data|batch", dotted(e), re.I):
            return True
        return isinstance(e, ast.Name) and any(isinstance(v, ast.Call) and dotted(v.func).split(".")[-1] in (
            "iter", "cycle", "repeat") for v in assigned_values(e.id, self.nodes))  # fmt: skip

    def _rollouts(self) -> None:
        """An on-policy rollout inside the training loop (`for step in range(num_steps): ... envs.step(a)`), or an
        off-policy loop that steps the environment around its updates (`while not done: ... agent.update(...);
        env.step(action)`), runs once per environment step, as often as the updates: its loop is hot."""
        for n in self.nodes:
            if env_step(n):
                loop = self.enclosing_loop(n)
                if loop is not None and loop not in self.hot_loops and (
                        loop in self.train_loops or self.enclosing_loop(loop) in self.train_loops):  # fmt: skip
                    self.hot_loops.add(loop)  # (off-policy: the loop around the updates steps the environment)

    def _training_data_loops(self) -> None:
        """`for batch in train_loader:` or `while True: data = next(train_iter)` whose step is taken out of sight
        (`model.meta_observe(inputs, labels)`, built by a factory in another file): a loop fetching the training
        data batch by batch, with no step loop inside it, runs once per step."""
        for n in self.nodes:
            if not isinstance(n, (ast.For, ast.While)) or n in self.hot_loops or n in self.train_loops:
                continue
            it = unwrapped(n.iter) if isinstance(n, ast.For) else None
            if isinstance(it, ast.Name):  # `pbar = tqdm(train_loader)` ... `for b, data in enumerate(pbar)` (DeepCAD)
                made = assigned_values(it.id, walk_local(self.enclosing_function(it)))  # type: ignore[attr-defined]
                it = unwrapped(made[0]) if len(made) == 1 and isinstance(made[0], ast.Call) else it
            fetches = it is not None and bool(TRAIN_DATA.match(_data_name(it)))
            # `while True: data = next(train_iter)`, `for i in range(n): batch_x = next(train_loader_x_iter)` with
            # `train_loader_x_iter = iter(self.train_loader_x)` (Dassl's TrainerXU)
            fetches = fetches or any(isinstance(c, ast.Call) and dotted(c.func) == "next" and c.args
                                     and self._train_iter(c.args[0]) and self.enclosing_loop(c) is n
                                     for c in walk_local(n))  # fmt: skip
            if fetches and not under_no_grad(self.parent, n):  # (under no_grad it computes statistics)
                self._mark(n, hot=True)

    def _train_iter(self, e: ast.expr) -> bool:
        if TRAIN_DATA.match(dotted(e)):
            return True
        fn = self.enclosing_function(e)  # type: ignore[attr-defined]
        values = assigned_values(dotted(e), walk_local(fn)) if isinstance(e, ast.Name) else []
        return any(isinstance(v, ast.Call) and dotted(v.func) == "iter" and v.args
                   and TRAIN_DATA.match(dotted(v.args[0])) for v in values)  # fmt: skip

    def _callbacks(self) -> None:
        """`trainer.set_callback("on_batch_end", fn)`, or `SequenceTrainer(..., get_batch=get_batch,
        loss_fn=...)`: a same-file function a trainer in another file calls every batch (or step) is hot, and
        training code."""
        for n in self.nodes:
            if isinstance(n, ast.keyword) and n.arg and PER_STEP_ARG.match(n.arg) and isinstance(n.value, ast.Name):
                self.hot_functions.update(self.functions.get(n.value.id, []))
                self.train_functions.update(self.functions.get(n.value.id, []))
            if isinstance(n, ast.Call) and re.search(r"callback|register|add_hook|on$", method_name(n) or ""):
                events = [a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                if any(re.search(r"batch|step|iter", ev) for ev in events):
                    for a in n.args:
                        if isinstance(a, ast.Name):
                            self.hot_functions.update(self.functions.get(a.id, []))
                            self.train_functions.update(self.functions.get(a.id, []))

    def _generators(self) -> None:
        """`batches = make_batches(...)` (a same-file generator) then `next(batches)` in the loop: the
        generator's body runs between steps, so calls of it count as calls of the generator function."""
        made: dict[str, list[ast.AST]] = {}
        for n in self.nodes:
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                fns = [f for f in self.targets_of(n.value) if yields(f)]
                if fns:
                    for t in n.targets:
                        if dotted(t):
                            made.setdefault(dotted(t), []).extend(fns)
        for n in self.nodes:
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "next" and n.args:
                fns = made.get(dotted(n.args[0]))
                if fns:
                    self._next_targets[n] = fns
        # `for i, batches in enumerate(self._accum_batches(train_iter)):` a same-file generator iterated by a
        # training loop: the generator's loop around its `yield` runs once per item, as often as the steps.
        for n in self.nodes:
            if isinstance(n, (ast.For, ast.AsyncFor)):
                it = unwrapped(n.iter)
                if isinstance(it, ast.Call):
                    fns = [f for f in self.targets_of(it) if yields(f)]
                    if fns:
                        self._iterated[n] = fns


def feeds_env(mi: Any, node: ast.AST) -> bool:
    """`envs.step(action.cpu().numpy())`, or `actions = q.argmax(1).cpu().numpy()` then `envs.step(actions)`:
    the environment runs on the host, so the action must go there."""
    n = mi.parent.get(node)
    while isinstance(n, ast.expr):
        if env_step(n):
            return True
        n = mi.parent.get(n)
    names = {x.id for t in getattr(n, "targets", []) for x in ast.walk(t) if isinstance(x, ast.Name)}
    fn = mi.enclosing_function(node)
    if re.search(r"^(get|select|sample|choose)_actions?$|^act$|^explore$", getattr(fn, "name", "")) and (
        isinstance(n, ast.Return) or any(isinstance(r, ast.Return) and r.value is not None and names & {
            x.id for x in ast.walk(r.value) if isinstance(x, ast.Name)} for r in walk_local(fn))):  # fmt: skip
        return True  # `get_action(state)` returning `action.detach().cpu().numpy()[0]` (or `np.clip(action, -1, 1)`)
    return bool(names) and any(env_step(c) and names & {a.id for a in c.args if isinstance(a, ast.Name)}  # type: ignore[attr-defined]
                               for c in walk_local(fn))  # fmt: skip


def prepared(mi: Any, c: ast.AST) -> bool:
    """The batches `c` moves come from a loader Accelerate or Fabric prepared: the module prepares one, and the
    loop around `c` iterates a name that a `.prepare(...)` binds, or a loader of unknown name. x-flux prepares a
    copy (`dit, optimizer, _, sched = accelerator.prepare(dit, optimizer, deepcopy(loader), sched)`) and
    iterates the original: its batches are host tensors."""
    if not re.search(r"\.prepare\(|setup_dataloaders\(", mi.source):
        return False
    loop = mi.enclosing_loop(c)
    while loop is not None and not (isinstance(loop, ast.For) and mi._iterates_data(loop.iter)):
        loop = mi.enclosing_loop(loop)
    name = dotted(unwrapped(loop.iter)) if loop is not None else ""
    if not name:
        return True
    if "_prepared" not in mi.__dict__:  # (what the module's `.prepare(...)` calls take and bind, found once)
        calls = [n for n in mi.nodes if isinstance(n, ast.Call) and method_name(n) in ("prepare", "setup_dataloaders")]
        handed = {dotted(a) for p in calls for a in ast.walk(p) if isinstance(a, (ast.Name, ast.Attribute))}
        bound = {dotted(x) for n in mi.nodes if isinstance(n, ast.Assign) and any(n.value is p for p in calls)
                 for t in n.targets for x in ast.walk(t)}  # fmt: skip
        mi.__dict__["_prepared"] = (handed, bound)
    handed, bound = mi.__dict__["_prepared"]
    return name in bound or name not in handed  # (handed to it, but what it gave back went elsewhere: x-flux)
