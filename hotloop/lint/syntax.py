"""How the linted code spells things: dotted names, method names, assignment targets and the values names
are given, and the instances `x = Cls(...)` makes. Shared by the type model (`kinds.py`), the module's
call graph (`analysis.py`), gates and the cross-file pass."""

from __future__ import annotations

import ast
import contextlib
import copy
import re
from collections.abc import Callable, Iterable
from typing import Any

# PyTorch before 0.4 spelled a non-blocking copy `.cuda(async=True)`; `async` became a keyword in Python 3.7, so
# such a file no longer parses. Read as `non_blocking=True` (what PyTorch renamed it to), the file's lines stay
# where they are and the rest of it is linted, instead of one HL000 hiding every finding (CBAM, TSN).
_ASYNC_KW = re.compile(r"(?<=[(,\s])async(?=\s*=[^=])")


def parse_source(source: str, filename: str = "<unknown>") -> tuple[ast.Module, str]:
    """The module's tree and the source it was read from; raises SyntaxError/ValueError as `ast.parse`
    does, for the source as written, when it does not parse even with `async=` read as `non_blocking=`."""
    try:
        return ast.parse(source, filename=filename), source
    except SyntaxError:
        fixed = _ASYNC_KW.sub("non_blocking", source)
        if fixed != source:
            with contextlib.suppress(SyntaxError):
                return ast.parse(fixed, filename=filename), fixed
        raise


def dotted(node: ast.AST) -> str:
    """`torch.nn.functional.relu` for an Attribute/Name chain, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def method_name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def target_names(t: ast.expr) -> list[str]:
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in target_names(e)]
    if isinstance(t, ast.Starred):
        return target_names(t.value)
    return []


def assigned_values(name: str, nodes: Iterable[ast.AST], annotated: bool = False) -> list[ast.expr]:
    """The values the assignments among `nodes` give `name` (`x = v`, and `x, y = v` gives v;
    with `annotated`, `x: T = v` too), in the order of `nodes`."""
    out = []
    for n in nodes:
        if isinstance(n, ast.Assign):
            targets: list[ast.expr] = n.targets
        elif annotated and isinstance(n, ast.AnnAssign) and n.value is not None:
            targets = [n.target]
        else:
            continue
        if any(name in target_names(t) for t in targets):
            out.append(n.value)  # type: ignore[arg-type]
    return out


def constructed(nodes: Iterable[ast.AST], resolve: Callable[[ast.Call], Any]) -> dict[str, Any]:
    """`x = Cls(...)`, `self.x = Cls(...)`: each name with what `resolve` makes of its first construction."""
    out: dict[str, Any] = {}
    for n in nodes:
        if not isinstance(n, ast.Assign):
            continue
        value = n.value  # `Cls(...).cuda()`, `Cls(...).to(device).train()`: a module's moves return the module
        if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
            value = value.values[-1]  # `self.sampler = sampler or UniformSampler(diffusion)`: the default
        while isinstance(value, ast.Call) and method_name(value) in RETURNS_SELF and isinstance(
                value.func.value, ast.Call):  # type: ignore[attr-defined]  # fmt: skip
            value = value.func.value  # type: ignore[attr-defined]
        if isinstance(value, ast.Call) and (made := resolve(value)) is not None:
            out.update((dotted(t), made) for t in n.targets if dotted(t) and dotted(t) not in out)
    return out


RETURNS_SELF = {"cuda", "to", "train", "eval", "half", "float", "double", "bfloat16", "cpu", "requires_grad_"}


def walk_local(node: ast.AST):
    """ast.walk that does not enter nested function or class definitions (nor lambdas)."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(n))


def method_of(
    cls: ast.ClassDef, names: tuple[str, ...], classes: dict[str, ast.ClassDef], depth: int = 0
) -> ast.AST | None:
    """The first of `names` defined in `cls`, or else inherited from its base classes among `classes` (the same
    module's: `class UniformSampler(ScheduleSampler)` inherits `sample`)."""
    own = {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = next((own[n] for n in names if n in own), None)
    bases = [classes[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in classes and b.id != cls.name]
    inherited = (method_of(b, names, classes, depth + 1) for b in bases if depth < 4)
    return found or next((f for f in inherited if f is not None), None)


def is_str(e: ast.expr) -> bool:
    """A string by its spelling: a literal, an f-string, `'...'.format(...)`, or `+` with one of those."""
    if isinstance(e, ast.JoinedStr) or isinstance(e, ast.Constant) and isinstance(e.value, str):
        return True
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "format":
        return is_str(e.func.value)
    return isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add) and (is_str(e.left) or is_str(e.right))


def read_of(read: ast.expr, x: ast.expr) -> bool:
    """`read` brings `x` itself to Python: `x.item()`, `float(x)` (`l["mse"].item() if hasattr(...) else l["mse"]`)."""
    if not isinstance(read, ast.Call):
        return False
    if isinstance(read.func, ast.Attribute) and read.func.attr == "item":
        return ast.dump(read.func.value) == ast.dump(x)
    return dotted(read.func) in ("float", "int") and len(read.args) == 1 and ast.dump(read.args[0]) == ast.dump(x)


def assignment_before(
    parent: dict[ast.AST, ast.AST], at: ast.AST, binds: Callable[[ast.Assign], bool]
) -> ast.Assign | None:
    """The last assignment that `binds` accepts among the statements before `at`'s, in its block or the blocks
    around it, up to and including its function's body (not across a function boundary)."""
    child, n = at, parent.get(at)
    while n is not None and not isinstance(n, ast.Module):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(n, field, None)
            if isinstance(block, list) and child in block:
                if (found := _last_binding(block[: block.index(child)], binds)) is not None:
                    return found
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return None
        child, n = n, parent.get(n)
    return None


def binding_before(parent: dict[ast.AST, ast.AST], at: ast.AST, name: str) -> ast.Assign | None:
    """The last assignment to `name` (a target of it, tuples unpacked) before `at`, as `assignment_before` finds it."""
    return assignment_before(parent, at, lambda a: any(name in target_names(t) for t in a.targets))


def _last_binding(stmts: list[ast.stmt], binds: Callable[[ast.Assign], bool]) -> ast.Assign | None:
    """The last of `stmts` that `binds` accepts, looking into `with` bodies, which always run (VoiceCraft's
    `with autocast(): out = self.model(batch)`, then `out['loss']` below it)."""
    for s in reversed(stmts):
        if isinstance(s, ast.Assign) and binds(s):
            return s
        if isinstance(s, (ast.With, ast.AsyncWith)) and (found := _last_binding(s.body, binds)) is not None:
            return found
    return None


def param_defaults(fn: ast.AST) -> dict[str, ast.expr]:
    """Parameter name -> its default expression (positional and keyword-only) of a function; {} for others."""
    args = getattr(fn, "args", None)
    if args is None:
        return {}
    pos = [*args.posonlyargs, *args.args]
    out = dict(zip([a.arg for a in pos[len(pos) - len(args.defaults) :]], args.defaults, strict=True))
    out.update((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None)
    return out


def under_no_grad(parent: dict[ast.AST, ast.AST], node: ast.AST) -> bool:
    """Under `with torch.no_grad()`/`inference_mode()` or in a function decorated so: no graph to keep."""
    n = parent.get(node)
    while n is not None:
        if isinstance(n, ast.With) and re.search(r"no_grad|inference_mode", ast.unparse(n.items[0].context_expr)):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return any(re.search(r"no_grad|inference_mode", ast.unparse(d)) for d in n.decorator_list)
        n = parent.get(n)
    return False


def graphless(value: ast.expr) -> bool:
    """A value no gradient flows through: indices (`argmax`, `out.max(dim=1)[1]`, `topk(k)[1]`), integer casts,
    comparisons, or a gather across ranks (`concat_all_gather(...)` runs under no_grad): appending it keeps no graph."""
    if isinstance(value, ast.Compare):
        return True
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) and value.slice.value == 1:
        return isinstance(value.value, ast.Call) and method_name(value.value) in ("max", "min", "topk", "sort")
    if isinstance(value, ast.Call):
        name = dotted(value.func).rpartition(".")[2]
        return name in ("argmax", "argmin", "long", "int", "bool", "argsort") or "all_gather" in name
    return False


def derives(tree: ast.Module, sub: ast.AST | None, base: ast.AST | None, depth: int = 4) -> bool:
    """Same-file class `sub` derives from `base` (through same-file classes)."""
    if not isinstance(sub, ast.ClassDef) or not isinstance(base, ast.ClassDef) or sub is base or depth == 0:
        return False
    names = {dotted(b).rpartition(".")[2] for b in sub.bases}
    return base.name in names or any(derives(tree, c, base, depth - 1) for c in tree.body
                                     if isinstance(c, ast.ClassDef) and c.name in names)  # fmt: skip


def block_of(parent: dict[ast.AST, ast.AST], stmt: ast.AST) -> list[ast.stmt]:
    """The statement list (a body, `else` or `finally`) that holds `stmt`; [] when it is in none."""
    holder = parent.get(stmt)
    return next((b for f in ("body", "orelse", "finalbody") if stmt in (b := getattr(holder, f, None) or [])), [])


def copied(e: ast.expr) -> bool:
    """`loss.detach().cpu()` somewhere down a method chain (`loss.detach().cpu().item()`): the `.cpu()` is the
    device-to-host copy (HL007); the `.item()` after it reads a host tensor."""
    while isinstance(e, (ast.Call, ast.Attribute, ast.Subscript)):
        if isinstance(e, ast.Call) and method_name(e) in ("cpu", "numpy"):
            return True
        e = e.func if isinstance(e, ast.Call) else e.value
    return False


def refers(value: ast.expr, name: str) -> bool:
    return any(isinstance(x, ast.Attribute) and dotted(x) == name for x in ast.walk(value))


def zeroed(value: ast.expr, name: str) -> ast.expr:
    """`value` with each `name` (`self.avg_loss`) in it replaced by 0: the kind of what the update adds."""

    class Zero(ast.NodeTransformer):
        def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
            return ast.Constant(0) if dotted(node) == name else self.generic_visit(node)

    return Zero().visit(copy.deepcopy(value))


def passed_for(fn: ast.AST, call: ast.Call, name: str) -> ast.expr | None:
    """What `call` passes for `fn`'s parameter `name`: the keyword, else the positional argument (counted after
    `self` when called as a method); after a `*args`, what follows it fills the last parameters
    (`_kl_normal_loss(*latent_dist, storer)`). None when it passes nothing for it."""
    given = next((k.value for k in call.keywords if k.arg == name), None)
    args = getattr(fn, "args", None)
    params = [a.arg for a in [*args.posonlyargs, *args.args]] if args is not None else []
    if given is not None or name not in params:
        return given
    if params[:1] in (["self"], ["cls"]) and isinstance(call.func, ast.Attribute):
        params = params[1:]
    if name not in params:  # (`self` itself, of a method call)
        return None
    i = params.index(name)
    stars = [j for j, a in enumerate(call.args) if isinstance(a, ast.Starred)]
    if stars:
        tail = call.args[stars[-1] + 1 :]
        i -= len(params) - len(tail)
        return tail[i] if 0 <= i < len(tail) else None
    return call.args[i] if i < len(call.args) else None


def data0(n: ast.AST) -> bool:
    """`loss.data[0]`: PyTorch 0.3's spelling of `.item()` (in a loop, or in CycleGAN's `Logger.log`)."""
    return (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "data"
            and isinstance(n.slice, ast.Constant) and n.slice.value == 0)  # fmt: skip


def reduced(e: ast.expr) -> bool:
    """`n_pos.data.sum().float()`, `d - mask_len.max()`: a value computed by a tensor reduction, not a Python
    number that only looks like a tensor by its name (`max((x - 1.0) / (warmup - 1.0), 0)`)."""
    return any(isinstance(n, ast.Call) and method_name(n) in ("sum", "max", "min", "mean", "norm", "float", "long")
               for n in ast.walk(e))  # fmt: skip


def chained_read(c: ast.Call) -> bool:
    """`x.numpy().tolist()`, `x.cpu().numpy()`, `x.to("cpu").numpy()`: a read of what an earlier copy brought over."""
    recv = c.func.value if isinstance(c.func, ast.Attribute) else None
    return isinstance(recv, ast.Call) and (method_name(recv) in ("cpu", "numpy") or method_name(recv) == "to" and any(
        isinstance(a, ast.Constant) and a.value == "cpu" for a in recv.args))  # fmt: skip


def made_here(mi: Any, e: ast.expr) -> bool:
    """`delta.grad` of `delta = torch.zeros_like(X).cuda()` in this function: a perturbation of the input an attack
    builds (Bag-of-Tricks-for-AT's PGD), not a parameter whose gradient an optimizer step keeps."""
    e = e.value if isinstance(e, ast.Attribute) and e.attr == "data" else e
    base = e.value if isinstance(e, ast.Attribute) else None
    if not isinstance(base, ast.Name):
        return False
    for v in assigned_values(base.id, walk_local(mi.enclosing_function(e))):
        while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and not dotted(v.func).startswith("torch."):
            v = v.func.value  # `.cuda()`, `.requires_grad_()` of what was made
        if isinstance(v, ast.Call) and re.fullmatch(r"torch\.\w+_like", dotted(v.func)):
            return True  # (`w = torch.randn(n, m, requires_grad=True)` of a hand-written loop is a parameter)
    return False


def a_grad(e: ast.expr) -> bool:
    """`param.grad`, `p.grad.data`: a parameter's whole gradient (guided-diffusion's fp16 `zero_grad` helper)."""
    e = e.value if isinstance(e, ast.Attribute) and e.attr == "data" else e
    return isinstance(e, ast.Attribute) and e.attr == "grad"


def empty_copy(c: ast.AST) -> bool:
    """`torch.empty(0).to(x.device)`, `torch.Tensor([]).to(dev)` (KGReasoning's placeholder logits): a copy of an
    empty tensor moves nothing."""
    recv = c.func.value if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) else None
    made = isinstance(recv, ast.Call) and re.search(r"(^|\.)(empty|zeros|ones|rand|randn|tensor|\w*Tensor)$",
                                                    dotted(recv.func))  # fmt: skip  # (not `x.unsqueeze(0)`)
    return bool(made) and recv.args[:1] != [] and ast.unparse(recv.args[0]) in ("0", "(0,)", "[]")  # type: ignore[union-attr]
