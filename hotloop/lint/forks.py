"""A name an `if`/`else` binds to a tensor on one side and a Python number on the other.

    if hparams.syncnet_wt > 0.:
        sync_loss = get_sync_loss(mel, g)      # a tensor
    else:
        sync_loss = 0.                         # a float
    ...
    if hparams.syncnet_wt > 0.:
        running_sync_loss += sync_loss.item()  # the tensor side: a host read every step

The kind model's rule "the assignment just above the use decides" saw the `else` (the later line) and took
`sync_loss` for a float (Wav2Lip, batch Z). Under the same test again, the branch's own kind holds; anywhere
else the name is a tensor on one path, and a read there may sync.

Also here, the other local facts that override a name's kind at one use: a lambda's own parameter, an
`isinstance` test that narrows a name away from tensors, and a dict entry the function only ever sets to
numbers (`state['step'] = 0; state['step'] += 1`); and two pieces of the kind model kept here to keep
`kinds.py` readable: what Python's `max`/`min`/`abs` give back, and the kinds a tuple unpacking of a same-file
call's result takes position by position.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from hotloop.lint.gates import is_optimizer_step
from hotloop.lint.syntax import (
    assigned_values,
    assignment_before,
    binding_before,
    dotted,
    param_defaults,
    target_names,
    walk_local,
)

SCALAR_BUILTINS = {"len", "int", "float", "bool", "str", "list", "tuple", "dict", "set", "sorted", "repr", "id", "type"}


def _kind_at(info: Any, name: str, line: int, tensor_name: re.Pattern[str]) -> str | None:
    """The kind assigned at `line`; an unknown one for a loss-like name (`perceptual_forward(g)`) a tensor."""
    kind = next((k for at, k in info.history.get(name, ()) if at == line), None)
    return kind if kind is not None else ("tensor" if tensor_name.search(name) else None)


def branch_kind(
    model: Any, e: ast.Name, info: Any, first: int, second: int, tensor_name: re.Pattern[str]
) -> str | None:
    """The kind of `e` when its two latest assignments (lines `first`, `second`) are the two sides of one `if`;
    None when they are not (the caller's rule applies)."""
    made = {}
    for n in model.walk_local(info.node):
        if (
            isinstance(n, ast.Assign)
            and (n.end_lineno or n.lineno) in (first, second)
            and any(e.id in target_names(t) for t in n.targets)
        ):
            made[n.end_lineno or n.lineno] = n
    a, b = made.get(first), made.get(second)
    fork = model.parent.get(a) if a is not None else None
    if not (isinstance(fork, ast.If) and b is not None and model.parent.get(b) is fork):
        return None
    kinds = {id(x): _kind_at(info, e.id, line, tensor_name) for x, line in ((a, first), (b, second))}
    test = ast.unparse(fork.test)
    child, n = e, model.parent.get(e)
    while n is not None and n is not info.node:
        if isinstance(n, ast.If) and child is not n.test and ast.unparse(n.test) == test:
            side = fork.body if child in n.body else fork.orelse
            return next((kinds[id(x)] for x in (a, b) if x in side), None)
        child, n = n, model.parent.get(n)
    return "tensor"


def lambda_param(parent: dict[ast.AST, ast.AST], e: ast.Name) -> bool:
    """`e` is a parameter of a lambda around it (`lambda t: t.cuda()`), not the enclosing function's name."""
    n = parent.get(e)
    while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(n, ast.Lambda) and e.id in {a.arg for a in n.args.args}:
            return True
        n = parent.get(n)
    return False


def comp_binding(parent: dict[ast.AST, ast.AST], e: ast.Name) -> ast.comprehension | None:
    """The generator of a comprehension around `e` that binds its name (`t` in `tuple(t.cuda() for t in batch)`):
    that name is the comprehension's own, whatever the enclosing function assigns to the same name elsewhere."""
    child, n = e, parent.get(e)
    while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        if isinstance(n, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for i, gen in enumerate(n.generators):
                if child is gen or child in n.generators[:i]:
                    break  # `e` is in this generator's own iterable (or an earlier one's): bound outside
                if e.id in {t.id for t in ast.walk(gen.target) if isinstance(t, ast.Name)}:
                    return gen
        child, n = n, parent.get(n)
    return None


def inner_kind(
    model: Any, e: ast.Name, info: Any, tensor_name: re.Pattern[str], loader_name: re.Pattern[str]
) -> str | None:
    """The kind of a name bound inside the expression around it, not by the function: a lambda's parameter
    (`lambda t: t.cuda()`: by its name) or a comprehension's target (`tuple(t.cuda() for t in batch)`: by what
    it iterates, whatever the function assigns to a `t` elsewhere, CodeBERT); "free" for any other name."""
    if lambda_param(model.parent, e):
        return "tensor" if tensor_name.search(e.id) else None
    if (gen := comp_binding(model.parent, e)) is None:
        return "free"
    if isinstance(gen.iter, ast.Call) and model.call_name(gen.iter) == "range":
        return "scalar"
    if iterates_data(model, gen.iter, loader_name) or model.kind(gen.iter, info) == "tensor":
        return "tensor"
    return "tensor" if info.is_tensor_name(e.id) else None


# isinstance types whose elements may be tensors (also typing's `Tuple`, `List`, `Dict`: flair's trainer)
CONTAINERS = re.compile(r"[Ll]ist|[Tt]uple|Sequence|[Dd]ict|Mapping")


def narrowed(parent: dict[ast.AST, ast.AST], e: ast.Name) -> str | None:
    """What an enclosing `isinstance` test says `e` is there: "tensor" (`isinstance(x, torch.Tensor)`, a batch
    mover's tensor branch), "container" (`list`, `tuple`, `dict`, ...: not a tensor, but its elements may be:
    `if isinstance(x, (list, tuple)): x = x[0]` takes the batch out of a `(x, y)` pair, ddpm-torch; Conv-TasNet's
    `{key: to_cuda(dicts[key]) ...}` under `isinstance(dicts, dict)`), "scalar" (`int`, `str`, ...), or None."""
    found = _narrowing(parent, e)
    if found is None or "Tensor" in found and CONTAINERS.search(found):
        return None
    return "tensor" if "Tensor" in found else "container" if CONTAINERS.search(found) else "scalar"


def _narrowing(parent: dict[ast.AST, ast.AST], e: ast.Name) -> str | None:
    """The type an enclosing `isinstance(e, T)` test (an `if` body, or earlier in an `and` chain) narrows the
    name to, as written; None when none does."""
    child, n = e, parent.get(e)
    while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        tests = [n.test] if isinstance(n, ast.If) and child is not n.test and child in n.body else []
        if isinstance(n, ast.BoolOp) and isinstance(n.op, ast.And) and child in n.values:  # `isinstance(o, list) and o`
            tests = n.values[: n.values.index(child)]
        for test in tests:
            for t in ast.walk(test):
                if (isinstance(t, ast.Call) and isinstance(t.func, ast.Name) and t.func.id == "isinstance"
                        and len(t.args) == 2 and isinstance(t.args[0], ast.Name) and t.args[0].id == e.id):  # fmt: skip
                    return ast.unparse(t.args[1])
        child, n = n, parent.get(n)
    return None


def option_element(parent: dict[ast.AST, ast.AST], e: ast.Name, options: re.Pattern[str]) -> bool:
    """`x` bound by a comprehension over an option list (DAIN's `sum(x * y if x > 0 else 0 for x, y in
    zip(args.alpha, pixel_loss))`, or over `range(...)`): a Python number, whatever its name."""
    n = parent.get(e)
    while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)):
        for gen in getattr(n, "generators", []) if isinstance(n, (ast.ListComp, ast.GeneratorExp, ast.SetComp,
                                                                   ast.DictComp)) else []:  # fmt: skip
            pairs = [(gen.iter, gen.target)]
            if (isinstance(gen.iter, ast.Call) and isinstance(gen.iter.func, ast.Name) and gen.iter.func.id == "zip"
                    and isinstance(gen.target, ast.Tuple) and len(gen.target.elts) == len(gen.iter.args)):  # fmt: skip
                pairs = list(zip(gen.iter.args, gen.target.elts, strict=True))
            for src, tgt in pairs:
                if isinstance(tgt, ast.Name) and tgt.id == e.id:
                    is_range = isinstance(src, ast.Call) and isinstance(src.func, ast.Name) and src.func.id == "range"
                    root = src.value if isinstance(src, ast.Attribute) else None
                    return is_range or root is not None and bool(options.match(ast.unparse(root)))
        n = parent.get(n)
    return False


def operands(e: ast.expr) -> list[ast.Name]:
    """The bare names an arithmetic expression combines (not those inside its calls, attributes, subscripts)."""
    if isinstance(e, ast.BinOp):
        return operands(e.left) + operands(e.right)
    if isinstance(e, ast.UnaryOp):
        return operands(e.operand)
    return [e] if isinstance(e, ast.Name) else []


def unknown_before(name: ast.Name, info: Any) -> bool:
    """Nothing says what `name` holds here: its assignments above are all of unknown kind, or it is a parameter
    no call site or annotation has typed (`users ** 2` in a loss helper is no Python number for the `2`)."""
    before = [k for line, k in info.history.get(name.id, ()) if line < getattr(name, "lineno", 0)]
    if before:  # (nanochat's `smooth_train_loss = 0` in one branch, `= loop_state[...]` in the other: a number)
        return all(k is None for k in before)
    args = getattr(info.node, "args", None)
    if args is None or name.id in info.tensors or name.id in info.scalars or name.id in ("self", "cls"):
        return False
    defaults = dict(zip([a.arg for a in args.args][::-1], args.defaults[::-1], strict=False))
    if isinstance(defaults.get(name.id), ast.Constant) and defaults[name.id].value is not None:
        return False  # `beta=0.98`: a number unless a caller says otherwise
    return name.id in {a.arg for a in args.args}


def compare_kind(model: Any, e: ast.Compare, info: Any) -> str | None:
    """A comparison is a tensor when a side is. Identity and membership tests (`x is None`, `k in d`), a
    comparison with a string (spotlight's `self._loss == 'adaptive_hinge'`, whose `_loss` names an option, not
    a loss tensor) and with None (`if p.grad != None:` is Python's `True`, no element-wise test) read no values."""
    if all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in e.ops) or any(
            isinstance(x, ast.Constant) and (isinstance(x.value, str) or x.value is None)
            for x in [e.left, *e.comparators]):  # fmt: skip
        return "scalar"
    kinds = {model.kind(x, info) for x in [e.left, *e.comparators]}
    return "tensor" if "tensor" in kinds else ("scalar" if kinds == {"scalar"} else None)


def moved_instance(v: ast.expr) -> bool:
    """`PointPillars(nclasses=3).cuda()`, `Net(cfg).to(device)`: an instance of a class moved to the device, a
    module (data is moved by its tensors, not built by a class call and moved whole)."""
    if not (isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in ("cuda", "to")):
        return False
    made = v.func.value
    return isinstance(made, ast.Call) and dotted(made.func).rpartition(".")[2][:1].isupper()


def made_module(mi: Any, recv: ast.expr) -> bool:
    """`nn.MSELoss(reduction="mean")`, `torch.nn.Softmax(dim=1)`, a project's `FocalLoss()`: a module made in place
    (moving it copies no batch; the type model takes a name given one for a module)."""
    full = mi.call_name(recv) if isinstance(recv, ast.Call) else ""
    return full.endswith("Loss") or full.startswith("torch.nn.") and full.rpartition(".")[2][:1].isupper()


def module_instance(model: Any, name: str) -> bool:
    """`name` is assigned a `torch.nn` module or a `*Loss` (`crit = nn.CrossEntropyLoss()`), or a project class's
    instance moved to the device (`pointpillars = PointPillars(nclasses=3).cuda()`), once looked up."""
    cache = model.__dict__.setdefault("_instances", {})
    if name not in cache:  # (also `self.l_bce = nn.BCELoss()` ... `self.l_bce(pred, label)`: GANomaly)
        if (index := model.__dict__.get("_assigned")) is None:  # target -> values, built once per module
            index = model.__dict__["_assigned"] = {}
            for n in model.nodes:
                for t in n.targets if isinstance(n, ast.Assign) else ():
                    index.setdefault(dotted(t), []).append(n.value)
        cache[name] = any(made_module(model, v) or moved_instance(v) for v in index.get(name, ()))
    return cache[name]


def backed_up(model: Any, body: list[ast.AST]) -> set[tuple[int, str]]:
    """(id of the assignment, name) for each assignment that reaches a `name.backward()` (or the loss of
    `accelerator.backward(loss)`): what was assigned there is a tensor, whatever the type model made of its value
    (compound-word-transformer's `loss = (losses[0] + ... + losses[6]) / 7` of a model's tuple)."""
    out = set()
    for n in body:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward":
            name = dotted(n.args[0] if n.args else n.func.value)
            s = binding_before(model.parent, n, name)
            if name and s is not None:
                out.add((id(s), name))
    return out


def summed_loss(mi: Any, target: ast.expr, fn: ast.AST) -> bool:
    """`loss = loss_fn(pred, y)` with `loss_fn = nn.BCELoss(reduction="sum")` (MCAN), or `F.mse_loss(..., reduction=
    "sum")`: a sum over the samples, which backward over the sub-batches keeps a sum over the whole batch: nothing
    to divide by the accumulation steps."""
    name = dotted(target)
    values = [*assigned_values(name, walk_local(fn)), target] if name else [target]
    calls = [v for v in values if isinstance(v, ast.Call)]
    makers = [m for c in calls if dotted(c.func) for m in assigned_values(dotted(c.func), mi.nodes)]
    return any(isinstance(c, ast.Call) and any(
        k.arg == "reduction" and isinstance(k.value, ast.Constant) and k.value.value == "sum"
        or k.arg == "size_average" and isinstance(k.value, ast.Constant) and k.value.value is False
        for k in c.keywords) for v in calls + makers for c in ast.walk(v))  # fmt: skip


# A test of the device (`if args.cuda:`, `if n_gpus:`, `if torch.cuda.is_available():`) or of a distributed run
# chooses where the code runs, not whether the user opted into what it guards.
DEVICE_TEST = re.compile(r"device|cuda|gpu|mps|is_available|distributed", re.I)


def iterates_data(model: Any, it: ast.expr, loader_name: re.Pattern[str]) -> bool:
    """A loop over a loader (by its name), through `enumerate`/`zip`/`tqdm`, and a progress bar bound by `with
    tqdm(dataloader['train']) as td:` (MMSA)."""
    if isinstance(it, ast.Call) and model.call_name(it) in ("enumerate", "zip", "tqdm", "tqdm.tqdm"):
        return any(iterates_data(model, a, loader_name) for a in it.args)
    if isinstance(it, ast.Subscript):  # `dataloader['train']`
        return iterates_data(model, it.value, loader_name)
    bound = model.__dict__.setdefault("_with_bound", None)
    if bound is None:
        bound = model._with_bound = {dotted(w.optional_vars): w.context_expr for w in model.nodes
                                     if isinstance(w, ast.withitem) and w.optional_vars is not None}  # fmt: skip
    if isinstance(it, ast.Name) and isinstance(bound.get(it.id), ast.Call):
        return iterates_data(model, bound[it.id], loader_name)
    name = dotted(it)
    return bool(name) and bool(loader_name.search(name.split(".")[-1])) and "range" not in name


def progress_of_enumerate(model: Any, c: ast.Call) -> bool:
    """`tqdm(enumerate(zip(a_loader, b_loader)), total=n)`: a progress bar around an enumerate/zip."""
    return bool(c.args and model.call_name(c).split(".")[-1] in ("tqdm", "track")
                and isinstance(c.args[0], ast.Call) and model.call_name(c.args[0]) in ("enumerate", "zip"))  # fmt: skip


def read_back(model: Any, it: ast.expr, loop: ast.AST, info: Any) -> bool:
    """`d.items()` of a dict whose entries were all set to numbers above the loop (`loss_dict[key] = value.item()`
    by key, DBNet; one entry `loss_dict["loss_overall"] = float(losses)` beside the tensors is not, Moment-DETR)."""
    holder = it.func.value if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) else None
    return holder is not None and any(
        isinstance(n, ast.Assign) and n.lineno < loop.lineno and model.kind(n.value, info) == "scalar"
        and any(isinstance(t, ast.Subscript) and ast.unparse(t.value) == ast.unparse(holder)
                and not isinstance(t.slice, ast.Constant) for t in n.targets)
        for n in model.walk_local(info.node))  # fmt: skip


def numeric_default(model: Any, e: ast.Name, fn: ast.AST) -> bool:
    """`e`, compared in a test, is a parameter of `fn` whose default is a number or a bool (`def pi(self, z,
    std=0): if std > 0:`). Only in a comparison: as an operand (`mel_lens // r` with `r=1`) it would make
    arithmetic on an unknown value a Python number."""
    args, up = getattr(fn, "args", None), model.parent.get(e)
    tested = isinstance(up, (ast.Compare, ast.BoolOp)) or isinstance(up, ast.UnaryOp) and isinstance(up.op, ast.Not)
    if args is None or not (tested or isinstance(up, (ast.If, ast.While, ast.IfExp)) and up.test is e):
        return False  # (`if compute_pi:` with `compute_pi=True`, CURL's actor)
    default = param_defaults(fn).get(e.id)
    return isinstance(default, ast.Constant) and type(default.value) in (int, float, bool)


def counter_entry(fn: ast.AST, e: ast.Subscript) -> bool:
    """`state['step']` where the function sets `state['step'] = 0` and only ever adds numbers to it (a custom
    optimizer's step counter, RAdam's): a Python int, whatever the dict's other entries hold."""
    return _entries(fn, e) == {"number"}


def entry_kind(model: Any, e: ast.Subscript, info: Any) -> str | None:
    """`state['step']` where the function sets `state['step'] = torch.zeros((), device=d)` (PyTorch's own
    optimizers keep the step a tensor): a tensor, whatever its users' names say. And an entry set just above
    in the same or an enclosing block (`loss_dict[key] = value.item()` ... `'{:.4f}'.format(loss_dict[key])`,
    DBNet) has the kind of what was stored."""
    if "tensor" in _entries(info.node, e):
        return "tensor"
    text = ast.unparse(e)
    stmt = assignment_before(model.parent, e, lambda a: any(ast.unparse(t) == text for t in a.targets))
    return model.kind(stmt.value, info) if stmt is not None else None


TENSOR_MADE = re.compile(r"^torch\.(zeros|ones|full|empty|tensor|as_tensor)(_like)?$")


def _entries(fn: ast.AST, e: ast.Subscript) -> set[str]:
    """What the function assigns to the dict entry `e` (a string key): numbers, tensors made by a factory, other."""
    if not isinstance(e.slice, ast.Constant) or not isinstance(e.slice.value, str):
        return set()
    entries = getattr(fn, "_entries", None)
    if entries is None:
        entries = {}
        for n in ast.walk(fn):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign) else []
            for t in targets:
                if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant):
                    v = n.value  # type: ignore[attr-defined]
                    number = isinstance(v, ast.Constant) and type(v.value) in (int, float)
                    made = isinstance(v, ast.Call) and bool(TENSOR_MADE.match(dotted(v.func)))
                    entries.setdefault(ast.unparse(t), set()).add("number" if number else "tensor" if made else "other")
        fn._entries = entries  # type: ignore[attr-defined]
    return entries.get(ast.unparse(e), set())


def captured_kind(model: Any, name: str, info: Any) -> str | None:
    """A nested function's free variable (`def log_stats(): log(loss)`) has the kind the enclosing
    function gave it last before the `def`."""
    fn = info.node
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or name in {a.arg for a in fn.args.args}:
        return None
    outer = model.enclosing_function(fn)
    if outer is None or outer is fn or isinstance(outer, ast.Module):
        return None
    before = [k for line, k in model.info_of(outer).history.get(name, ()) if line < fn.lineno and k != "none"]
    return before[-1] if before else None


def builtin_kind(model: Any, e: ast.Call, info: Any) -> str | None:
    """Python's `max`/`min`/`abs`/`sum` give back what they are given: `max(new_max_grad, abs(new_min_grad))` of two
    tensors is a tensor (ENAS's gradient tracker), `max([g.max() for g in grads])` the largest tensor."""
    if e.keywords or not e.args or any(isinstance(a, ast.Starred) for a in e.args):
        return None
    if len(e.args) == 1 and dotted(e.func) != "abs":  # over an iterable: what it holds
        it = e.args[0]
        held = isinstance(it, ast.Name) and it.id in info.tensor_lists or tensor_values(model, it, info)
        numbers = isinstance(it, ast.Name) and it.id in info.scalars and it.id not in info.tensors  # `.item()`s
        return "tensor" if held else "scalar" if numbers else None
    kinds = {model.kind(a, info) for a in e.args}
    return "tensor" if "tensor" in kinds else ("scalar" if kinds == {"scalar"} else None)


# `loss, tb_dict, disp_dict = model_func(model, batch)`: the records a model call returns beside its tensors (whole
# words: `pred_disp`, a disparity map, is a tensor)
COUNTER = re.compile(r"(^|_)(steps?|epochs?|iters?|iterations?|count|num|idx|index)$", re.I)
RECORD = re.compile(r"(^|_)(dict|info|infos|stats|metrics|summary|logs?)$", re.I)


def _tuple_returns(model: Any, fn: ast.AST, depth: int = 2) -> list[tuple[ast.Tuple, ast.AST]] | None:
    """The tuples `fn` returns, each with the function that builds it, or None when one return is not a tuple;
    `return _batch_loss(...)` of a same-file helper is looked through (3DUnetCNN's `batch_loss`)."""
    out = []
    for n in model.walk_local(fn):
        if not isinstance(n, ast.Return):
            continue
        v = n.value
        if isinstance(v, ast.Tuple):
            out.append((v, fn))
            continue
        inner = model.functions.get(dotted(v.func).split(".")[-1]) if isinstance(v, ast.Call) else None
        sub = _tuple_returns(model, inner[-1], depth - 1) if inner and depth and inner[-1] is not fn else None
        if sub is None:
            return None
        out += sub
    return out


def unpacked(model: Any, target: ast.expr, value: ast.expr, info: Any = None) -> dict[str, str | None]:
    """`a, b = step(x)` or `(a, b), ms = timer(step)` with a same-file `step` that returns a tuple: each
    name takes the kind of its position (`return float(loss), grads` gives a number, then a tensor)."""
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        # `total_loss, total_num, bar = 0.0, 0, tqdm(loader)`, `loss, l1 = loss.item(), l1.item()` (dc-tts): each
        # name its own value
        pairs = [(t, v) for t, v in zip(target.elts, value.elts, strict=True) if isinstance(t, ast.Name)]
        if info is None:
            return {t.id: "scalar" for t, v in pairs if isinstance(v, ast.Constant)}
        return {t.id: model.kind(v, info) for t, v in pairs}
    if not isinstance(target, ast.Tuple) or not isinstance(value, ast.Call):
        return {}
    out: dict[str, str | None] = {}
    nested = [e for e in target.elts if isinstance(e, ast.Tuple)]
    for ref, subs in [(value.func, [target])] + [(a, nested) for a in value.args]:
        fns = model.functions.get(dotted(ref).split(".")[-1]) if isinstance(ref, (ast.Name, ast.Attribute)) else None
        rets = _tuple_returns(model, fns[-1]) if fns else None
        if not rets or not all(len(r.elts) == len(rets[0][0].elts) for r, _ in rets):
            continue
        callee = model.info_of(rets[0][1])
        for sub in subs:
            if len(sub.elts) == len(rets[0][0].elts):
                for t, v in zip(sub.elts, rets[0][0].elts, strict=True):
                    if isinstance(t, ast.Name):
                        out[t.id] = model.kind(v, callee)
    if not out and hasattr(model, "remote_positions"):  # a helper in another file: only the numbers it returns
        positions = model.remote_positions(value)
        if "scalar" in positions and len(positions) == len(target.elts):  # (the others: what the call is taken for)
            whole = model.kind(value, info) if info is not None else None
            # (not a counter named so: HunyuanDiT's `model, ema, epoch, epoch_step, train_steps = model_resume(...)`
            # gives no tensor step count, pSp's `loss_id, sim_improvement, id_logs = self.id_loss(...)` a tensor)
            out = {t.id: k or (None if RECORD.search(t.id) or whole == "tensor" and COUNTER.search(t.id) else whole)
                   for t, k in zip(target.elts, positions, strict=True) if isinstance(t, ast.Name)}  # fmt: skip
    return out


def passed_back(model: Any, value: ast.expr, info: Any) -> set[str]:
    """The tensor names a call is given (`random_crop(true_pha, true_fgr, true_bgr)`, `kornia.resize(img, s)`):
    assigned back to the same names, what the call returns is taken for the same tensors transformed."""
    if not isinstance(value, ast.Call) or isinstance(value.func, ast.Name) and value.func.id in SCALAR_BUILTINS:
        return set()
    args = [a.value if isinstance(a, ast.Starred) else a for a in value.args]
    return {a.id for a in args if isinstance(a, ast.Name) and model.kind(a, info) == "tensor"}


def tensor_values(model: Any, e: ast.expr, info: Any) -> bool:
    """`d.values()` of a dict of tensors, or a comprehension over one (the type model's question)."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in ("values", "items"):
        return model.kind(e.func.value, info) == "tensor"
    if isinstance(e, (ast.GeneratorExp, ast.ListComp)):
        bound = {n for g in e.generators for n in target_names(g.target)}
        if isinstance(e.elt, ast.Name) and e.elt.id in bound:  # `sum(v for v in d.values())`: what d holds
            return any(tensor_values(model, g.iter, info) or model.kind(g.iter, info) == "tensor"
                       for g in e.generators) or bool(model.comp_tensors(e, info) & {e.elt.id})  # fmt: skip
        return any(tensor_values(model, g.iter, info) for g in e.generators) or model.kind(
            e.elt, info, comp=e) == "tensor"  # fmt: skip
    return False


def flushed_epochs(mi: Any) -> set[ast.AST]:
    """Loops around a loop over the data that takes the optimizer steps, whose own step is a leftover flush
    (MMSA's `while True:` epochs with `if not left_epochs: optimizer.step()` after the batches): per epoch, not per
    step. Not a loader loop around micro-batch chunks (hysts' `zip(data_chunks, ...)`), nor an update loop around
    micro-batches that only run backward (HALOs' `for batch in accumulated_batches:`)."""
    out = set()
    for x in mi.hot_loops:
        if not (isinstance(x, (ast.For, ast.AsyncFor)) and mi._iterates_data(x.iter) and any(
                is_optimizer_step(n) or isinstance(n, ast.Call) and mi.local_target(n) in mi.step_functions
                for n in ast.walk(x))):  # fmt: skip  # (OLTR's `self.batch_backward()` steps)
            continue
        o = mi.enclosing_loop(x)
        if o is not None and not (isinstance(o, (ast.For, ast.AsyncFor)) and mi._iterates_data(o.iter)):
            out.add(o)
    return out


def callback_calls(model: Any, fn: ast.AST) -> list[ast.Call]:
    """Calls of `fn` through the parameter it is handed as: `fit_one_epoch(..., log=log_at_step)` whose
    `log(train_loss=train_loss.item())` runs it (doctr), so its parameters are what those calls pass."""
    handed = model.__dict__.get("_handed")
    if handed is None:  # function name -> (parameter, call handing it), found once per module
        handed = model.__dict__["_handed"] = {}
        for n in model.nodes:
            if isinstance(n, ast.keyword) and n.arg and isinstance(n.value, ast.Name):
                handed.setdefault(n.value.id, []).append((n.arg, model.parent.get(n)))
    out = []
    for param, call in handed.get(getattr(fn, "name", ""), []):
        for g in model.targets_of(call) if isinstance(call, ast.Call) else []:
            out += [c for c in walk_local(g) if isinstance(c, ast.Call) and dotted(c.func) == param]
    return out
