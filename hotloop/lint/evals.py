"""HL018 across files: the script calls another project file's evaluation function (`evaluate(model, data)`),
which runs the model in a loop without turning gradients off, and the call site does not either.

Its own file's lint judges the function with its same-file callers only (`structure.evaluation`), so a
helper module never linted beside the script (SASRec's `utils.evaluate`) was never judged at all. A run
that lints the helper's file too reports it there instead (`effects.LINTED`).
"""

from __future__ import annotations

import ast
import re

from hotloop.lint.analysis import ModuleInfo, call_name, walk_local
from hotloop.lint.effects import LINTED, relative
from hotloop.lint.imports import Project, defining, find_def, load_module
from hotloop.lint.structure import FORWARD_CALL, GRAD_OFF, grad_off_at

EVAL_CALL = re.compile(r"^(val|valid|validate|validation|eval|evaluate|evaluation|test)(_|$)", re.I)


def eval_hits(mi: ModuleInfo) -> list[tuple[str, ast.Call, str]]:
    """HL018 at a call of another file's evaluation function (`evaluate(model, dataset, args)`) that loops over
    the model's forward passes without turning gradients off, when the call site does not either. (In its own
    file's lint the function is judged with its same-file callers; a run linting both files reports it there.)"""
    out: list[tuple[str, ast.Call, str]] = []
    project = Project.of(mi)
    if not (project.names or project.modules):
        return out
    for c in mi.nodes:
        if not isinstance(c, ast.Call) or not EVAL_CALL.match(call_name(c).rpartition(".")[2]):
            continue
        if (target := project.callee(c)) is None or grad_off_at(mi, c):
            continue
        file, name = defining(*target)
        helper = load_module(file, file.stat().st_mtime)
        fn = find_def(helper.tree, name, ()) if helper is not None else None
        if helper is None or fn is None or str(file.resolve()) in LINTED:
            continue
        body = list(walk_local(fn))
        source = ast.unparse(fn) + "".join(ast.unparse(f) for n in body if isinstance(n, ast.Call)
                                           for f in helper.targets_of(n))  # fmt: skip
        loops = [n for n in body if isinstance(n, (ast.For, ast.While))]
        calls = [n for loop in loops for n in walk_local(loop) if isinstance(n, ast.Call)]
        forwards = [n for n in calls if FORWARD_CALL.search(call_name(n).rpartition(".")[2] or "-")]
        forward = min(forwards, key=lambda n: n.lineno, default=None)
        if forward is None or GRAD_OFF.search(source):
            continue
        out.append(("HL018", c, f"`{call_name(c)}(...)` evaluates without `torch.no_grad()` "
                                f"({relative(project, file)}:{forward.lineno} `{call_name(forward)}(...)`): "
                                "every forward keeps its activations"))  # fmt: skip
    return out
