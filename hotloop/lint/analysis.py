"""What the rules need to know about a module: where the hot loops are, which code runs every step,
what names resolve to, and (via `kinds.KindModel`) which expressions are tensors.

Hot regions (code that runs every training step):
- the body of the innermost `for`/`while` loop around a `.backward()` call, an optimizer or scaler
  `.step()`, or a call to a function of the same module that does one of those;
- the whole body of a function named like a train step (`train_step`, `training_step`, `*_train_step`)
  or one that does a backward/step itself and is called from a loop of the module;
- interprocedurally: every same-file function or method called from a hot region (not under a gate) is
  hot too, to a fixpoint; one called from a training loop is a training function (HL020/HL021 look there).
- what drives a loop with no step written in it (`drivers.py`): a loop stepping an environment inside the
  training loop (on- and off-policy reinforcement learning), a same-file generator's loop around its `yield`
  when a training loop iterates it, a function registered as a per-batch callback.
A *training loop* is any loop that contains a hot region (the epoch loop around the batch loop, too). A step loop
over something that is not data (a GAN's phases) inside a loop that fetches the batch is inside the step: that
outer loop is hot. A loop that hands a step function to a wrapper (`timer(train_step)`) calls it.

Gates (`gates.py`): statements in the body of an `if` whose test uses `%` (`if step % log_every == 0:`) or a name
whose words say so (`log`, `eval`, `save`, `checkpoint`, `verbose`, `interval`, ...) run once per
interval, not every step, and are not hot. An `if` whose body steps the optimizer (`if (i + 1) % accum
== 0: optimizer.step()`) is an *update gate*, not a boundary: accumulation scripts update every
window, so its body is as hot as the loop. The `else:` branch of a gate runs on the other steps: hot.
A `# sync: <why>` comment marks an intended host read.

Names resolve through imports and aliases (`import torch.nn.functional as F`, `sync = torch.cuda.synchronize`),
a call of a local name to each function it may be bound to (`fn = mixed_list if random() < p else noise_list`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hotloop.lint.calls import CallModel
from hotloop.lint.classes import project_on_device
from hotloop.lint.drivers import EPOCH_NAMED, DriverModel, repeats_runs, runs_epochs, yields
from hotloop.lint.forks import flushed_epochs
from hotloop.lint.gates import GateModel, is_optimizer_step  # noqa: F401 (re-exported: structure imports it)
from hotloop.lint.kinds import (  # noqa: F401 (re-exported: checks import them from here)
    MODEL_NAME,
    FunctionInfo,
    KindModel,
    assigned_values,
    dotted,
    method_name,
    target_names,
)
from hotloop.lint.syntax import constructed, derives, method_of, under_no_grad, walk_local  # noqa: F401 (re-exported)

STEP_FUNCTION = re.compile(r"^(train|training)_step$|_(train|training)_step$|^train_one_step$|^train_batch$")
# Methods that run once per training step by convention in BasicSR/KAIR/CycleGAN-style model classes (the loop
# calling them is in another file): their copies and reads are per step. (Not a reason to call a loop hot: an
# evaluation loop feeds data the same way.)
PER_STEP_METHOD = re.compile(r"^(feed_data|set_input|parse_batch_train|process_data|_preproc_inputs)$")
AGENT_STEP = re.compile(r"^(act|step|explore|select_action|get_action|choose_action|sample_action)$")
AGENT_UPDATE = re.compile(r"^(update|learn|update_parameters|update_agent|update_policy|train_agent)$")
EPOCH_FUNCTION = re.compile(r"^_*(train|training)_(one_)?epoch$|^_*run_epoch$|^_*train_loop$")
# Given a loss and the optimizer, these save/log/evaluate it or run an epoch: no step (whole words: not `retrieval`)
NOT_A_STEP_CALL = re.compile(r"(^|_)(epoch|save|ckpt|checkpoint|logs?|print|eval|evaluate|valid|validate|test|record"
                             r"|report|write)($|_)", re.I)  # fmt: skip
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
# a batch mover helper (and VIBE's `move_dict_to_device`, `dict_to_cuda`, `recursive_to`)
MOVER_FN = re.compile(r"^(to_cuda|to_device|to_gpu|move_to|move_to_device|cuda|recursive_to"
                      r"|move_\w+_to_(device|cuda|gpu)|(dict|batch|data|tensors?)_to_(device|cuda|gpu))$")  # fmt: skip


def call_name(call: ast.Call) -> str:
    """The dotted name as written (no alias resolution); `ModuleInfo.call_name` resolves aliases."""
    return dotted(call.func)


def is_step_call(node: ast.AST) -> bool:
    """`x.backward()`, `accelerator.backward(loss)`, `optimizer.step()`, `scaler.step(opt)`, and a call that
    hands a loss and the optimizer to a helper doing both (`loss_scaler(loss, optimizer, parameters=...)`)."""
    if not isinstance(node, ast.Call) or NOT_A_STEP_CALL.search(call_name(node).split(".")[-1]):
        return False  # `fit_one_epoch(model, yolo_loss, optimizer, ...)`, `save_model(epoch, model, optimizer, loss)`
    args = [dotted(a) for a in [*node.args, *(k.value for k in node.keywords)]]
    if any(re.search(r"(^|\.)(optimizer|optim|opt)$", a) for a in args) and any(
        re.search(r"(^|\.|_)loss(es)?$", a) for a in args
    ):  # a loss *value* (not `train_loss_fn`) and the optimizer: the helper backpropagates and steps
        return True
    if not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr == "backward":
        return True
    return is_optimizer_step(node)


class ModuleInfo(CallModel, KindModel, GateModel, DriverModel):
    """Hot regions, training loops, gates, aliases and per-function tensor names of one parsed module."""

    def __init__(self, tree: ast.Module, source: str, path: str = "") -> None:
        self.tree, self.source, self.lines, self.path = tree, source, source.splitlines(), path
        # One walk builds the node list and the parent map that every rule reuses.
        self.parent: dict[ast.AST, ast.AST] = {}
        self.nodes: list[ast.AST] = []
        stack: list[ast.AST] = [tree]
        while stack:
            node = stack.pop()
            self.nodes.append(node)
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
                stack.append(child)
        self.nodes.reverse()  # parents before children, as ast.walk
        self.aliases = self._aliases()
        # `train = partial(data_pass, train=True)` at module level: calls of `train` reach `data_pass`
        self.partials = {n.targets[0].id: n.value.args[0].id for n in self.tree.body
                         if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                         and isinstance(n.value, ast.Call) and dotted(n.value.func) in ("partial", "functools.partial")
                         and n.value.args and isinstance(n.value.args[0], ast.Name)}  # fmt: skip
        self.functions: dict[str, list[ast.AST]] = {}
        for n in self.nodes:
            if isinstance(n, FUNCS):
                self.functions.setdefault(n.name, []).append(n)
        self._next_targets: dict[ast.AST, list[ast.AST]] = {}
        self._iterated: dict[ast.AST, list[ast.AST]] = {}  # a loop -> the same-file generators it iterates
        self.instances = self._instances()
        self.calls_to: dict[str, list[ast.Call]] = {}
        for n in self.nodes:
            if isinstance(n, ast.Call):
                target = self.local_target(n)
                if not target and isinstance(n.func, ast.Attribute) and dotted(n.func.value) in self.instances:
                    target = n.func.attr  # `agent.learn(x)`: a call site of `Agent.learn`, for its parameters' kinds
                elif dotted(n.func) in self.instances:
                    target = "forward"  # `criterion(pred, y)` calls `Yolo_loss.forward`
                if target:
                    self.calls_to.setdefault(target, []).append(n)
        self._kinds_init()
        self.step_functions = self._step_functions()
        self.hot_loops: set[ast.AST] = set()
        self.train_loops: set[ast.AST] = set()
        self.hot_functions: set[ast.AST] = set()
        self.train_functions: set[ast.AST] = set()
        self._find_hot()
        # Code that moves nothing to a device (a tutorial printing `device` but training on the CPU) is CPU code:
        # its reads wait for nothing (the sync rules skip it) and its loaders need no pinned memory.
        moves = any(
            isinstance(n, ast.Call)
            and (
                method_name(n) in ("to", "cuda", "prepare", "setup", "backward")
                and isinstance(n.func, ast.Attribute)
                and method_name(n) != "backward"
                or any(k.arg == "device" for k in n.keywords)
                # `accelerator.backward(loss)` in a helper module the Accelerate script calls: its device
                or method_name(n) == "backward"
                and bool(re.search(r"accelerator|fabric", dotted(n.func), re.I))
                or isinstance(n.func, ast.Name)
                and bool(MOVER_FN.search(n.func.id))  # `to_device(X, self.device)`
            )
            for n in self.nodes
        ) or bool(
            re.search(
                r"^\s*(import|from)\s+(accelerate|lightning|"
                r"pytorch_lightning|deepspeed|torch_xla)",
                source,
                re.M,
            )
        )
        # `def training_step` methods run on the trainer's device (not a `self.training_step = 0` counter)  # fmt: skip
        moves = (
            moves
            or "def training_step(" in source
            or bool(
                re.search(
                    r"DistributedDataParallel|FullyShardedDataParallel|fully_shard\(|device_ids|['\"]nccl['\"]|"
                    r"torch\.cuda\.amp\.|GradScaler\(|torch\.cuda\.(empty_cache|reset_max_memory|max_memory_)",
                    source,  # (CUDA mixed precision, or CUDA memory managed: the batch is moved elsewhere)
                )
            )
        )
        cuda = r"\.cuda\(|['\"]cuda|cuda\.(is_available|amp\.|empty_cache|reset_max_memory|max_memory_)|device_count\("
        self.uses_cuda = moves and bool(re.search(cuda, source))
        self.device_code = (
            self.uses_cuda
            or moves
            and bool(
                re.search(r"device|accelerat|fabric|lightning|\.to\(|torch_xla|\bmps\b|def training_step\(", source)
            )
            or bool(self.hot_loops or self.hot_functions)
            and (
                bool(path)
                and not path.startswith("<")
                and project_on_device(Path(path))  # a trainer module whose batches come from another file
                # a library's algorithm that is handed its device (torch-ac's `PPOAlgo(envs, acmodel, device)`)
                or any(
                    a.arg == "device"
                    for fs in self.functions.values()
                    for f in fs
                    for a in [*f.args.args, *f.args.kwonlyargs]
                )  # fmt: skip
            )
        )

    # -- names ----------------------------------------------------------------------------------

    def _aliases(self) -> dict[str, str]:
        out: dict[str, str] = {}
        assigned: dict[str, int] = {}
        for n in self.nodes:
            if isinstance(n, ast.Import):
                for a in n.names:
                    if a.asname:
                        out[a.asname] = a.name
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                for a in n.names:
                    out[a.asname or a.name] = f"{n.module}.{a.name}"
            elif isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        assigned[t.id] = assigned.get(t.id, 0) + 1
        for n in self.nodes:  # `sync = torch.cuda.synchronize (if cuda else lambda: None)`, assigned once
            if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                    and assigned.get(n.targets[0].id) == 1):  # fmt: skip
                value = n.value.body if isinstance(n.value, ast.IfExp) else n.value
                if isinstance(value, ast.Attribute):
                    full = self.resolve(dotted(value), out)
                    if full.startswith("torch."):
                        out[n.targets[0].id] = full
        return out

    @staticmethod
    def resolve(name: str, aliases: dict[str, str]) -> str:
        """Only names of the modules the rules know are expanded (`F.relu` -> `torch.nn.functional.relu`);
        `from tqdm import tqdm` or a logger import keep the spelling the rules match."""
        head, _, rest = name.partition(".")
        full = aliases.get(head)
        if not full or full.split(".")[0] not in ("torch", "time", "numpy", "math"):
            return name
        return f"{full}.{rest}" if rest else full

    def call_name(self, call: ast.Call) -> str:
        return self.resolve(dotted(call.func), self.aliases)

    @staticmethod
    def walk_local(node: ast.AST):
        return walk_local(node)

    # -- hot regions ----------------------------------------------------------------------------

    def _step_functions(self) -> set[str]:
        """Functions that take one training step: a backward/optimizer step not inside a loop of their own.
        (A function that loops over batches itself is an epoch function: its loop is the hot one.)"""
        names: set[str] = set()
        calls = [n for n in self.nodes if isinstance(n, ast.Call)]
        changed = True
        while changed:  # transitively: run_step() -> optimize() -> opt.step() makes run_step a step too
            changed = False
            for node in calls:
                is_step = is_step_call(node) or self.local_target(node) in names
                loop = self.enclosing_loop(node)  # (or VQ-Diffusion's `for n, op in self.optimizers.items()`)
                it = getattr(loop, "iter", None)
                if is_step and (loop is None or isinstance(it, ast.Call) and method_name(it) in ("items", "values")):
                    fn = self.enclosing_function(node)
                    if isinstance(fn, FUNCS) and fn.name not in names:
                        names.add(fn.name)
                        changed = True
        return names

    def _calls_step(self, node: ast.AST) -> bool:
        if is_step_call(node):  # (but `torch_single_train(model, opt, ..., meta_loss)` handing a loss and the
            name = call_name(node).split(".")[-1]  # optimizer to a same-file epoch function: flow-forecast)
            fns = self.functions.get(name, []) if name not in ("backward", "step") else []
            return not (fns and all(self._loops_over_data(fn) for fn in fns))
        if isinstance(node, ast.Call):
            name = call_name(node).split(".")[-1]
            handed = any(isinstance(a, ast.Name) and a.id in self.step_functions for a in node.args)
            if not (handed or name in self.step_functions or STEP_FUNCTION.search(name)):  # `timer(train_step)`
                return False
            if any(isinstance(a, ast.Constant) and a.value in ("val", "valid", "test", "eval")
                   for a in [*node.args, *(k.value for k in node.keywords)]):  # fmt: skip
                return False  # SAITS' `model_processing(data, model, "val")`: the step function's evaluation stage
            if under_no_grad(self.parent, node):
                return False  # pydreamer's `evaluate()` reusing `model.training_step(...)` under `torch.no_grad()`
            # A "train_step" that loops over a loader itself is an epoch function: its caller's loop runs
            # epochs, and what else that loop calls (a `test_step`) runs once per epoch, not per step.
            return not any(self._loops_over_data(fn) for fn in self.functions.get(name, []))
        return False

    def _loops_over_data(self, fn: ast.AST, whiles: bool = False) -> bool:
        """`fn` has a loop of its own over a loader (with `whiles`, any `while` loop counts too)."""
        return any(isinstance(n, (ast.For, ast.AsyncFor)) and self._iterates_data(n.iter)
                   or whiles and isinstance(n, ast.While) for n in walk_local(fn))  # fmt: skip

    def enclosing_loop(self, node: ast.AST) -> ast.AST | None:
        n = self.parent.get(node)
        while n is not None and not isinstance(n, (*FUNCS, ast.Lambda, ast.Module)):
            if isinstance(n, (ast.For, ast.AsyncFor, ast.While)):
                return n
            n = self.parent.get(n)
        return None

    def enclosing_loops(self, node: ast.AST) -> list[ast.AST]:
        """Every loop around `node` in its function, innermost first."""
        out, n = [], self.enclosing_loop(node)
        while n is not None:
            out.append(n)
            n = self.enclosing_loop(n)
        return out

    def enclosing_function(self, node: ast.AST) -> ast.AST:
        n = self.parent.get(node)
        while n is not None and not isinstance(n, (*FUNCS, ast.Module)):
            n = self.parent.get(n)
        return n if n is not None else self.tree

    def _find_hot(self) -> None:
        for node in self.nodes:
            if self._calls_step(node):
                self._mark(self.enclosing_loop(node), hot=True)
        self.hot_loops -= flushed_epochs(self)  # an epoch loop with a leftover step after its batches (forks)
        for loop in list(self.hot_loops):  # `while True: x = next(it); for phase in phases: ... opt.step()`, also
            outer = self.enclosing_loop(loop)  # through a loop over layers (cflow-ad's fibers of each pool layer)
            for mid in (loop, outer):
                if outer is not None and self._per_step_outer(outer, mid):
                    self.hot_loops.add(outer)
                    break
                data = isinstance(outer, (ast.For, ast.AsyncFor)) and self._iterates_data(outer.iter)
                outer = None if outer is None or data else self.enclosing_loop(outer)
        for name, fns in self.functions.items():
            if STEP_FUNCTION.search(name) or PER_STEP_METHOD.match(name):
                self.hot_functions.update(fns)
            # A function that itself runs backward (or zero_grad: the model's forward may run backward, FUNIT's
            # `gen_update`) and steps the optimizer, with no loop over data of its own (a step closure a factory
            # returns, a trainer's `optimize_parameters`), is one step wherever it is called.
            for fn in fns if name in self.step_functions else ():
                calls = [n for n in walk_local(fn) if isinstance(n, ast.Call)]
                direct = (any(isinstance(c.func, ast.Attribute) and c.func.attr in ("backward", "zero_grad")
                              for c in calls) and any(is_optimizer_step(c) for c in calls))  # fmt: skip
                # (or an agent's `update` whose steps are its same-file `update_critic`/`update_actor`, called by
                # nothing in this file: its loop is the training script's)
                entry = (isinstance(self.parent.get(fn), ast.ClassDef) and AGENT_UPDATE.match(name)
                         and not any(self.local_target(c) == name for c in self.calls_to.get(name, [])))  # fmt: skip
                if (direct or entry) and not self._loops_over_data(fn, whiles=True):
                    self.hot_functions.add(fn)
        # An agent's per-environment-step methods, which a script or notebook elsewhere calls every step (Udacity's
        # `Agent.act(state)`, and `Agent.step(...)` sampling the replay buffer for `learn`): in a class whose update
        # is hot, called by nothing in this file.
        # (or whose update has its own minibatch loop: PPO's `learn`)
        updates = {f for loop in self.hot_loops if (f := self.enclosing_function(loop)) is not None
                   and AGENT_UPDATE.match(getattr(f, "name", ""))}  # fmt: skip
        for cls in {self.parent.get(f) for f in self.hot_functions | updates}:
            methods = [f for f in cls.body if isinstance(f, FUNCS)] if isinstance(cls, ast.ClassDef) else []
            for fn in methods:  # (beside a `sample_action`, CURL's `select_action` is the evaluation's one)
                evaluation = fn.name == "select_action" and any(m.name == "sample_action" for m in methods)
                if not evaluation and AGENT_STEP.match(fn.name) and not self.calls_to.get(fn.name):
                    self.hot_functions.add(fn)
        # A loop that calls a function holding a hot loop (an epoch function) is a training loop too.
        holders = {self.enclosing_function(loop) for loop in self.hot_loops} - {self.tree}
        epoch_fns = {fn.name for fn in holders}  # type: ignore[attr-defined]
        # (a function running its own epochs, GraphMAE's `pretrain`, from `for seed in seeds` repeats whole runs)
        whole_runs = {fn.name for fn in holders if runs_epochs(fn, self.hot_loops)}  # type: ignore[attr-defined]
        # A function named for an epoch that holds the step loop runs once per epoch: what it does around that
        # loop (saving `last_epoch_weights.pth`) is per-epoch training code even with its caller in another file.
        self.train_functions.update(fn for fn in holders if EPOCH_NAMED.search(fn.name))  # type: ignore[attr-defined]
        epoch_fns |= {
            call_name(n).split(".")[-1]
            for n in self.nodes
            if isinstance(n, ast.Call) and EPOCH_FUNCTION.match(call_name(n).split(".")[-1])
        }  # `train_one_epoch` from another file
        if epoch_fns:
            for node in self.nodes:
                if not isinstance(node, ast.Call):
                    continue
                called = {call_name(node).split(".")[-1], self.local_target(node)}
                if isinstance(node.func, ast.Name):  # (`train = train_nll` or `train_dice` by a flag: vnet's loop)
                    called |= {getattr(f, "name", "") for f in self._chosen(node)}
                if called & epoch_fns and not (called & whole_runs and repeats_runs(self.enclosing_loop(node))):
                    self._mark(self.enclosing_loop(node), hot=False)
        self._rollouts()
        self._training_data_loops()
        # (name, called as a method): `trainer.train(batch)` runs the method `train`, not the script's `def train()`
        called_in_loops = {(call_name(n).split(".")[-1], isinstance(n.func, ast.Attribute))
                           for loop in self.hot_loops | self.train_loops for n in walk_local(loop)
                           if isinstance(n, ast.Call)}  # fmt: skip
        for name, attr in called_in_loops:
            if name in self.step_functions:  # (not one looping over data itself: an epoch function, TranAD's)
                self.hot_functions.update(f for f in self.functions[name] if isinstance(
                    self.parent.get(f), ast.ClassDef) == attr and not self._loops_over_data(f))  # fmt: skip
        # Interprocedural: what a hot region calls every step is hot; what a training loop calls is training code.
        self._generators()
        self._callbacks()
        self.propagate()

    def propagate(self, *hot: ast.AST) -> None:
        """Make `hot` functions hot and training code (a step another file calls: STCN's `do_pass` and the save
        it gates), then, to a fixpoint, what hot regions call every step and what training loops call."""
        self.hot_functions.update(hot)
        self.train_functions.update(hot)
        calls = [n for n in self.nodes if isinstance(n, ast.Call) and self.targets_of(n)]
        changed = True
        while changed:
            changed = False
            for loop, fns in self._iterated.items():  # the generator's loops around its `yield`: once per item
                inner = {n for f in fns for n in walk_local(f) if isinstance(n, (ast.For, ast.AsyncFor, ast.While))
                         and yields(n)}  # fmt: skip
                if (loop in self.hot_loops or loop in self.train_loops) and not inner <= self.hot_loops:
                    self.hot_loops.update(inner)
                    changed = True
            for c in calls:
                hot, training = self.in_hot(c), self.in_training_loop(c)
                for fn in self.targets_of(c):
                    if hot and fn not in self.hot_functions and not self._is_outer(fn, c):
                        self.hot_functions.add(fn)
                        changed = True
                    if training and fn not in self.train_functions and not self._is_outer(fn, c):
                        self.train_functions.add(fn)
                        changed = True

    def mark_steps(self, calls: list[ast.Call], epochs: bool = False) -> None:
        """Calls found (in another file) to take a training step - `policy.train(buffer)`, `agent.update(
        rollouts)` - make their loops hot, as a backward or an optimizer step in them would; calls found to
        run a training loop (`epochs`) make theirs training loops, as a same-file epoch function's do."""
        for node in calls:
            loop = self.enclosing_loop(node)
            if loop is None and not epochs:  # `run_step()` whose step a helper object takes: a step function
                fn = self.enclosing_function(node)
                self.hot_functions.add(fn)
                for call in self.calls_to.get(getattr(fn, "name", ""), []):
                    if self.enclosing_loop(call) not in self.hot_loops:
                        self._mark(self.enclosing_loop(call), hot=True)
            elif loop not in self.hot_loops:
                self._mark(loop, hot=not epochs)
        self._rollouts()
        self._training_data_loops()
        self.propagate()

    def _mark(self, loop: ast.AST | None, hot: bool) -> None:
        """`loop` trains (every step when `hot`), and so does every loop around it (an epoch loop)."""
        if loop is not None and hot:
            self.hot_loops.add(loop)
        while loop is not None:
            self.train_loops.add(loop)
            loop = self.enclosing_loop(loop)

    def _is_outer(self, fn: ast.AST, call: ast.AST) -> bool:
        """A call inside `fn` itself (recursion) or of a function that holds the hot loop (an epoch function)."""
        n = self.parent.get(call)
        while n is not None:
            if n is fn:
                return True
            n = self.parent.get(n)
        holds_loop = any(self.enclosing_function(loop) is fn for loop in self.hot_loops)
        return holds_loop and not self.in_hot(call)  # an epoch function, called from outside every hot region

    def in_hot(self, node: ast.AST) -> bool:
        """Runs every step: inside a hot loop's body or a hot function, and not under a boundary gate."""
        n = self.parent.get(node)
        while n is not None:
            if n in self.hot_loops or n in self.hot_functions:
                if isinstance(n, (ast.For, ast.AsyncFor)) and self._in_iter(node, n):
                    return False
                return not self._gated(node, n)
            if isinstance(n, ast.Lambda) and isinstance(self.parent.get(n), ast.Call):
                n = self.parent.get(n)  # a lambda handed to a call runs inside that call, here
                continue
            if isinstance(n, (*FUNCS, ast.Lambda)) and n not in self.hot_functions:
                return False
            n = self.parent.get(n)
        return False

    def in_training_loop(self, node: ast.AST) -> bool:
        n = self.parent.get(node)
        while n is not None and not isinstance(n, ast.Lambda):
            if n in self.train_loops or n in self.train_functions:
                return True
            if isinstance(n, FUNCS):
                break
            n = self.parent.get(n)
        return self.in_hot(node)

    def _in_iter(self, node: ast.AST, loop: ast.For | ast.AsyncFor) -> bool:
        n = node
        while n is not None and n is not loop:
            if n is loop.iter:
                return True
            n = self.parent.get(n)
        return False

    def remote_return_kind(self, call: ast.Call) -> str | None:
        from hotloop.lint.imports import remote_return_kind  # (imports needs this module)

        return remote_return_kind(self, call)

    def remote_positions(self, call: ast.Call) -> list[str | None]:
        from hotloop.lint.imports import remote_positions

        return remote_positions(self, call)

    def has_sync_marker(self, line: int) -> bool:
        return 0 < line <= len(self.lines) and "# sync:" in self.lines[line - 1]
