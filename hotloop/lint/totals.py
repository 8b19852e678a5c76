"""HL019 for running totals: `loss += batch_loss` in the step loop, after `batch_loss.backward()`, with `loss = 0.`
set outside every hot loop (NGCF, SR-GNN, DiffPool). The total is a tensor that references each step's autograd
graph, so every graph of the epoch stays alive until the total is dropped: memory grows with the step count. The
fix is to add a number (`batch_loss.item()`, read at a log boundary) or a detached tensor.

Only a name the loop calls `.backward()` on (or a loss term unpacked beside one) counts, and only while it still holds
that tensor: a last assignment that detaches it (`loss_batch = loss_batch.detach().cpu()`, facenet-pytorch) or makes
it a number (`loss = loss.item()`, dc-tts) keeps no graph. A total reset inside a hot loop around the addition
(Multimodal-Transformer's per-chunk sum, zeroed every batch) lives for one step only and is not reported.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

from hotloop.lint.analysis import ModuleInfo, dotted, method_name, target_names, walk_local
from hotloop.lint.structure import src
from hotloop.lint.syntax import under_no_grad

DETACHES = re.compile(r"\.(detach|item|cpu|numpy|tolist)\(")


def running_totals(
    mi: ModuleInfo, loop: ast.AST, value_before: Callable[[str, ast.AST], ast.expr | None]
) -> Iterator[tuple[ast.AugAssign, str]]:
    """(statement, message) for each running total of graph-holding losses in the hot `loop`; `value_before` is
    the checker's (HostProvenance's): the value last assigned to a name before a statement."""
    body = list(walk_local(loop))
    stepped = {dotted(c.func.value) for c in body if isinstance(c, ast.Call) and method_name(c) == "backward"
               and isinstance(c.func, ast.Attribute)}  # fmt: skip
    outer = [x for x in [loop, *mi.enclosing_loops(loop)] if x in mi.hot_loops]
    reset = {t for x in outer for n in walk_local(x) if isinstance(n, ast.Assign) for y in n.targets
             for t in target_names(y)}  # fmt: skip
    for n in body:  # the loss terms returned beside it: `batch_loss, batch_mf_loss = model.create_bpr_loss(...)`
        if isinstance(n, ast.Assign) and (names := {t for x in n.targets for t in target_names(x)}) & stepped:
            stepped |= {x for x in names if "loss" in x}
    for n in body:
        if (isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and isinstance(n.target, ast.Name)
                and isinstance(n.value, ast.Name) and n.value.id in stepped and n.target.id not in stepped
                and n.target.id not in reset and not under_no_grad(mi.parent, n)
                and mi.kind(n.value, mi.function_info(n)) == "tensor"
                and not DETACHES.search(ast.unparse(value_before(n.value.id, n) or ast.Constant(None)))):  # fmt: skip
            yield n, (f"`{src(n)}` keeps every step's autograd graph in a running total: add `{n.value.id}.item()` "
                      "(or `.detach()`)")  # fmt: skip
