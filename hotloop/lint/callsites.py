"""Parameters typed by their callers in other files of the project.

`def train_one_epoch(model, criterion, loader, optimizer, ...)` in DETR's `engine.py` calls `criterion(outputs,
targets)` every step, and only `main.py` says what `criterion` is: `model, criterion, post = build_model(args)`,
whose factory ends in `criterion = SetCriterion(...)`. `param_classes` reads the project's call sites of a
function (the files whose text calls it by name, resolved back to this very function), and for each parameter
the one project class every call site hands it: a constructor call (`MoCo(...)`, `Cls(...).cuda()`), a name the
caller bound to one (also through `model = DDP(model, ...)`, `torch.compile(model)` and the like, which run the
module they wrap), or a factory of the project whose `return` builds one. Two call sites that disagree, or one
the reading cannot follow, give no class: the cross-file pass then leaves the call alone, as before.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from hotloop.lint.analysis import ModuleInfo, call_name, dotted, target_names, walk_local
from hotloop.lint.classes import callers_of
from hotloop.lint.kinds import READS, TENSOR_METHODS
from hotloop.lint.syntax import RETURNS_SELF, passed_for

WRAPPERS = re.compile(r"(DistributedDataParallel|DataParallel|DDP|compile|FullyShardedDataParallel|FSDP|"
                      r"convert_sync_batchnorm|prepare|wrap\w*)$")  # fmt: skip  # they run the module they wrap
DEPTH = 6  # (each step goes to an earlier binding, a wrapped module or a factory's return)
MAX_CALLERS = 20  # caller files read per function (a name as common as `train` is called everywhere)
# methods of tensors and Python values: a parameter they are called on is not worth typing by its callers
NOT_OBJECT = TENSOR_METHODS | READS | {"append", "extend", "items", "keys", "values", "get", "pop", "size", "split"}
_TYPED: dict[tuple[str, str, int], dict[str, tuple[Path, str]]] = {}


def typed_receiver(mi: ModuleInfo, c: ast.Call, receiver: str) -> tuple[Path, str] | None:
    """The project class the callers in other files hand a parameter (`param_classes`), for a receiver of `c`
    that is the enclosing function's parameter, or `self.x` set from a parameter of a method of the enclosing
    class (`self.model = model` in `__init__`)."""
    found = _typed(mi, c, receiver)
    # (a class of this very file is the same-file pass's: reported at the call, its reads would be reported twice)
    return None if found is None or mi.path and found[0] == Path(mi.path).resolve() else found


def _typed(mi: ModuleInfo, c: ast.Call, receiver: str) -> tuple[Path, str] | None:
    fn = mi.enclosing_function(c)
    head, _, rest = receiver.partition(".")
    if not rest and isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if head in {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}:
            return param_classes(mi, fn).get(head)
        return None
    cls = mi.parent.get(fn)
    if head != "self" or "." in rest or not isinstance(cls, ast.ClassDef):
        return None
    memo = mi.__dict__.setdefault("_typed_self", {})  # (asked for every `self.x(...)` call: each class once)
    if (cls, receiver) not in memo:
        memo[(cls, receiver)] = _typed_attribute(mi, cls, receiver)
    return memo[(cls, receiver)]


def _typed_attribute(mi: ModuleInfo, cls: ast.ClassDef, receiver: str) -> tuple[Path, str] | None:
    for m in (m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))):
        params = {a.arg for a in [*m.args.args, *m.args.kwonlyargs]}
        for n in walk_local(m):
            if (isinstance(n, ast.Assign) and isinstance(n.value, ast.Name) and n.value.id in params
                    and any(dotted(t) == receiver for t in n.targets)):  # fmt: skip
                return param_classes(mi, m).get(n.value.id)
    return None


def param_classes(mi: ModuleInfo, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, tuple[Path, str]]:
    """Parameter -> (file, Class) that every call of `fn` in the project's other files passes for it."""
    from hotloop.lint.imports import Project, defining, load_module

    here = Path(mi.path).resolve() if mi.path and not mi.path.startswith("<") else None
    if here is None or not here.is_file():
        return {}
    key = (str(here), fn.name, fn.lineno)
    if key in _TYPED:
        return _TYPED[key]
    _TYPED[key] = {}  # (a cycle of callers proves nothing)
    cls = mi.parent.get(fn)
    owner = cls.name if isinstance(cls, ast.ClassDef) else ""
    # what the callers call: the function, a method by its name, or the class for its `__init__`
    called = owner if fn.name == "__init__" and owner else fn.name
    want = owner if called == owner else f"{owner}.{fn.name}" if owner else fn.name
    seen: dict[str, set[tuple[Path, str] | None]] = {}
    for f in callers_of(here, called)[:MAX_CALLERS]:
        other = load_module(f, f.stat().st_mtime)
        if other is None:
            continue
        project = Project.of(other)
        for c in other.nodes:
            if not (isinstance(c, ast.Call) and call_name(c).rpartition(".")[2] == called):
                continue
            target = project.callee(c)
            if target is None or defining(*target)[0].resolve() != here or defining(*target)[1] != want:
                continue
            as_called = c
            if called == owner:  # `Cls(a, b)` fills `__init__(self, a, b)`: count its arguments as a method call's
                as_called = ast.Call(func=ast.Attribute(value=ast.Name("_"), attr="__init__"), args=c.args,
                                     keywords=c.keywords)  # fmt: skip
            for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
                if a.arg in ("self", "cls"):
                    continue
                given = passed_for(fn, as_called, a.arg)
                if given is not None:
                    seen.setdefault(a.arg, set()).add(class_made(other, project, given, c))
    _forwarded(mi, fn, seen)
    _TYPED[key] = {p: next(iter(k)) for p, k in seen.items() if len(k) == 1 and None not in k}  # type: ignore[misc]
    return _TYPED[key]


def _forwarded(mi: ModuleInfo, fn: ast.FunctionDef | ast.AsyncFunctionDef, seen: dict[str, set[Any]]) -> None:
    """Same-file calls that hand `fn` a parameter of their own function (DrQ's `update(self, replay_buffer,
    logger, step)` calling `self.update_critic(obs, ..., logger, step)`): that parameter's class, as the
    callers of the calling function in other files give it (`agent.update(buffer, self.logger, step)` in
    `train.py`, with `self.logger = Logger(...)`)."""
    for c in mi.calls_to.get(fn.name, []):
        caller = mi.enclosing_function(c)
        args = getattr(caller, "args", None)
        if args is None or caller is fn:
            continue
        own = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
            given = passed_for(fn, c, a.arg) if a.arg not in ("self", "cls") else None
            if isinstance(given, ast.Name) and given.id in own:
                seen.setdefault(a.arg, set()).add(param_classes(mi, caller).get(given.id))  # type: ignore[arg-type]


def class_made(mi: ModuleInfo, project: Any, e: ast.expr, at: ast.AST, depth: int = 0) -> tuple[Path, str] | None:
    """The project class `e` (an argument at `at`, in `mi`) is an instance of, when the module says so."""
    if depth > DEPTH:
        return None
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in RETURNS_SELF:
        e = e.func.value  # `Net(...).cuda()`, `model.to(device)`: the module itself
    if isinstance(e, ast.Call):
        if WRAPPERS.search(call_name(e)) and e.args:
            return class_made(mi, project, e.args[0], at, depth + 1)  # `DDP(model, device_ids=[gpu])`
        if (made := project._class_of(e)) is not None:
            return made  # type: ignore[no-any-return]
        if isinstance(e.func, ast.Name) and any(isinstance(d, ast.ClassDef) and d.name == e.func.id
                                                for d in mi.tree.body):  # fmt: skip
            return Path(mi.path).resolve(), e.func.id  # a class of the factory's own module
        return _factory_class(project, e, depth)
    if (inst := project._instances().get(dotted(e))) is not None:
        return inst  # type: ignore[no-any-return]  # (also `self.model`, set to `GDN(...)` in `__init__`)
    if not isinstance(e, ast.Name):
        return None
    # the assignment that reaches `at`: the last one above it (`model = Net()`, then `model = DDP(model)`)
    binds = [n for n in walk_local(mi.enclosing_function(at)) if isinstance(n, ast.Assign) and n.lineno < at.lineno
             and any(e.id in target_names(t) for t in n.targets)]  # fmt: skip
    if not binds:
        return None
    n = max(binds, key=lambda b: b.lineno)
    t = next(t for t in n.targets if e.id in target_names(t))
    if isinstance(t, ast.Name):
        return class_made(mi, project, n.value, n, depth + 1)
    names = [getattr(x, "id", "") for x in t.elts] if isinstance(t, ast.Tuple) else []
    if e.id not in names:
        return None
    i = names.index(e.id)  # `model, criterion, post = build_model(args)`
    if isinstance(n.value, ast.Tuple) and len(n.value.elts) == len(names):
        return class_made(mi, project, n.value.elts[i], n, depth + 1)
    return _factory_class(project, n.value, depth, i) if isinstance(n.value, ast.Call) else None


def _factory_class(project: Any, c: ast.Call, depth: int, item: int | None = None) -> tuple[Path, str] | None:
    """`build_criterion(args)` of the project returning `SetCriterion(...)` (or a name it bound to one); with
    `item`, that element of the tuple it returns (`return model, criterion, postprocessors`)."""
    from hotloop.lint.imports import Project, defining, find_def, load_module

    target = project.callee(c)
    if target is None or "." in target[1] or target[1][:1].isupper():
        return None
    file, name = defining(*target)
    mi = load_module(file, file.stat().st_mtime)
    fn = find_def(mi.tree, name) if mi is not None else None
    if mi is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    there = Project.of(mi)
    found = set()
    for r in (r.value for r in walk_local(fn) if isinstance(r, ast.Return) and r.value is not None):
        if item is not None:
            r = r.elts[item] if isinstance(r, ast.Tuple) and item < len(r.elts) else None  # type: ignore[assignment]
        elif isinstance(r, ast.Tuple):
            r = None  # type: ignore[assignment]
        found.add(class_made(mi, there, r, r, depth + 1) if r is not None else None)
    return found.pop() if len(found) == 1 else None
