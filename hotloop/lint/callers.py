"""Steps across the files of one lint run. A function that another linted file calls every step (XLM's
`train.py` calling `trainer.mlm_step(...)` in its loop, FixMatch's `forward_backward` reached from its base
trainer) is hot in its own file too, so its reads are reported once, where they are written; the caller's
cross-file pass leaves them to it. A script linted alone still gets each helper's reads at its call site.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hotloop.lint.analysis import ModuleInfo, dotted
from hotloop.lint.classes import CUDA
from hotloop.lint.imports import Project, defining, find_def, not_a_step, remote_steps
from hotloop.lint.structure import FORWARD_CALL
from hotloop.lint.syntax import parse_source

HOT_CALLED: dict[str, set[str]] = {}  # resolved file -> the names the run's other files call every step
ANALYSED: dict[str, ModuleInfo | None] = {}  # resolved file -> its analysis, made once per run (lint reuses it)
LINTED: set[str] = set()  # the files of this lint run (resolved): what their own lint reports is not repeated
LOOPS = re.compile(r"^\s*(for|while)\s|^class ", re.M)  # loops, or classes that may inherit them


@contextmanager
def linting(files: list[Path]) -> Iterator[None]:
    """Within: `files` are one lint run, so a helper's read that its own file's lint reports is not repeated
    at the call sites of the other files (linted alone, a script gets every read of its helpers), and what
    the files call of each other every step is hot in its own file."""
    LINTED.update(str(f.resolve()) for f in files)
    try:
        if len(files) > 1:
            collect([mi for f in files if (mi := _analysed(f)) is not None], LINTED)
        yield
    finally:
        LINTED.clear()
        HOT_CALLED.clear()
        ANALYSED.clear()


def analysed(path: str, source: str) -> ModuleInfo | None:
    """This run's analysis of `path`, if it was made from the same source (not after `--fix` rewrote it)."""
    mi = ANALYSED.get(str(Path(path).resolve())) if ANALYSED and not path.startswith("<") else None
    return mi if mi is not None and mi.source == source else None


def _analysed(f: Path) -> ModuleInfo | None:
    key = str(f.resolve())
    if key not in ANALYSED:
        ANALYSED[key] = _analyse_file(f)
    return ANALYSED[key]


def _analyse_file(f: Path) -> ModuleInfo | None:
    """The file's own analysis, if it has loops (a driver script importing no torch, XLM's `train.py`, calls
    its trainer's steps in them)."""
    try:
        source = f.read_text(encoding="utf-8-sig")
        if not LOOPS.search(source):
            return None
        return parse(source, str(f))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def parse(source: str, path: str) -> ModuleInfo:
    """The module's analysis; raises SyntaxError/ValueError when it does not parse (its SyntaxWarnings, such as
    invalid escapes in old research code, are not the user's concern here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ModuleInfo(*parse_source(source, path), path)


def mark_remote(mi: ModuleInfo) -> bool:
    """Mark the loops that call a step (or epoch) function of another project file; whether any was."""
    marked = getattr(mi, "remote_marked", False)  # (the run's first pass may have marked them already)
    for epochs in (False, True):
        if steps := remote_steps(mi, epochs):
            mi.mark_steps(steps, epochs)
            marked = True
    mi.remote_marked = marked  # type: ignore[attr-defined]
    return marked


def collect(analysed: list[ModuleInfo], linted: set[str]) -> None:
    """Record, for the run's files, the functions the other files call from their hot regions."""
    HOT_CALLED.clear()
    for mi in analysed:
        project = Project.of(mi)
        if not (project.names or project.modules):
            continue
        mark_remote(mi)
        _inherited(mi, linted)
        for c in mi.nodes:
            if not isinstance(c, ast.Call) or not mi.in_hot(c) or (target := project.callee(c)) is None:
                continue
            file, name = defining(*target)
            here = str(file.resolve())
            if here in linted and here != str(Path(mi.path).resolve()) and not not_a_step(name):
                HOT_CALLED.setdefault(here, set()).add(name)
    _forwards(analysed)


def _forwards(analysed: list[ModuleInfo]) -> None:
    """A network run every step by a file of the run whose class it cannot name (CSDI's `train(model, ...)`
    calling `model(train_batch)`, the model a parameter): every `nn.Module` subclass's `forward` in the run's
    other files is the step's too, and what it calls (`self.get_side_info(...)`) is hot in its own file."""
    callers = {
        str(Path(mi.path).resolve())
        for mi in analysed
        if any(
            isinstance(c, ast.Call)
            and FORWARD_CALL.search(dotted(c.func).split(".")[-1])
            and mi.in_hot(c)
            and Project.of(mi).callee(c) is None
            for c in mi.nodes
        )  # fmt: skip
    }
    for mi in analysed:
        here = str(Path(mi.path).resolve())
        if not callers - {here}:
            continue
        modules: set[str] = set()  # `nn.Module` subclasses, and subclasses of those (`CSDI_Forecasting(CSDI_base)`)
        for cls in (n for n in mi.tree.body if isinstance(n, ast.ClassDef)):
            if any(dotted(b).rpartition(".")[2] == "Module" or dotted(b) in modules for b in cls.bases):
                modules.add(cls.name)
                if any(isinstance(f, ast.FunctionDef) and f.name == "forward" for f in cls.body):
                    HOT_CALLED.setdefault(here, set()).add(f"{cls.name}.forward")


def _base_of(mi: ModuleInfo, cls: ast.ClassDef) -> tuple[Path, str] | None:
    """The project class `cls` derives from, in another file: `class FixMatch(TrainerXU)` imported from
    `dassl.engine`, or `trainer.Trainer`."""
    project = Project.of(mi)
    for b in cls.bases:
        name = b.id if isinstance(b, ast.Name) else ""
        if name in project.names:
            return defining(*project.names[name])
        if isinstance(b, ast.Attribute) and isinstance(b.value, ast.Name) and b.value.id in project.modules:
            return defining(project.modules[b.value.id], b.attr)
    return None


def _inherited(mi: ModuleInfo, linted: set[str]) -> None:
    """A subclass's override of a method its base class (another file) calls every step, `forward_backward`
    under Dassl's `run_epoch` loop, is hot in the subclass's file; a base method the subclass's hot code calls
    (`self.parse_batch_train(batch)`) is hot in the base's file."""
    here = str(Path(mi.path).resolve())
    for cls in (n for n in mi.tree.body if isinstance(n, ast.ClassDef)):
        found = _base_of(mi, cls)
        if found is None or str(found[0].resolve()) == here or (base := _analysed(found[0])) is None:
            continue
        called: set[str] = set()
        for ancestor in _ancestors(found, base):  # BBDM: `BBDMRunner(DiffusionBaseRunner)`, the loop in BaseRunner
            mark_remote(ancestor)
            called |= {c.func.attr for c in ancestor.nodes if isinstance(c, ast.Call)
                       and isinstance(c.func, ast.Attribute) and dotted(c.func.value) == "self"
                       and ancestor.in_hot(c)}  # fmt: skip
        own = {f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for m in sorted(own & called):
            HOT_CALLED.setdefault(here, set()).add(f"{cls.name}.{m}")
        theirs = str(found[0].resolve())
        if theirs in linted:  # (the overrides just found run every step too, though `mi` does not know yet)
            overrides = {f for f in cls.body if getattr(f, "name", "") in own & called}
            uses = {c.func.attr for c in mi.nodes if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                    and dotted(c.func.value) == "self" and c.func.attr not in own
                    and (mi.in_hot(c) or mi.enclosing_function(c) in overrides)}  # fmt: skip
            for m in sorted(uses):
                if find_def(base.tree, f"{found[1]}.{m}") is not None:
                    HOT_CALLED.setdefault(theirs, set()).add(f"{found[1]}.{m}")


def _ancestors(found: tuple[Path, str], base: ModuleInfo, depth: int = 3) -> Iterator[ModuleInfo]:
    """The analyses of the files holding a class's project ancestors, nearest first (three at most)."""
    seen: set[tuple[str, str]] = set()
    while depth and (str(found[0]), found[1]) not in seen:
        seen.add((str(found[0]), found[1]))
        yield base
        cls = next((n for n in base.tree.body if isinstance(n, ast.ClassDef) and n.name == found[1]), None)
        up = _base_of(base, cls) if cls is not None else None
        if up is None or (nxt := _analysed(up[0])) is None:
            return
        found, base, depth = up, nxt, depth - 1


def called_hot(file: Path, name: str) -> bool:
    """`name` of `file` is made hot in its own lint by a caller in this run."""
    return name in HOT_CALLED.get(str(file.resolve()), ())


def mark_called(mi: ModuleInfo) -> None:
    """Make hot, in `mi`'s own analysis, what the run's other files call every step."""
    names = HOT_CALLED.get(str(Path(mi.path).resolve()), ()) if mi.path and not mi.path.startswith("<") else ()
    fns = [fn for n in sorted(names) if (fn := find_def(mi.tree, n)) is not None]
    if fns:
        mi.device_code = True  # its callers move data to the device for it
        mi.propagate(*fns)
    if not mi.device_code and (mi.hot_loops or mi.hot_functions):
        mi.device_code = imports_on_device(mi)


def imports_on_device(mi: ModuleInfo) -> bool:
    """A project module this one imports moves tensors to a GPU (spotlight's `factorization/implicit.py` and its
    `torch_utils.gpu`): its loops run on the device, although no root marker (README, setup.py) above it says
    where the project starts, so `classes.project_on_device` could not scan the rest of it."""
    project = Project.of(mi)
    files = {*project.modules.values(), *(f for f, _ in project.names.values())}
    return any(CUDA.search(text) for f in sorted(files) if (text := _text(f)) is not None)


def _text(f: Path) -> str | None:
    try:
        return f.read_text(encoding="utf-8-sig", errors="replace")
    except OSError:
        return None
