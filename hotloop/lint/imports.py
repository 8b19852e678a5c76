"""The script's own project: which file and function an import or a call of the linted script names.

`hotloop lint train.py` resolves the script's imports of its own project (`from src.utils.logging import
grad_logger`, `from utils.loss import ComputeLoss`, `import utils.misc as misc`) to files beside it: the
module is looked for from the script's folder upwards (at most four levels), like `python train.py` or
`python -m` from the repository root would find it. A call resolves to a function, a class's method, or
what an instance of a project class runs (`__call__`, `forward`); an object the script got from a factory
is guessed by its name (`classes.guess`). What the call does there is `effects`'s business. Without the
project on disk (a lone file) nothing resolves.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hotloop.lint.analysis import ModuleInfo, assigned_values, call_name, constructed, is_step_call, walk_local
from hotloop.lint.callsites import NOT_OBJECT, typed_receiver
from hotloop.lint.classes import guess, in_folder, project_root, unique_module
from hotloop.lint.moved import fills
from hotloop.lint.syntax import dotted, method_of, parse_source, passed_for

# Reads that need no kind guess about the helper's attributes: explicit reads, copies to the host,
# data-dependent sizes and synchronisations. Branches (HL005), formatting (HL002) and list indexes (HL024) in
# another file's model code were mostly configuration attributes and inference paths when scored.
# Methods whose reads are their job, not a training step's overhead: decoding checks for an end token, an
# evaluation pass reads its results, an agent choosing an action reads it for the environment (judged false
# every time in the labelled set).
NOT_A_STEP = re.compile(r"generat|predict|infer|evaluat|eval$|test|valid|decode|render|^act$|action", re.I)
LEVELS_UP = 4
PATH_SET = re.compile(r"^\s*import _init_paths|sys\.path\.(insert|append)\(", re.M)
_MODULES: dict[tuple[str, float], ModuleInfo | None] = {}
_RESOLVED: dict[tuple[Path, str, int], Path | None] = {}


def find_def(tree: ast.Module, name: str, methods: tuple[str, ...] = ("__call__", "forward")) -> ast.AST | None:
    """A top-level function, or the first of `methods` of the class `name`: what a call of an instance runs
    (`__call__`, `forward`), or what builds its loaders (`__init__`); `Cls.meth`: that method of `Cls`."""
    if "." in name:
        cls, meth = name.split(".", 1)
        return find_def(tree, cls, (meth,))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
        if isinstance(node, ast.ClassDef) and node.name == name:
            return method_of(node, methods, classes)
    return None


_STARRING: set[Path] = set()  # star-imported modules being read (cycles end there)


class Project:
    """The files of the linted script's project, as its imports name them."""

    def __init__(self, mi: ModuleInfo) -> None:
        self.mi = mi
        self.file = Path(mi.path).resolve() if mi.path and not mi.path.startswith("<") else None
        self.names: dict[str, tuple[Path, str]] = {}  # local name -> (file, function or class in it)
        self.modules: dict[str, Path] = {}  # local name -> module file
        self.folders: dict[str, str] = {}  # local name -> an imported package without its `__init__.py`
        if self.file is not None and self.file.is_file():
            self._read_imports()

    @staticmethod
    def of(mi: ModuleInfo) -> Project:
        """The module's project, read once: the step-taking calls, the cross-file pass and re-exports all ask."""
        if not hasattr(mi, "project"):
            mi.project = Project(mi)  # type: ignore[attr-defined]
        return mi.project  # type: ignore[attr-defined]

    def _resolve(self, module: str, level: int) -> Path | None:
        assert self.file is not None
        key = (self.file.parent, module, level)
        if key not in _RESOLVED:  # a directory's files import the same modules: look each up once
            _RESOLVED[key] = self._lookup(module, level)
        found = _RESOLVED[key]
        return found if found != self.file else None

    def _lookup(self, module: str, level: int) -> Path | None:
        assert self.file is not None
        if level:
            roots = [self.file.parents[level - 1]] if level <= len(self.file.parents) else []
        else:
            roots = [self.file.parent, *list(self.file.parent.parents)[:LEVELS_UP]]
            if PATH_SET.search(self.mi.source):  # `import _init_paths` (CenterNet): `lib/` is put on sys.path
                roots += [p / d for p in (self.file.parent, self.file.parent.parent) for d in ("lib", "src")]  # HRNet
        rel = Path(*module.split(".")) if module else Path()
        for root in roots:
            for f in (
                (root / rel.parent / f"{rel.name}.py", root / rel / "__init__.py")
                if module
                else (root / "__init__.py",)
            ):
                if f.is_file():
                    return f
        if not level and module and "." not in module:  # `from loss import f` run with src/* on PYTHONPATH
            return unique_module(self.file, module)
        return None

    def _in_folder(self, module: str, level: int, name: str) -> Path | None:
        """`classes.in_folder` in the folder the import names, looked for as `_lookup` looks for modules."""
        assert self.file is not None
        if not module:
            return None
        roots = ([self.file.parents[level - 1]] if level <= len(self.file.parents) else []) if level else [
            self.file.parent, *list(self.file.parent.parents)[:LEVELS_UP]]  # fmt: skip
        return next((f for r in roots if (f := in_folder(r / Path(*module.split(".")), name)) is not None), None)

    def _read_imports(self) -> None:
        for n in self.mi.nodes:
            if isinstance(n, ast.ImportFrom) and [a.name for a in n.names] == ["*"]:
                self._star(n)
            elif isinstance(n, ast.ImportFrom):
                for a in n.names:
                    local = a.asname or a.name
                    sub = self._resolve(f"{n.module}.{a.name}" if n.module else a.name, n.level)
                    if sub is not None:  # `from utils import loss`: a module
                        self.modules[local] = sub
                    elif (f := self._resolve(n.module or "", n.level)) is not None:
                        text = f.read_text(encoding="utf-8-sig", errors="replace") if f.name == "__init__.py" else ""
                        if f.name == "__init__.py" and a.name not in text:
                            # an empty package beside its same-named module (`src/data/data.py` on sys.path)
                            f = (n.module and not n.level and unique_module(self.file, n.module)) or f  # type: ignore[arg-type]
                        self.names[local] = (f, a.name)
                    elif (f := self._in_folder(n.module or "", n.level, a.name)) is not None:
                        self.names[local] = (f, a.name)
            elif isinstance(n, ast.Import):
                for a in n.names:  # `import utils`, `import utils.misc as misc` (not `import a.b`: `a.b.f()`)
                    if (a.asname or "." not in a.name) and (f := self._resolve(a.name, 0)) is not None:
                        self.modules[a.asname or a.name] = f
                    elif a.asname or "." not in a.name:  # `import lib` of a folder whose `__init__.py` is not here
                        self.folders[a.asname or a.name] = a.name
        for d in self.mi.tree.body:  # the file's own `class Batches` shadows the one `from utils import *` brought
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.names.pop(d.name, None)

    def _star(self, n: ast.ImportFrom) -> None:
        """`from utils import *` (older research code): every top-level function and class of the module, and
        what it brings in itself by name or by its own star imports (DeepRL's `from ..network import *`, whose
        package re-exports `from .torch_utils import *` two hops on)."""
        f = self._resolve(n.module or "", n.level)
        mi = load_module(f, f.stat().st_mtime) if f is not None else None
        if mi is None or f in _STARRING:
            return
        for d in mi.tree.body:
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not d.name.startswith("_"):
                self.names.setdefault(d.name, (f, d.name))  # type: ignore[arg-type]
        _STARRING.add(f)  # type: ignore[arg-type]
        try:  # (a package importing its modules' names again, in a cycle, is followed once)
            for name, target in Project.of(mi).names.items():
                if not name.startswith("_"):
                    self.names.setdefault(name, target)
        finally:
            _STARRING.discard(f)  # type: ignore[arg-type]

    def callee(self, c: ast.Call) -> tuple[Path, str] | None:
        """What another file of the project runs for this call: `f(...)`, `mod.f(...)`, or `obj(...)` for an
        `obj = Imported(...)` of this file."""
        name = call_name(c)
        made = c.func.value if isinstance(c.func, ast.Attribute) else None
        if isinstance(made, ast.Call) and (cls := self.callee(made)) is not None and "." not in cls[1]:
            return cls[0], f"{cls[1]}.{c.func.attr}"  # type: ignore[union-attr]  # `Checkpoint(model, epoch).save()`
        if not name:  # `x[k].mul_(...)`, `(a - b)(...)`: no name to resolve
            return None
        head, _, rest = name.partition(".")
        if not rest and head in self.names:
            return self.names[head]
        if not rest and (alias := next((v.id for v in fills(self.mi).get(head, []) if isinstance(v, ast.Name)
                                        and v.id in self.names), None)):  # fmt: skip
            return self.names[alias]  # `get_train_loader = get_pytorch_train_loader` (the first backend: the default)
        if rest and "." not in rest and head in self.modules:
            return self.modules[head], rest
        if rest and "." not in rest and head in self.folders:  # `lib.train_with_auto_virtual_batch(...)`
            found = self._in_folder(self.folders[head], 0, rest)
            return (found, rest) if found is not None else None
        instances = self._instances()
        obj, _, meth = name.rpartition(".")
        if obj == "self" and (inherited := self._inherited(c, meth)) is not None:
            return inherited  # AtlasNet's `self.train_iteration()` from the mixin `TrainerIteration` in another file
        if obj in instances and not meth.startswith("_"):  # `policy.train(buffer)` with `policy = TD3.TD3(...)`
            return instances[obj][0], f"{instances[obj][1]}.{meth}"
        if name in instances:
            return instances[name]
        # a parameter its callers hand a project class: `criterion(out, targets)`, `self.model(x)`, `agent.update(b)`
        if (typed := typed_receiver(self.mi, c, name)) is not None:
            return typed
        typed = typed_receiver(self.mi, c, obj) if obj and not meth.startswith("_") and (
            meth not in NOT_OBJECT or meth == "log") else None  # fmt: skip  # (a tensor's `log`, and DrQ's logger's)
        if typed is not None:
            return typed[0], f"{typed[1]}.{meth}"
        if obj and self.file is not None and obj.partition(".")[0] not in self._imported():
            return guess(self.file, self._root(), obj, meth)  # `model.set_input(data)`, `model = create_model(opt)`
        return None

    def _inherited(self, c: ast.Call, meth: str) -> tuple[Path, str] | None:
        """`self.meth(...)` in a class that does not define `meth` but derives from an imported project class
        that does (a mixin): that class's method in its file."""
        cls = self.mi.parent.get(self.mi.enclosing_function(c))
        if not isinstance(cls, ast.ClassDef) or any(getattr(f, "name", "") == meth for f in cls.body):
            return None
        for base in cls.bases:
            target = self.names.get(dotted(base))
            other = load_module(target[0], target[0].stat().st_mtime) if target is not None else None
            if other is not None and find_def(other.tree, f"{target[1]}.{meth}") is not None:  # type: ignore[index]
                return target[0], f"{target[1]}.{meth}"  # type: ignore[index]
        return None

    def _root(self) -> Path | None:
        """The folder of the project's classes (`classes.project_root`), found once."""
        if not hasattr(self, "_root_dir"):
            files = [*self.modules.values(), *(f for f, _ in self.names.values())]
            self._root_dir = project_root(self.file, files) if self.file is not None else None
        return self._root_dir

    def _imported(self) -> set[str]:
        """Every name an import binds: a receiver that is a library module or class is not the project's."""
        if not hasattr(self, "_imp"):
            self._imp = {(a.asname or a.name).partition(".")[0] for n in self.mi.nodes
                         if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}  # fmt: skip
        return self._imp

    def _instances(self) -> dict[str, tuple[Path, str]]:
        """`compute_loss = ComputeLossOTA(model)` (or `self.crit = losses.Focal()`): the name runs the class."""
        if not hasattr(self, "_inst"):
            self._inst: dict[str, tuple[Path, str]] = constructed(self.mi.nodes, self._class_of)
            for a in self.mi.nodes:  # `def voc_train_loop(paths, model: WaveRNN, ...)`: the parameter's class
                if isinstance(a, ast.arg) and isinstance(a.annotation, (ast.Name, ast.Attribute)) and a.arg != "self":
                    made = self._class_of(ast.Call(func=a.annotation, args=[], keywords=[]))
                    if made is not None:
                        self._inst.setdefault(a.arg, made)
            for fn in (f for fs in self.mi.functions.values() for f in fs):  # `def train(e, model, ...)` that
                for a in fn.args.args:  # every caller hands `seq2seq = Seq2Seq(...).cuda()` (keon's seq2seq)
                    given = [passed_for(fn, c, a.arg) for c in self.mi.calls_to.get(fn.name, [])]
                    known = {self._inst.get(g.id) if isinstance(g, ast.Name) else None for g in given}
                    if given and len(known) == 1 and None not in known and a.arg != "self":
                        self._inst.setdefault(a.arg, known.pop())  # type: ignore[arg-type]
        return self._inst

    def _class_of(self, c: ast.Call) -> tuple[Path, str] | None:
        """The project class a call constructs (`ComputeLoss(...)`, `losses.Focal()`), not a function's result."""
        name = call_name(c)
        h, _, r = name.partition(".")
        target = self.names.get(name)
        if target is None and r and h in self.modules:  # `losses.Focal()`
            target = self.modules[h], r
        return target if target is not None and target[1][:1].isupper() else None


def not_a_step(name: str) -> bool:
    """A function or method whose name says it is not a training step (`decode`, `evaluate`); a class's
    instance runs its `forward`, whatever the class is called (`DecoderWithAttention`)."""
    last = name.rpartition(".")[2]
    return not ("." not in name and last[:1].isupper()) and bool(NOT_A_STEP.search(last))


def remote_steps(mi: ModuleInfo, epochs: bool = False) -> list[ast.Call]:
    """Calls, in loops not yet known to train, of a project helper that takes a training step itself (runs
    backward or steps an optimizer, with no loop over data of its own): an RL script's `policy.train(buffer)`
    or `agent.update(rollouts)`, a GAN's `model.optimize_parameters()`. With `epochs`: of a helper that holds
    a training loop (`from helper.loops import train_distill as train` called once per epoch)."""
    out: list[ast.Call] = []
    for c in mi.nodes:
        if not isinstance(c, ast.Call) or mi.in_hot(c):
            continue
        # (a plain name: only an instance of a project class, `maml(x_spt, ...)` running `Meta.forward`)
        instance = isinstance(c.func, ast.Name) and c.func.id in Project.of(mi)._instances()
        made = not epochs and isinstance(c.func, ast.Name) and _made_step(mi, c.func)
        # (a project function by name too: in a loop (PairNorm's `train`), or given an optimizer (`update_params`))
        named = isinstance(c.func, ast.Name) and (mi.enclosing_loop(c) is not None or any(
            re.search(r"optim", dotted(a), re.I) for a in c.args))  # fmt: skip
        if not (epochs or isinstance(c.func, ast.Attribute) or instance or made or named):
            continue
        loop = mi.enclosing_loop(c)
        if loop in mi.hot_loops or loop is None and (epochs or mi.enclosing_function(c) is mi.tree):
            continue  # (outside a loop, in a function: `run_step()` delegating its optimizer step to a helper)
        target = Project.of(mi).callee(c)
        if made:
            out.append(c)  # `train = train_fns.GAN_training_function(...)` ... `metrics = train(x, y)`
            continue
        if target is None and epochs and _trains_an_epoch(c):
            out.append(c)  # `trainer.train(epoch, train_loader)` of a trainer picked from a table: not resolved
            continue
        if target is None or not_a_step(target[1]) or not epochs and _evaluation_variant(c):
            continue  # (RIFE's `model.update(imgs, gt, training=False)` in `evaluate`: its step is `if training:`)
        file, name = defining(*target)
        if not _may_step(file) and not (epochs and re.search(r"train|fit|epoch", target[1], re.I)):
            continue  # (an epoch function's step may be a third file's: LightGCN's `Procedure.BPR_train_original`)
        helper = load_module(file, file.stat().st_mtime)
        if helper is None:
            continue
        if epochs:
            fn = find_def(helper.tree, name)
            # (its loop's step may itself be another file's: LightGCN's `BPR_train_original` calling `bpr.stageOne`)
            loops = helper.hot_loops | {helper.enclosing_loop(s) for s in _steps_of(helper)}
            if fn is not None and any(helper.enclosing_function(loop) is fn for loop in loops if loop is not None):
                out.append(c)
        elif name.rpartition(".")[2] in helper.step_functions:
            out.append(c)
        elif "." not in name and isinstance(fn := find_def(helper.tree, name), ast.FunctionDef) and any(
            isinstance(k, ast.ClassDef) and k.name == name for k in helper.tree.body
        ) and fn.name in helper.step_functions and dotted(c.func).rpartition(".")[2] != name:  # fmt: skip
            # an instance's `forward` that takes the optimizer step (MAML's `Meta`), not the class built
            out.append(c)  # (Dreamer's `self._model_opt = tools.Optimizer(...)` in `__init__` takes no step)
    return out


def _evaluation_variant(c: ast.Call) -> bool:
    """The call asks for the helper's evaluation path: `train=False` / `training=False` / `is_train=False`."""
    return any(k.arg in ("train", "training", "is_train", "is_training") and isinstance(k.value, ast.Constant)
               and k.value.value is False for k in c.keywords)  # fmt: skip


def _steps_of(helper: ModuleInfo) -> list[ast.Call]:
    """The helper module's calls that take another file's training step, found once."""
    if not hasattr(helper, "remote_step_calls"):
        helper.remote_step_calls = []  # type: ignore[attr-defined]  # (a cycle of imports stops here)
        helper.remote_step_calls = remote_steps(helper)  # type: ignore[attr-defined]
    return helper.remote_step_calls  # type: ignore[attr-defined]


def _made_step(mi: ModuleInfo, name: ast.Name) -> bool:
    """`name` was assigned what a project function returns, and that is a function it defines which takes an
    optimizer step (BigGAN's `train_fns.GAN_training_function(...)` returning its inner `train(x, y)`)."""
    if re.search(r"eval|test|valid|sampl", name.id, re.I):
        return False
    calls = getattr(mi, "call_results", None)
    if calls is None:  # once per module: each name assigned the result of a call (any scope)
        calls = {}
        for n in mi.nodes:
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        calls.setdefault(t.id, []).append(n.value)
        mi.call_results = calls  # type: ignore[attr-defined]
    if name.id not in calls:
        return False
    fn = mi.enclosing_function(name)
    memo = mi.__dict__.setdefault("made_steps", {})
    if (fn, name.id) not in memo:
        memo[(fn, name.id)] = _returns_a_step(mi, fn, name)
    return memo[(fn, name.id)]


def _returns_a_step(mi: ModuleInfo, fn: ast.AST, name: ast.Name) -> bool:
    for made in assigned_values(name.id, [*walk_local(fn), *(walk_local(mi.tree) if fn is not mi.tree else [])]):
        target = Project.of(mi).callee(made) if isinstance(made, ast.Call) else None
        if isinstance(made, ast.Call) and _evaluation_variant(made):
            continue  # `get_step_fn(sde, train=False)`: the evaluation variant
        if target is None or "." in target[1] or not _may_step(target[0]):
            continue
        file, fname = defining(*target)
        helper = load_module(file, file.stat().st_mtime)
        outer = find_def(helper.tree, fname) if helper is not None else None
        if not isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        returned = {
            r.value.id for r in walk_local(outer) if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)
        }
        for inner in outer.body:
            if (
                isinstance(inner, ast.FunctionDef)
                and inner.name in returned
                and any(isinstance(n, ast.Call) and is_step_call(n) for n in ast.walk(inner))
            ):
                return True
    return False


EPOCH_CALL = re.compile(r"^(train|train_one_epoch|train_epoch|run_epoch|fit_epoch)$")
TRAIN_DATA = re.compile(r"^(train_?(loader|dataloader|data_loader|iter|dl)|loader|dataloader|data_loader)$")


def _trains_an_epoch(c: ast.Call) -> bool:
    """`trainer.train(epoch, train_loader)`: a method named for an epoch of training, given the loader."""
    return (isinstance(c.func, ast.Attribute) and bool(EPOCH_CALL.match(c.func.attr))
            and any(isinstance(a, ast.Name) and TRAIN_DATA.match(a.id) for a in c.args))  # fmt: skip


_STEPS_TEXT: dict[Path, bool] = {}


def _may_step(file: Path) -> bool:
    """The file could take a training step (or re-exports from one that does): read its text, not its AST."""
    if file not in _STEPS_TEXT:
        try:
            text = file.read_text(encoding="utf-8-sig", errors="replace")
        except OSError:
            text = ""
        _STEPS_TEXT[file] = file.name == "__init__.py" or "backward" in text or "step(" in text
    return _STEPS_TEXT[file]


def defining(file: Path, name: str, hops: int = 3) -> tuple[Path, str]:
    """Where `name` (`f` or `Cls.meth`) is defined: `file`, or the module a package's `__init__.py`
    re-exports it from (`from .a2c_acktr import A2C_ACKTR`)."""
    mi = load_module(file, file.stat().st_mtime)
    if hops and mi is not None and find_def(mi.tree, name) is None:
        head, dot, meth = name.partition(".")
        again = Project.of(mi).names.get(head)
        if again is not None and again[0] != file:
            return defining(again[0], again[1] + dot + meth, hops - 1)
        cls = next((k for k in mi.tree.body if isinstance(k, ast.ClassDef) and k.name == head), None)
        for base in cls.bases if cls is not None and meth else []:  # DeepCAD's `TrainerAE(BaseTrainer)`, whose
            again = Project.of(mi).names.get(dotted(base))  # `train_func` is its base's, in trainer/base.py
            if again is not None and again[0] != file:
                return defining(again[0], f"{again[1]}.{meth}", hops - 1)
    return file, name


def load_module(file: Path, mtime: float) -> ModuleInfo | None:
    """One analysis per helper file (its hot sets are put back after each name's effects)."""
    key = (str(file), mtime)
    if key not in _MODULES:
        try:
            source = file.read_text(encoding="utf-8-sig")
            _MODULES[key] = ModuleInfo(*parse_source(source, str(file)), str(file))
        except (OSError, SyntaxError, ValueError):
            _MODULES[key] = None
    return _MODULES[key]


def _remote_def(mi: ModuleInfo, call: ast.Call) -> tuple[ModuleInfo, ast.AST, str] | None:
    """The other project module, definition and name the call runs (followed through re-exports)."""
    target = Project.of(mi).callee(call) if mi.path and not mi.path.startswith("<") else None
    if target is None:
        return None
    file, name = defining(*target)
    helper = load_module(file, file.stat().st_mtime)
    fn = find_def(helper.tree, name) if helper is not None else None
    return (helper, fn, name) if fn is not None and helper is not None and helper is not mi else None


def remote_return_kind(mi: ModuleInfo, call: ast.Call) -> str | None:
    """`loss = trainer.train_step(batch)` whose project helper returns `loss.item()` (every return a
    number): the result is Python data, not a tensor, whatever its name says; DrQ-v2's `utils.to_torch(batch,
    device)` returning `tuple(torch.as_tensor(x, device=device) for x in xs)`: tensors."""
    if (found := _remote_def(mi, call)) is None:
        return None
    helper, fn, _ = found
    kind = helper.return_kind(fn)
    if kind == "scalar" and getattr(fn, "name", "") == "forward":  # (a `__call__` may well return a number: a meter)
        return None  # a module's output (`seq_logit *= self.d_model ** -0.5` only looks like arithmetic on numbers)
    return kind if kind == "scalar" or kind == "tensor" and _makes_tensors(fn) else None


def remote_positions(mi: ModuleInfo, call: ast.Call) -> list[str | None]:
    """`loss_id, sim_improvement, logs = self.id_loss(y_hat, y, x)` whose project helper (a function, or a class's
    `forward`) returns a tuple: the positions every return fills with a Python number ("scalar"), else None."""
    if (found := _remote_def(mi, call)) is None:
        return []
    helper, fn, name = found
    if isinstance(fn, ast.ClassDef):
        fn = find_def(helper.tree, f"{name}.forward") or find_def(helper.tree, f"{name}.__call__")
    if fn is None:
        return []
    rets = [r.value for r in walk_local(fn) if isinstance(r, ast.Return) and r.value is not None]
    if not rets or not all(isinstance(r, ast.Tuple) and len(r.elts) == len(rets[0].elts) for r in rets):  # type: ignore[attr-defined]
        return []
    info = helper.info_of(fn)  # type: ignore[union-attr]
    return ["scalar" if all(helper.kind(r.elts[i], info) == "scalar" for r in rets) else None  # type: ignore[union-attr,attr-defined]
            for i in range(len(rets[0].elts))]  # type: ignore[attr-defined]  # fmt: skip


def _makes_tensors(fn: ast.AST) -> bool:
    """Every return builds tensors with torch itself (`torch.as_tensor(x, device=d)`, or a tuple of them): not a
    trainer's `get_num_updates()` whose attribute only looks like one."""
    rets = [r.value for r in walk_local(fn) if isinstance(r, ast.Return) and r.value is not None]
    made = [
        x.elt if isinstance(x, (ast.GeneratorExp, ast.ListComp)) else x
        for r in rets
        for x in (r.args[:1] if isinstance(r, ast.Call) and call_name(r) in ("tuple", "list") else [r])
    ]
    return bool(made) and all(isinstance(x, ast.Call) and call_name(x).startswith("torch.") for x in made)


def instance_target(project: Project, c: ast.Call, target: tuple[Path, str]) -> tuple[Path, str]:
    """`save_best_model(model, mAP, epoch, out_dir)` with `save_best_model = SaveBestModel()`: the call runs the
    class's `__call__` (its parameters name the file), not its `__init__`; `SaveBestModel(...)` itself runs only
    the `__init__`."""
    if "." in target[1]:
        return target
    if call_name(c) not in project._instances():
        # `EarlyStopping(patience=...)` builds the object: what runs is its `__init__`, not the `__call__` that
        # saves (Time-LLM; the save is reported where the instance is called)
        if project._class_of(c) is None:
            return target
        file, name = defining(*target)
        return file, f"{name}.__init__"
    file, name = defining(*target)
    helper = load_module(file, file.stat().st_mtime)
    return (file, f"{name}.__call__") if helper is not None and find_def(helper.tree, f"{name}.__call__") else target
