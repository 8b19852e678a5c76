"""Effects across files: what a helper of the script's own project does when the hot loop calls it.

`hotloop lint train.py` resolves the script's imports of its own project (`from src.utils.logging import
grad_logger`, `from utils.loss import ComputeLoss`, `import utils.misc as misc`) to files beside it: the
module is looked for from the script's folder upwards (at most four levels), like `python train.py` or
`python -m` from the repository root would find it. When a hot region calls such a function, or an
instance of such a class (its `__call__` or `forward`), the helper's module is analysed again with that
function made hot, and each host read (or device synchronisation) that only this makes hot is reported at
the call site, naming the file and line inside. Without the project on disk (a lone file) nothing changes.
One level deep: the helper's own imports are not followed.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hotloop.lint.analysis import ModuleInfo, assigned_values, call_name, constructed, dotted, target_names, walk_local
from hotloop.lint.syntax import method_of

# Reads that need no kind guess about the helper's attributes: explicit reads, copies to the host,
# data-dependent sizes and synchronisations. Branches (HL005), formatting (HL002) and list indexes (HL024) in
# another file's model code were mostly configuration attributes and inference paths when scored.
EFFECT_CODES = {"HL001", "HL006", "HL007", "HL012", "HL020", "HL022", "HL023"}
MOVER = re.compile(r"device|move|cuda|transfer|prefetch", re.I)  # HL012 only from a helper that moves batches
NOT_A_SAVE = re.compile(r"export", re.I)  # `model_export(model, "model.bin")`: an artefact, not the run's checkpoint
# Methods whose reads are their job, not a training step's overhead: decoding checks for an end token, an
# evaluation pass reads its results, an agent choosing an action reads it for the environment (judged false
# every time in the labelled set).
NOT_A_STEP = re.compile(r"generat|predict|infer|evaluat|eval$|test|valid|decode|render|^act$|action", re.I)
ACTS = re.compile(r"^act$|action", re.I)  # run every environment step: a copy of host-made data in one counts
LEVELS_UP = 4
_EFFECTS: dict[tuple[str, float, str, bool], list[tuple[str, int, str, bool, bool]]] = {}  # (file, mtime, name, cuda)
_MODULES: dict[tuple[str, float], ModuleInfo | None] = {}
_RESOLVED: dict[tuple[Path, str, int], Path | None] = {}
_LOADERS: dict[tuple[str, float, str], tuple[ModuleInfo, ast.AST, list[ast.Call]] | None] = {}


def _find(tree: ast.Module, name: str, methods: tuple[str, ...] = ("__call__", "forward")) -> ast.AST | None:
    """A top-level function, or the first of `methods` of the class `name`: what a call of an instance runs
    (`__call__`, `forward`), or what builds its loaders (`__init__`); `Cls.meth`: that method of `Cls`."""
    if "." in name:
        cls, meth = name.split(".", 1)
        return _find(tree, cls, (meth,))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
        if isinstance(node, ast.ClassDef) and node.name == name:
            return method_of(node, methods, classes)
    return None


class Project:
    """The files of the linted script's project, as its imports name them."""

    def __init__(self, mi: ModuleInfo) -> None:
        self.mi = mi
        self.file = Path(mi.path).resolve() if mi.path and not mi.path.startswith("<") else None
        self.names: dict[str, tuple[Path, str]] = {}  # local name -> (file, function or class in it)
        self.modules: dict[str, Path] = {}  # local name -> module file
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
        rel = Path(*module.split(".")) if module else Path()
        for root in roots:
            for f in (
                (root / rel.parent / f"{rel.name}.py", root / rel / "__init__.py")
                if module
                else (root / "__init__.py",)
            ):
                if f.is_file():
                    return f
        return None

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
                        self.names[local] = (f, a.name)
            elif isinstance(n, ast.Import):
                for a in n.names:  # `import utils`, `import utils.misc as misc` (not `import a.b`: `a.b.f()`)
                    if (a.asname or "." not in a.name) and (f := self._resolve(a.name, 0)) is not None:
                        self.modules[a.asname or a.name] = f

    def _star(self, n: ast.ImportFrom) -> None:
        """`from utils import *` (older research code): every top-level function and class of the module."""
        f = self._resolve(n.module or "", n.level)
        mi = _module(f, f.stat().st_mtime) if f is not None else None
        for d in mi.tree.body if mi is not None else []:
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not d.name.startswith("_"):
                self.names.setdefault(d.name, (f, d.name))  # type: ignore[arg-type]

    def callee(self, c: ast.Call) -> tuple[Path, str] | None:
        """What another file of the project runs for this call: `f(...)`, `mod.f(...)`, or `obj(...)` for an
        `obj = Imported(...)` of this file."""
        name = call_name(c)
        if not name:  # `x[k].mul_(...)`, `(a - b)(...)`: no name to resolve
            return None
        head, _, rest = name.partition(".")
        if not rest and head in self.names:
            return self.names[head]
        if rest and "." not in rest and head in self.modules:
            return self.modules[head], rest
        instances = self._instances()
        obj, _, meth = name.rpartition(".")
        if obj in instances and not meth.startswith("_"):  # `policy.train(buffer)` with `policy = TD3.TD3(...)`
            return instances[obj][0], f"{instances[obj][1]}.{meth}"
        return instances.get(name)

    def _instances(self) -> dict[str, tuple[Path, str]]:
        """`compute_loss = ComputeLossOTA(model)` (or `self.crit = losses.Focal()`): the name runs the class."""
        if not hasattr(self, "_inst"):
            self._inst: dict[str, tuple[Path, str]] = constructed(self.mi.nodes, self._class_of)
        return self._inst

    def _class_of(self, c: ast.Call) -> tuple[Path, str] | None:
        """The project class a call constructs (`ComputeLoss(...)`, `losses.Focal()`), not a function's result."""
        name = call_name(c)
        h, _, r = name.partition(".")
        target = self.names.get(name)
        if target is None and r and h in self.modules:  # `losses.Focal()`
            target = self.modules[h], r
        return target if target is not None and target[1][:1].isupper() else None


def _not_a_step(name: str) -> bool:
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
        if not isinstance(c, ast.Call) or not (epochs or isinstance(c.func, ast.Attribute)) or mi.in_hot(c):
            continue
        loop = mi.enclosing_loop(c)
        if loop in mi.hot_loops or loop is None and (epochs or mi.enclosing_function(c) is mi.tree):
            continue  # (outside a loop, in a function: `run_step()` delegating its optimizer step to a helper)
        target = Project.of(mi).callee(c)
        if target is None or _not_a_step(target[1]):
            continue
        file, name = _defining(*target)
        helper = _module(file, file.stat().st_mtime)
        if helper is None:
            continue
        if epochs:
            fn = _find(helper.tree, name)
            if fn is not None and any(helper.enclosing_function(loop) is fn for loop in helper.hot_loops):
                out.append(c)
        elif name.rpartition(".")[2] in helper.step_functions:
            out.append(c)
    return out


def _defining(file: Path, name: str, hops: int = 3) -> tuple[Path, str]:
    """Where `name` (`f` or `Cls.meth`) is defined: `file`, or the module a package's `__init__.py`
    re-exports it from (`from .a2c_acktr import A2C_ACKTR`)."""
    mi = _module(file, file.stat().st_mtime)
    if hops and mi is not None and _find(mi.tree, name) is None:
        head, dot, meth = name.partition(".")
        again = Project.of(mi).names.get(head)
        if again is not None and again[0] != file:
            return _defining(again[0], again[1] + dot + meth, hops - 1)
    return file, name


def _module(file: Path, mtime: float) -> ModuleInfo | None:
    """One analysis per helper file (its hot sets are put back after each name's effects)."""
    key = (str(file), mtime)
    if key not in _MODULES:
        try:
            source = file.read_text(encoding="utf-8-sig")
            _MODULES[key] = ModuleInfo(ast.parse(source), source, str(file))
        except (OSError, SyntaxError, ValueError):
            _MODULES[key] = None
    return _MODULES[key]


def _inside(mi: ModuleInfo, node: ast.AST, fns: set[ast.AST]) -> bool:
    n = mi.parent.get(node)
    while n is not None and n not in fns:
        n = mi.parent.get(n)
    return n is not None


def _if_tests(mi: ModuleInfo, node: ast.AST) -> Iterator[ast.expr]:
    """The tests of the `if` statements `node` sits under."""
    child, n = node, mi.parent.get(node)
    while n is not None and not isinstance(n, ast.Module):
        if isinstance(n, ast.If) and child is not n.test:
            yield n.test
        child, n = n, mi.parent.get(n)


def _tensor_test(test: ast.expr) -> bool:
    """`isinstance(v, torch.Tensor)`, `torch.is_tensor(v)`, `hasattr(v, "item")`."""
    if not isinstance(test, ast.Call):
        return False
    name, args = call_name(test), test.args
    if name.endswith("is_tensor") or name == "isinstance" and len(args) == 2 and "Tensor" in dotted(args[1]):
        return True
    return name == "hasattr" and len(args) == 2 and isinstance(args[1], ast.Constant) and args[1].value == "item"


def _if_tensor(mi: ModuleInfo, node: ast.AST) -> bool:
    """Under `if isinstance(v, torch.Tensor):`: a read that only happens when the caller passes a tensor (a
    metric logger's `update(loss=loss_value)` given a float reads nothing)."""
    return any(_tensor_test(t) for t in _if_tests(mi, node))


def _switched(mi: ModuleInfo, node: ast.AST) -> bool:
    """Under `if self.autobalance:` / `if not self.flag:`: an option of the helper whose value is set
    elsewhere (often off by default): not known to run every step."""
    tests = (t.operand if isinstance(t, ast.UnaryOp) else t for t in _if_tests(mi, node))
    return any(isinstance(t, ast.Attribute) and dotted(t).startswith("self.") for t in tests)


def _once(mi: ModuleInfo, node: ast.AST) -> bool:
    """Under `if key not in cache:` / `if self.buf is None:`: built on the first call and kept (HiFi-GAN's
    `mel_basis`), not every step."""
    return any(isinstance(t, ast.Compare) and any(isinstance(o, (ast.NotIn, ast.Is)) for o in t.ops)
               for t in _if_tests(mi, node))  # fmt: skip


def _assigned_to(mi: ModuleInfo, node: ast.AST) -> set[str]:
    """The names `node`'s value is assigned to (`x_reduce = torch.tensor(x).cuda()`)."""
    parent = mi.parent.get(node)
    return {x for t in parent.targets for x in target_names(t)} if isinstance(parent, ast.Assign) else set()


def _base(e: ast.AST) -> str:
    """The name a chain of methods, attributes and indexes starts from: `x_reduce` of `x_reduce.sum().item()`
    (not `state` of `self.actor(state).cpu()`: that reads the actor's output)."""
    while isinstance(e, (ast.Call, ast.Attribute, ast.Subscript)):
        e = e.func if isinstance(e, ast.Call) else e.value
    return e.id if isinstance(e, ast.Name) else ""


def _empty(c: ast.AST) -> bool:
    """`torch.empty(0).to(x.device)`: nothing to copy."""
    recv = c.func.value if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) else None
    return isinstance(recv, ast.Call) and recv.args[:1] != [] and ast.unparse(recv.args[0]) in ("0", "(0,)")


@contextmanager
def _called(file: Path, name: str, every_step: bool, device_code: bool = False) -> Iterator[tuple[ModuleInfo, list]]:
    """The helper `name` of `file` (followed through re-exports) as a call from the linted script makes it:
    hot (`every_step`) or training code, with what it reaches in its own file. Yields the module and the rule
    hits inside what the call made so (its own rules only: one level deep); empty when there is no such
    function or no PyTorch in the file. The module's own state comes back afterwards."""
    from hotloop.lint.checks import TORCH_CODE, Checker

    file, name = _defining(file, name)
    mi = _module(file, file.stat().st_mtime)
    fn = _find(mi.tree, name) if mi is not None and TORCH_CODE.search(mi.source) else None
    if mi is None or fn is None:
        yield mi, []  # type: ignore[misc]
        return
    saved = (mi.device_code, set(mi.hot_functions), set(mi.train_functions))
    mi.device_code = mi.device_code or device_code  # the caller moves data to the device: so does this
    if every_step:
        mi.propagate(fn)
    else:
        mi.train_functions.add(fn)
        mi.propagate()
    made = mi.hot_functions - saved[1] if every_step else mi.train_functions - saved[2]
    try:
        yield mi, [h for h in Checker(mi).run() if _inside(mi, h.node, made)]
    finally:
        mi.device_code, mi.hot_functions, mi.train_functions = saved  # the next name starts from the file as is


def effects(file: Path, name: str, device_code: bool) -> list[tuple[str, int, str, bool, bool]]:
    """(code, line, message, only if given a tensor, copies host-made data) of each read that calling `name`
    every step adds inside `file`."""
    from hotloop.lint.checks import Checker

    key = (str(file), file.stat().st_mtime, name, device_code)
    if key not in _EFFECTS:
        with _called(file, name, every_step=True, device_code=device_code) as (mi, hits):
            kept = [h for h in hits if h.code in EFFECT_CODES and "noqa" not in mi.lines[h.node.lineno - 1]
                    and not _switched(mi, h.node) and not _once(mi, h.node) and not _empty(h.node)]  # fmt: skip
            checker = Checker(mi)
            made = {id(h): h.code == "HL012" and isinstance(h.node, ast.Call) and checker.host_built(h.node)
                    for h in kept}  # fmt: skip
            # A helper that reads back what it copied (`r = torch.tensor(x).cuda()`, all_reduce, `r.item()`)
            # waits for the device anyway: its read is the finding, not the copy.
            read = {_base(h.node) for h in kept if h.code in ("HL001", "HL007")}
            _EFFECTS[key] = [(h.code, h.node.lineno, h.message, _if_tensor(mi, h.node), made[id(h)]) for h in kept
                             if not (made[id(h)] and _assigned_to(mi, h.node) & read)]  # fmt: skip
    return _EFFECTS[key]


def saves_in(file: Path, name: str) -> list[tuple[int, str]]:
    """(line, message) of each in-place `torch.save` (HL021) that calling `name` from a training loop makes:
    `utils.save_checkpoint(state, is_best)` writing `checkpoint.pth.tar`, `policy.save(path)`."""
    key = (str(file), file.stat().st_mtime, name, "saves")
    if key not in _EFFECTS:
        with _called(file, name, every_step=False) as (_, hits):
            _EFFECTS[key] = [("HL021", h.node.lineno, h.message, False, False) for h in hits if h.code == "HL021"]
    return [(line, message) for _, line, message, *_ in _EFFECTS[key]]


def _no_workers(loader: ast.Call, fn: ast.AST, call: ast.Call) -> bool:
    """`DataLoader(..., num_workers=num_workers)` in `def make(..., num_workers=0)`: the caller's argument (or
    the parameter's default) decides."""
    value = next((k.value for k in loader.keywords if k.arg == "num_workers"), None)
    if not isinstance(value, ast.Name) or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    names = [a.arg for a in fn.args.args]
    params = names[1:] if names[:1] == ["self"] else names
    defaults = dict(zip(names[len(names) - len(fn.args.defaults) :], fn.args.defaults, strict=True))
    given = next((k.value for k in call.keywords if k.arg == value.id), None)
    if given is None and value.id in params and params.index(value.id) < len(call.args):
        given = call.args[params.index(value.id)]
    if given is None:  # not passed (or passed through *args/**kwargs we cannot see): the default, if any
        given = defaults.get(value.id)
    return isinstance(given, ast.Constant) and given.value == 0


def loaders_built(file: Path, name: str, caller: object, call: ast.Call) -> list[tuple[int, list[str]]]:
    """(line, missing options) of each DataLoader with workers that `name` builds in `file`, judged with the
    caller's CUDA-ness and whether the caller re-iterates what the call returns."""
    from hotloop.lint.checks import Checker

    key = (str(file), file.stat().st_mtime, name)
    if key not in _LOADERS:  # most helpers build no loader: find that out once, from the text first
        try:
            text = file.read_text(encoding="utf-8-sig", errors="replace")
        except OSError:
            text = ""
        mi = _module(file, key[1]) if "DataLoader" in text else None
        fn = _find(mi.tree, name, ("__init__",)) if mi is not None else None
        calls = [d for d in ast.walk(fn) if isinstance(d, ast.Call)
                 and call_name(d).split(".")[-1] == "DataLoader"] if fn is not None else []  # fmt: skip
        _LOADERS[key] = (mi, fn, calls) if fn is not None and calls else None
    if _LOADERS[key] is None:
        return []
    mi, fn, calls = _LOADERS[key]  # type: ignore[misc]
    helper = Checker(mi)
    out = []
    for d in calls:
        if not _no_workers(d, fn, call):
            missing = helper.loader_missing(d, caller.mi.uses_cuda, lambda: caller._reiterated(call))  # type: ignore[attr-defined]
            if missing:
                out.append((d.lineno, missing))
    return out


def _varying_args(mi: ModuleInfo, c: ast.Call) -> bool:
    """An argument naming the epoch or step (`save(f"ckpt_{epoch}.pt")`, `save(epoch=epoch)`, a local
    `checkpoint_dir = f"step{step}"`): the helper may write a new file each time, which only the call shows."""
    fn = mi.enclosing_function(c)
    exprs: list[ast.expr] = [*c.args, *(k.value for k in c.keywords)]
    exprs = [a for a in exprs if not isinstance(a, ast.Dict)]  # `{"epoch": epoch + 1, ...}`: the state, not a path
    texts = [ast.unparse(a) for a in exprs if not isinstance(a, ast.Constant)]
    for _ in range(2):  # `backup = f"synthesizer_{k:06d}.pt"` with `k = step // 1000`: two assignments back
        names = {n.id for e in exprs for n in ast.walk(e) if isinstance(n, ast.Name)}
        exprs = [v for name in names for v in assigned_values(name, walk_local(fn))]
        texts += [ast.unparse(v) for v in exprs]
    return any(re.search(r"epoch(?!s)|step|iter", t, re.I) for t in texts)  # not `epochs`: a total


def _then_leaves(mi: ModuleInfo, c: ast.Call) -> bool:
    """`model.save(path); break` (or `return`): the final save on the way out of the loop, made once."""
    stmt: ast.AST | None = c
    while stmt is not None and not isinstance(stmt, ast.stmt):
        stmt = mi.parent.get(stmt)
    block = next((b for f in ("body", "orelse") if isinstance(b := getattr(mi.parent.get(stmt), f, None), list)
                  and stmt in b), None)  # fmt: skip
    after = block[block.index(stmt) + 1 :] if block is not None else []
    return bool(after) and isinstance(after[0], (ast.Break, ast.Return))


def _where(project: Project, file: Path) -> str:
    """The helper's path as the linted script sees it (`../src/utils/logging.py`)."""
    return os.path.relpath(file, project.file.parent) if project.file else str(file)


def loader_hits(mi: ModuleInfo, project: Project) -> list[tuple[str, ast.Call, str]]:
    """HL011 at each call of a project helper that builds a DataLoader lacking options this caller needs
    (`train_loader = build_loader(cfg)` iterated every epoch, a loader made in a class's `__init__`)."""
    from hotloop.lint.checks import Checker

    caller, out = None, []
    for c in mi.nodes:
        if not isinstance(c, ast.Call) or mi.in_hot(c) or (target := project.callee(c)) is None:
            continue
        if "." in target[1]:  # a method of an instance (`trainer.run()`): its loaders' lifetime is not seen here
            continue
        where = _where(project, target[0])
        caller = caller or Checker(mi)
        for line, missing in loaders_built(target[0], target[1], caller, c)[:1]:
            out.append(("HL011", c, f"`{call_name(c)}(...)` builds a `DataLoader` ({where}:{line}) with workers but "
                                    f"without {' and '.join(missing)}"))  # fmt: skip
    return out


def cross_file_hits(mi: ModuleInfo, seen: set[tuple[int, str]]) -> list[tuple[str, ast.Call, str]]:
    """(code, call, message) for each hot call whose helper in another file reads on the host."""
    project = Project.of(mi)
    if not (project.names or project.modules):
        return []
    out = [h for h in loader_hits(mi, project) if (h[1].lineno, h[0]) not in seen]
    for c in mi.nodes:  # in-place saves inside a project helper the training loop calls
        if (isinstance(c, ast.Call) and mi.in_training_loop(c) and (c.lineno, "HL021") not in seen
                and (target := project.callee(c)) is not None and not NOT_A_SAVE.search(target[1])):  # fmt: skip
            # An epoch or step in the call may name the file inside the helper, several names deep: no claim then.
            for line, message in saves_in(*target)[:1] if not (_varying_args(mi, c) or _then_leaves(mi, c)) else []:
                seen.add((c.lineno, "HL021"))
                where = _where(project, _defining(*target)[0])
                out.append(("HL021", c, f"`{call_name(c)}(...)` runs in the training loop, and in it ({where}:{line}): "
                                        f"{message}"))  # fmt: skip
    for c in mi.nodes:
        if not isinstance(c, ast.Call) or not mi.in_hot(c) or mi.has_sync_marker(c.lineno):
            continue
        target = project.callee(c)
        if target is None:
            continue
        file, name = target
        acts = _not_a_step(name)
        if acts and not ACTS.search(name.rpartition(".")[2]):
            continue
        where = _where(project, _defining(file, name)[0])
        given: bool | None = None  # whether the call passes a tensor, looked up once when it matters
        for code, line, message, if_tensor, host_made in effects(file, name, mi.device_code):
            if (c.lineno, code) in seen or code == "HL012" and not (MOVER.search(name) or host_made):
                continue
            if acts and not host_made:  # an agent's `select_action`: its reads are its job, its copies are not
                continue
            if if_tensor and code != "HL012":  # a mover's `isinstance` test walks a batch's containers instead
                if given is None:
                    info = mi.function_info(c)
                    args = [*c.args, *(k.value for k in c.keywords)]
                    given = any(mi.kind(a, info) == "tensor" for a in args)
                if not given:
                    continue
            seen.add((c.lineno, code))
            out.append((code, c, f"`{call_name(c)}(...)` runs every step, and in it ({where}:{line}): {message}"))
    return out
