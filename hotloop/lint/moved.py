"""Tensors already on the device that an expression alone does not show: a `.to(device)` of them copies nothing.

`provenance.HostProvenance.on_device` follows a name to the value assigned to it. Three ways research code puts
tensors on the device leave no such assignment:

- a whole container moved in place before the use: NeRF++'s `for key in ray_batch: ray_batch[key] =
  ray_batch[key].to(rank)`, or VIBE's `move_dict_to_device(target_3d, self.device)` (`moved_whole_before`);
- a list filled with device tensors, then concatenated: SAM-Med3D's `self.click_points.append(points_co)` after
  `points_co = torch.cat(...).to(device)`, then `torch.cat(self.click_points, dim=1).to(device)` (`appended`);
- batches of an iterator built on the device: torchtext's `BucketIterator(train, ..., device=device)` in
  attention-is-all-you-need, whose `batch.src` the loop moves again (`device_iterators`).

And the other way round (`trainer_buffer`): a step counter registered as a buffer of a trainer that is an
`nn.Module` but is never moved (audiolm's `self.register_buffer('steps', torch.Tensor([0]))`, read with
`self.steps.item()` every step) lives on the host: reading it syncs nothing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

from hotloop.lint.analysis import MOVER_FN, call_name, dotted, method_name, target_names

ITERATOR = re.compile(r"(Bucket)?Iterator$")  # torchtext's (legacy) iterators take `device=`


def moved_whole_before(mi: Any, name: str, at: ast.AST) -> bool:
    """Every entry of the container `name` was moved to the device by a statement before `at` in its blocks, up to
    and including its function's body (a loop over its keys storing `.to(...)`/`.cuda()` of each entry back, or a
    mover helper handed it), and `name` was not bound again in between (nor is it a loop's target there)."""
    child, n = at, mi.parent.get(at)
    while n is not None and not isinstance(n, (ast.Module, ast.Lambda)):
        block = next((b for b in (getattr(n, "body", None), getattr(n, "orelse", None))
                      if isinstance(b, list) and child in b), None)  # fmt: skip
        for s in reversed(block[: block.index(child)] if block else []):
            # (also inside an `if` before: VIBE's `if self.train_3d_iter: target_3d = next(...); move_dict_to_device(
            # target_3d, self.device)`, the move after the binding)
            if any(isinstance(x, ast.Call) and x.args and MOVER_FN.search(call_name(x).rpartition(".")[2])
                   and dotted(x.args[0]) == name or isinstance(x, ast.For) and _moves_entries(x, name)
                   for x in ast.walk(s)):  # fmt: skip
                return True
            if any(isinstance(x, ast.Name) and x.id == name and isinstance(x.ctx, ast.Store) for x in ast.walk(s)):
                return False
        if isinstance(n, (ast.For, ast.AsyncFor)) and child is not n.iter and name in target_names(n.target):
            return False  # `for b in loader:` binds it anew every pass (a move above it in its body counts)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            break
        child, n = n, mi.parent.get(n)
    return False


def _moves_entries(loop: ast.For, name: str) -> bool:
    """`for key in batch:` (or `batch.keys()`, `batch.items()`) whose body stores `batch[key].to(...)` back."""
    it = loop.iter.func.value if isinstance(loop.iter, ast.Call) and method_name(loop.iter) in ("keys", "items") \
        else loop.iter  # fmt: skip
    keys = target_names(loop.target.elts[0] if isinstance(loop.target, ast.Tuple) and loop.target.elts else loop.target)
    if dotted(it) != name:  # type: ignore[arg-type]
        return False
    return any(isinstance(a, ast.Assign) and any(isinstance(t, ast.Subscript) and dotted(t.value) == name
                                                 and dotted(t.slice) in keys for t in a.targets)
               and any(isinstance(c, ast.Call) and method_name(c) in ("to", "cuda") for c in ast.walk(a.value))
               for a in ast.walk(loop))  # fmt: skip


def appended(mi: Any, e: ast.expr, on_device: Callable[[ast.expr, ast.AST], bool]) -> bool:
    """The list `e` (a name or `self.x`) is filled only by `.append(v)` calls of this module with `v` on the
    device where it is appended (made empty, never extended or added to another way): `torch.cat(e)` of it is on
    the device too."""
    key = dotted(e)
    made = fills(mi).get(key, []) if key else []
    return bool(made) and all(method_name(c) == "append" and c.args and on_device(c.args[0], c)
                              for c in made if isinstance(c, ast.Call)) and all(
        isinstance(c, ast.Call) or isinstance(c, ast.List) and not c.elts for c in made)  # fmt: skip


def fills(mi: Any) -> dict[str, list[ast.AST]]:
    """Name (or `self.x`) -> what fills it in this module, found once: the values assigned to it (`x = []`,
    `get_train_loader = get_pytorch_train_loader`), the `+=` statements adding to it, and its
    `append`/`extend`/`insert` calls. Shared by the device, mask, alias and logger questions that ask it."""
    if "_fills" not in mi.__dict__:
        out: dict[str, list[ast.AST]] = {}
        for n in mi.nodes:
            if isinstance(n, ast.Call) and method_name(n) in ("append", "extend", "insert"):
                out.setdefault(dotted(n.func.value), []).append(n)  # type: ignore[attr-defined]
            elif isinstance(n, (ast.Assign, ast.AugAssign)):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    out.setdefault(dotted(t), []).append(n.value if isinstance(n, ast.Assign) else n)
        mi.__dict__["_fills"] = out
    return mi.__dict__["_fills"]  # type: ignore[no-any-return]


def device_iterators(mi: Any) -> bool:
    """The module builds torchtext iterators on the device (`BucketIterator(..., device=device)`, not -1 or
    "cpu") and no DataLoader: the batches its loops read are device tensors."""
    if "_device_iterators" not in mi.__dict__:
        made = [c for c in mi.nodes if isinstance(c, ast.Call) and ITERATOR.search(call_name(c))]
        devices = [k.value for c in made for k in c.keywords if k.arg == "device"]
        on = bool(devices) and all(not (isinstance(d, ast.Constant) and d.value in (-1, "cpu", None))
                                   and not (isinstance(d, ast.UnaryOp) and ast.unparse(d) == "-1")
                                   for d in devices)  # fmt: skip
        mi.__dict__["_device_iterators"] = on and "DataLoader(" not in mi.source
    return bool(mi.__dict__["_device_iterators"])


def iterated_batch(mi: Any, name: str, at: ast.AST) -> bool:
    """`name` is the target of a loop around `at` in its function (the batch a torchtext iterator yields)."""
    loops = mi.enclosing_loops(at)
    return any(isinstance(n, (ast.For, ast.AsyncFor)) and name in target_names(n.target) for n in loops)


TRAINER_CLASS = re.compile(r"(Trainer|Runner|Engine|Solver)$")
MOVES_SELF = re.compile(r"\bself\.(to|cuda)\(|\bsuper\(\)\.(to|cuda)\(")


def trainer_buffer(mi: Any, e: ast.expr) -> bool:
    """`self.<name>` registered by `self.register_buffer("<name>", <a tensor made without device=>)` in an
    `nn.Module` named like a trainer whose code never moves `self`."""
    if not (isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self"):
        return False
    cls = mi.parent.get(mi.enclosing_function(e))
    if not isinstance(cls, ast.ClassDef) or not TRAINER_CLASS.search(cls.name):
        return False
    memo = mi.__dict__.setdefault("_trainer_buffers", {})
    if cls not in memo:  # (the class's host buffers, found once)
        host: set[str] = set()
        module = any(dotted(b).rpartition(".")[2] == "Module" for b in cls.bases)
        if module and not MOVES_SELF.search(ast.get_source_segment(mi.source, cls) or ""):
            made: dict[str, list[ast.expr]] = {}
            for c in ast.walk(cls):
                if (isinstance(c, ast.Call) and method_name(c) == "register_buffer" and len(c.args) > 1
                        and isinstance(c.args[0], ast.Constant) and isinstance(c.args[0].value, str)):  # fmt: skip
                    made.setdefault(c.args[0].value, []).append(c.args[1])
            host = {k for k, vs in made.items() if all(isinstance(v, ast.Call) and dotted(v.func).startswith("torch.")
                                                       and not any(w.arg == "device" for w in v.keywords)
                                                       for v in vs)}  # fmt: skip
        memo[cls] = host
    return e.attr in memo[cls]
