"""HL019 for running totals: `loss += batch_loss` in the step loop, after `batch_loss.backward()`, with `loss = 0.`
set outside every hot loop (NGCF, SR-GNN, DiffPool). The total is a tensor that references each step's autograd
graph, so every graph of the epoch stays alive until the total is dropped: memory grows with the step count. The
fix is to add a number (`batch_loss.item()`, read at a log boundary) or a detached tensor.

Only a name the loop calls `.backward()` on (or a loss term unpacked beside one) counts, and only while it still holds
that tensor: a last assignment that detaches it (`loss_batch = loss_batch.detach().cpu()`, facenet-pytorch) or makes
it a number (`loss = loss.item()`, dc-tts) keeps no graph. A total reset inside a hot loop around the addition
(Multimodal-Transformer's per-chunk sum, zeroed every batch) lives for one step only and is not reported. A smoothed
total re-assigned a sum it is a term of (`smooth = smooth * 0.99 + loss * 0.01`, sh0416's BPR) chains the graphs the
same way.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

from hotloop.lint.analysis import ModuleInfo, assigned_values, dotted, method_name, target_names, walk_local
from hotloop.lint.structure import src
from hotloop.lint.syntax import under_no_grad

DETACHES = re.compile(r"\.(detach|item|cpu|numpy|tolist)\(")


def running_totals(
    mi: ModuleInfo, loop: ast.AST, value_before: Callable[[str, ast.AST], ast.expr | None]
) -> Iterator[tuple[ast.AugAssign, str]]:
    """(statement, message) for each running total of graph-holding losses in the hot `loop`; `value_before` is
    the checker's (HostProvenance's): the value last assigned to a name before a statement."""
    body = list(walk_local(loop))
    stepped = _backward_names(body)
    outer = [x for x in [loop, *mi.enclosing_loops(loop)] if x in mi.hot_loops]
    reset = {t for x in outer for n in walk_local(x) if isinstance(n, ast.Assign) and not _smoothed(n)
             for y in n.targets for t in target_names(y)}  # fmt: skip
    beside: set[str] = set()  # the terms returned beside it: `batch_loss, batch_mf_loss = model.create_bpr_loss(...)`
    for n in body:  # (KGIN's `batch_loss, _, _, batch_cor = model(batch)` summed into `cor_loss`: a term too)
        if isinstance(n, ast.Assign) and (names := {t for x in n.targets for t in target_names(x)}) & stepped:
            beside |= names
            stepped |= {x for x in names if "loss" in x}
    for n in body:
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add):  # (`trans_loss += loss / len(loader)`: KGCL)
            added = next((x for x in _terms(n.value) if isinstance(x, ast.Name)), None)
            total = n.target
        elif _smoothed(n):  # `smooth_loss = smooth_loss * 0.99 + loss * 0.01` (sh0416's BPR): a running total too
            added = next((x for x in _terms(n.value) if isinstance(x, ast.Name) and x.id in stepped), None)
            total = n.targets[0]  # type: ignore[attr-defined]
        else:
            continue
        if (added is not None and isinstance(total, ast.Name) and total.id not in stepped
                and (added.id in stepped or added.id in beside and "loss" in total.id)
                and total.id not in reset and not under_no_grad(mi.parent, n)
                and mi.kind(added, mi.function_info(n)) == "tensor"
                and not DETACHES.search(ast.unparse(value_before(added.id, n) or ast.Constant(None)))):  # fmt: skip
            yield n, (f"`{src(n)}` keeps every step's autograd graph in a running total: add `{added.id}.item()` "
                      "(or `.detach()`)")  # fmt: skip


def meter_totals(mi: ModuleInfo, loop: ast.AST) -> Iterator[tuple[ast.Call, str]]:
    """(call, message) for `meter.update(loss, n)` in the hot `loop` with the loss it calls `.backward()` on (or a
    term beside it), where the meter's `update` (its class in this file or another of the project) adds what it
    is given into an attribute: `self.sum += val * n` keeps every step's graph until the meter is reset (align_
    uniform's `AverageMeter`, pytorch/examples' copy). One that reads the value first (`val.item()`) does not."""
    from hotloop.lint.imports import Project, defining, find_def, load_module  # (imports builds on analysis)

    body = list(walk_local(loop))
    stepped = _backward_names(body)
    terms = {t for n in body if isinstance(n, ast.Assign) and isinstance(n.value, ast.BinOp)
             and {t for x in n.targets for t in target_names(x)} & stepped
             for x in ast.walk(n.value) if isinstance(x, ast.Name) for t in [x.id]}  # fmt: skip
    for c in body:
        if not (isinstance(c, ast.Call) and method_name(c) == "update" and c.args and isinstance(c.args[0], ast.Name)
                and (c.args[0].id in stepped or c.args[0].id in terms and "loss" in c.args[0].id)):  # fmt: skip
            continue
        if mi.kind(c.args[0], mi.function_info(c)) != "tensor" or under_no_grad(mi.parent, c):
            continue
        made = [v for v in assigned_values(dotted(c.func.value), mi.nodes) if isinstance(v, ast.Call)]  # type: ignore[attr-defined]
        local = {k.name for k in mi.tree.body if isinstance(k, ast.ClassDef)} & {dotted(v.func) for v in made}
        target = None if local else Project.of(mi).callee(c)
        file, name = defining(*target) if target is not None else (None, "")
        helper = load_module(file, file.stat().st_mtime) if file is not None else None
        fn = find_def(helper.tree, name) if helper is not None and "." in name else None
        fn = find_def(mi.tree, f"{local.pop()}.update") if local else fn
        params = [a.arg for a in fn.args.args][1:2] if isinstance(fn, ast.FunctionDef) else []
        if not params or DETACHES.search(ast.unparse(fn)) or "item(" in ast.unparse(fn):  # type: ignore[arg-type]
            continue
        if any(isinstance(n, ast.AugAssign) and dotted(n.target).startswith("self.")
               and params[0] in {x.id for x in ast.walk(n.value) if isinstance(x, ast.Name)} for n in ast.walk(fn)):  # type: ignore[arg-type]  # fmt: skip
            yield c, (f"`{src(c)}` adds `{c.args[0].id}` (still holding its autograd graph) into the meter's running "
                      f"sum every step: pass `{c.args[0].id}.item()` at a log boundary (or `.detach()`)")  # fmt: skip


def _backward_names(body: list[ast.AST]) -> set[str]:
    """The names `body` calls `.backward()` on: the losses of the step."""
    return {dotted(c.func.value) for c in body if isinstance(c, ast.Call) and method_name(c) == "backward"
            and isinstance(c.func, ast.Attribute)}  # fmt: skip


def _smoothed(n: ast.AST) -> bool:
    """`total = total * decay + x * (1 - decay)` or `total = total + x`: a name re-assigned a sum it is a term of."""
    if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)):
        return False
    return isinstance(n.value, ast.BinOp) and isinstance(n.value.op, ast.Add) and any(
        isinstance(x, ast.Name) and x.id == n.targets[0].id for x in _terms(n.value))  # fmt: skip


def _terms(e: ast.expr) -> list[ast.expr]:
    """The names a sum adds, each maybe scaled by a constant: `a * 0.99 + b * 0.01` gives a and b."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add):
        return _terms(e.left) + _terms(e.right)
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Mult, ast.Div)):
        return [x for x in (e.left, e.right) if not isinstance(x, ast.Constant)][:1]
    return [e]


def rollout_list(mi: ModuleInfo, c: ast.Call, made: list[ast.expr]) -> bool:
    """An A3C/REINFORCE rollout: the list is made anew in an outer loop (one update), filled every environment step
    by the inner loop around `c`, and that outer loop backpropagates after the inner one (Street-fighter-A3C-ICM's
    `inv_losses.append(inv_loss)`, summed into `total_loss.backward()` once per update): the graphs it keeps are
    that update's loss, dropped with the list."""
    loops = list(mi.enclosing_loops(c))
    end = (loops[0].end_lineno or loops[0].lineno) if loops else 0
    for outer in loops[1:]:
        body = set(ast.walk(outer))
        if all(n in body for n in made) and any(isinstance(b, ast.Call) and method_name(b) == "backward"
                                                and b.lineno > end for b in body):  # fmt: skip
            return True
    return False
