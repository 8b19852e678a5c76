"""The checks: one pass over a module's AST, each node offered to the rules that care about its type.

Each finding carries an optional `Edit` (for `--fix`): a source span and its replacement.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from hotloop.lint.analysis import (
    MODEL_NAME,
    ModuleInfo,
    call_name,
    dotted,
    is_step_call,
    method_name,
    walk_local,
)

SYNC_RULES = {"HL001", "HL002", "HL005", "HL006", "HL007", "HL022", "HL023"}
PER_BATCH_SCHED = ("OneCycleLR", "CyclicLR")
PER_EPOCH_SCHED = ("StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "ReduceLROnPlateau")
LOG_FUNCS = re.compile(r"^(print|log|logging\.\w+|logger\.\w+|log\.\w+|\w*logger\.(info|debug|warning|error))$")


@dataclass
class Edit:
    line: int
    col: int
    end_line: int
    end_col: int
    text: str


@dataclass
class Hit:
    code: str
    node: ast.AST
    message: str
    edit: Edit | None = None


def _span(node: ast.AST, text: str) -> Edit:
    return Edit(node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0, text)


def _kw(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def _is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


class Checker:
    def __init__(self, mi: ModuleInfo) -> None:
        self.mi = mi
        self.hits: list[Hit] = []

    def run(self) -> list[Hit]:
        src = self.mi.source
        clip = "clip_grad" in src
        for node in self.mi.nodes:
            if isinstance(node, ast.Call):
                self.call(node)
            elif isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)):
                self.branch(node)
            elif isinstance(node, ast.Subscript):
                self.subscript(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                self.closure(node)
                if not isinstance(node, ast.Lambda):
                    self.evaluation(node)
                    if clip:
                        self.clip_order(node)
            elif isinstance(node, (ast.For, ast.While)) and node in self.mi.hot_loops:
                self.accumulation(node)
            elif isinstance(node, ast.With) and "inference_mode" in src:
                self.inference_mode(node)
            elif isinstance(node, ast.JoinedStr):
                self.fstring(node)
        if "LR" in src or "lr_scheduler" in src:
            self.schedulers()
        if "DistributedSampler" in src:
            self.samplers()
        return [h for h in self.hits if not (h.code in SYNC_RULES and self.mi.has_sync_marker(h.node.lineno))]

    def add(self, code: str, node: ast.AST, message: str, edit: Edit | None = None) -> None:
        self.hits.append(Hit(code, node, message, edit))

    def tensor(self, e: ast.expr) -> bool:
        return self.mi.kind(e, self.mi.function_info(e)) == "tensor"

    def tensorish_iterable(self, e: ast.expr) -> bool:
        if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
            return bool(e.elts) and any(self.tensor(x) for x in e.elts)
        if isinstance(e, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self.mi.kind(e.elt, self.mi.function_info(e), comp=e) == "tensor"
        if isinstance(e, ast.Name):
            return e.id in self.mi.function_info(e).tensor_lists
        return False

    # -- calls ----------------------------------------------------------------------------------

    def call(self, c: ast.Call) -> None:
        mi, name, meth = self.mi, call_name(c), method_name(c)
        hot = mi.in_hot(c)
        base = name.split(".")[-1]
        if hot:
            if meth == "item" and not c.args:
                self.add("HL001", c, "`.item()` reads the tensor on the host every step")
            elif name in ("float", "int", "bool") and len(c.args) == 1 and self.tensor(c.args[0]):
                self.add("HL001", c, f"`{name}()` of a tensor reads it on the host every step")
            if LOG_FUNCS.match(name) and any(self.tensor(a) for a in c.args):
                self.add("HL002", c, f"`{name}` of a tensor formats it on the host every step")
            if name in ("torch.nonzero", "torch.masked_select", "torch.unique", "torch.argwhere") or (
                meth in ("nonzero", "masked_select", "unique") and isinstance(c.func, ast.Attribute)
                and self.tensor(c.func.value)
            ):  # fmt: skip
                self.add("HL006", c, f"`{meth or name}` has a data-dependent size: a sync every step")
            if meth in ("cpu", "numpy", "tolist") and isinstance(c.func, ast.Attribute) and not c.args:
                recv = dotted(c.func.value)
                if not (recv and MODEL_NAME.search(recv.split(".")[-1])):
                    self.add("HL007", c, f"`.{meth}()` copies to the host and waits, every step")
            if meth in ("to", "cuda") and isinstance(c.func, ast.Attribute):
                self.transfer(c)
            if meth == "repeat_interleave" or name == "torch.repeat_interleave":
                repeats = c.args[1] if name == "torch.repeat_interleave" and len(c.args) > 1 else (
                    c.args[0] if meth == "repeat_interleave" and name != "torch.repeat_interleave" and c.args else None
                )  # fmt: skip
                if _kw(c, "output_size") is None and not (isinstance(repeats, ast.Constant)):
                    self.add("HL022", c, "`repeat_interleave` with tensor repeats and no `output_size`: a sync")
            if name == "torch.where" and len(c.args) == 1 and not c.keywords:
                self.add("HL022", c, "one-argument `torch.where` has a data-dependent size: a sync")
            if base in ("clip_grad_norm_", "clip_grad_norm") and _is_true(
                getattr(_kw(c, "error_if_nonfinite"), "value", None)
            ):
                self.add("HL023", c, "`error_if_nonfinite=True` reads the norm on the host every step")
            if (
                name == "torch.tensor"
                and _kw(c, "device") is not None
                and c.args
                and not self.tensorish_iterable(c.args[0])
            ):
                self.add("HL024", c, "`torch.tensor(list, device=...)` builds and copies host data every step")
            if name == "torch.compile" and c.args and self._defined_in_loop(c.args[0], c):
                self.add("HL025", c, "a new function is compiled every iteration: torch.compile recompiles")
        if mi.in_training_loop(c):
            if name in ("torch.cuda.synchronize", "torch.cuda.empty_cache"):
                self.add("HL020", c, f"`{name}()` inside the training loop")
            if name == "torch.save" and not self._replaced_atomically(c):
                self.add("HL021", c, "`torch.save` to the final path: a crash mid-write corrupts the checkpoint")
            if meth == "append" and c.args and mi.in_hot(c):
                arg = c.args[0]
                if isinstance(arg, (ast.Name, ast.Attribute, ast.Subscript)) and self.tensor(arg):
                    self.add("HL019", c, "appending a tensor without `.detach()` keeps its autograd graph alive")
        if name in ("torch.tensor", "torch.as_tensor") and c.args and self.tensorish_iterable(c.args[0]):
            edit = None
            if name == "torch.tensor" and not c.keywords and len(c.args) == 1:
                arg = c.args[0]
                inner = ast.unparse(arg)
                if isinstance(arg, ast.GeneratorExp):
                    inner = f"[{inner[1:-1] if inner.startswith('(') else inner}]"
                edit = _span(c, f"torch.stack({inner})")
            self.add("HL003", c, f"`{name}` over tensors reads each on the host; use `torch.stack`", edit)
        if name in ("max", "min", "sum", "sorted"):
            if (len(c.args) == 1 and self.tensorish_iterable(c.args[0])) or (
                len(c.args) > 1 and all(self.tensor(a) for a in c.args)
            ):
                better = "torch.sort(torch.stack(...))" if name == "sorted" else f"torch.stack(...).{name}()"
                self.add("HL004", c, f"Python `{name}` over tensors compares/adds on the host; use `{better}`")
        if name in ("torch._foreach_norm",) and c.args and not self._float32_guard(c):
            self.add("HL009", c, "`torch._foreach_norm` accumulates in the input dtype: guard it to float32")
        if base == "DataLoader":
            self.dataloader(c)
        if meth == "zero_grad":
            kw = _kw(c, "set_to_none")
            if kw is not None and isinstance(kw.value, ast.Constant) and kw.value.value is False:
                self.add("HL013", c, "`set_to_none=False` writes zeros into every gradient",
                         self._drop_kw(c, "set_to_none"))  # fmt: skip

    def transfer(self, c: ast.Call) -> None:
        recv = c.func.value  # type: ignore[attr-defined]
        rname = dotted(recv)
        if rname and MODEL_NAME.search(rname.split(".")[-1]):
            return
        if c.func.attr == "to":  # type: ignore[attr-defined]
            if not c.args and _kw(c, "device") is None:
                return
            target = c.args[0] if c.args else _kw(c, "device").value  # type: ignore[union-attr]
            if (
                isinstance(target, ast.Attribute)
                and dotted(target).startswith("torch.")
                and "device" not in dotted(target)
            ):
                return  # .to(torch.float16): a dtype cast
            if isinstance(target, ast.Constant) and target.value == "cpu":
                return
        if _is_true(getattr(_kw(c, "non_blocking"), "value", None)):
            return
        if not self.tensor(recv):
            return
        end = c.end_col_offset or 0
        text = ast.get_source_segment("\n".join(self.mi.lines), c)
        edit = None
        if text is not None and text.endswith(")") and c.lineno == c.end_lineno:
            sep = ", " if (c.args or c.keywords) else ""
            edit = Edit(c.end_lineno, end - 1, c.end_lineno, end - 1, f"{sep}non_blocking=True")
        self.add("HL012", c, "host-to-device copy without `non_blocking=True` blocks the host", edit)

    def _drop_kw(self, c: ast.Call, name: str) -> Edit | None:
        if c.lineno != c.end_lineno or len(c.args) + len(c.keywords) != 1:
            return None  # only the lone keyword on one line is a mechanical fix
        return Edit(c.lineno, c.func.end_col_offset or 0, c.end_lineno or c.lineno, c.end_col_offset or 0, "()")

    def _defined_in_loop(self, arg: ast.expr, at: ast.AST) -> bool:
        if isinstance(arg, ast.Lambda):
            return True
        loop = self.mi.enclosing_loop(at)
        if isinstance(arg, ast.Name) and loop is not None:
            return any(
                isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == arg.id
                or isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda)
                and any(isinstance(t, ast.Name) and t.id == arg.id for t in n.targets)
                for n in walk_local(loop)
            )  # fmt: skip
        return False

    def _replaced_atomically(self, c: ast.Call) -> bool:
        fn = self.mi.enclosing_function(c)
        target = ast.unparse(c.args[1]) if len(c.args) > 1 else ""
        if re.search(r"tmp|temp|partial", target, re.I):
            return True
        return any(
            isinstance(n, ast.Call) and call_name(n).split(".")[-1] in ("replace", "rename") and "os" in call_name(n)
            for n in walk_local(fn)
        )

    def _float32_guard(self, c: ast.Call) -> bool:
        if re.search(r"\.float\(\)|float32", ast.unparse(c.args[0])):
            return True
        n = self.mi.parent.get(c)
        while n is not None and not isinstance(n, ast.Module):
            if isinstance(n, (ast.If, ast.Assert)) and "float32" in ast.unparse(n.test):
                return True
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return any(
                    isinstance(s, (ast.If, ast.Assert)) and "float32" in ast.unparse(s.test) for s in walk_local(n)
                )
            n = self.mi.parent.get(n)
        return False

    def dataloader(self, c: ast.Call) -> None:
        if any(k.arg is None for k in c.keywords):
            return  # **kwargs: the options may be in there
        workers = _kw(c, "num_workers")
        has_workers = workers is not None and not (isinstance(workers.value, ast.Constant) and workers.value.value == 0)
        if self.mi.uses_cuda and _kw(c, "pin_memory") is None:
            self.add("HL011", c, "`DataLoader` in CUDA code without `pin_memory=True`: every copy is synchronous")
        elif has_workers and _kw(c, "persistent_workers") is None:
            self.add("HL011", c, "`DataLoader` with workers but without `persistent_workers=True`")

    # -- other node types -----------------------------------------------------------------------

    def branch(self, node: ast.AST) -> None:
        test = node.test  # type: ignore[attr-defined]
        if not self.mi.in_hot(test) or self.mi.has_sync_marker(node.lineno):
            return
        if self.tensor(test) or any(
            isinstance(n, ast.Call) and call_name(n) in ("torch.isnan", "torch.isinf", "torch.any", "torch.all")
            for n in ast.walk(test)
        ):
            kind = {ast.If: "if", ast.While: "while", ast.Assert: "assert", ast.IfExp: "conditional"}[type(node)]
            self.add("HL005", node, f"`{kind}` on a tensor reads it on the host every step")

    def subscript(self, node: ast.Subscript) -> None:
        if not self.mi.in_hot(node):
            return
        idx = node.slice
        if (
            isinstance(idx, ast.Compare)
            and self.tensor(idx)
            or (isinstance(idx, ast.Name) and idx.id in self._mask_names(node))
        ):
            self.add("HL006", node, "boolean-mask indexing has a data-dependent size: a sync every step")
        elif isinstance(idx, ast.List) and self.tensor(node.value):
            self.add("HL024", node, "indexing with a Python list copies it to the device every step")

    def _mask_names(self, node: ast.AST) -> set[str]:
        fn = self.mi.enclosing_function(node)
        out = set()
        for n in walk_local(fn):
            if isinstance(n, ast.Assign) and (
                isinstance(n.value, ast.Compare) and self.tensor(n.value)
                or isinstance(n.value, ast.Call) and method_name(n.value) == "bool"
            ):  # fmt: skip
                out |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        return out

    def fstring(self, node: ast.JoinedStr) -> None:
        if not self.mi.in_hot(node):
            return
        parent = self.mi.parent.get(node)
        if isinstance(parent, ast.Call) and LOG_FUNCS.match(call_name(parent)):
            if any(self.tensor(a) for a in parent.args):
                return  # already reported as HL002 on the call
        for v in node.values:
            if isinstance(v, ast.FormattedValue) and self.tensor(v.value):
                self.add("HL002", node, "f-string formats a tensor (a host read) every step")
                return

    def closure(self, fn: ast.AST) -> None:
        loop = self.mi.enclosing_loop(fn)
        if loop is None or loop not in self.mi.hot_loops or not self.mi.in_hot(fn):
            return
        assigned = set()
        for n in walk_local(loop):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                assigned.add(n.id)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assigned.discard(fn.name)
        params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}  # type: ignore[attr-defined]
        used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - params
        if not (used & assigned):
            what = "lambda" if isinstance(fn, ast.Lambda) else f"function `{fn.name}`"  # type: ignore[attr-defined]
            self.add("HL008", fn, f"{what} is re-created every iteration but captures nothing that changes")

    def evaluation(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if not re.match(r"^(val|eval|test)", fn.name, re.I):
            return
        loops = [n for n in walk_local(fn) if isinstance(n, (ast.For, ast.While))]
        calls_model = any(
            isinstance(n, ast.Call) and MODEL_NAME.search(call_name(n).split(".")[-1] or "-")
            for loop in loops for n in walk_local(loop)
        )  # fmt: skip
        if not loops or not calls_model or any(is_step_call(n) for n in walk_local(fn)):
            return
        src = ast.unparse(fn)
        if not re.search(r"no_grad|inference_mode", src):
            self.add("HL018", fn, f"`{fn.name}` runs the model without `torch.no_grad()`: activations are kept")
        if ".eval()" not in src:
            self.add("HL018", fn, f"`{fn.name}` runs the model without `model.eval()`: dropout/batch norm train")

    def clip_order(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        events = []
        for n in walk_local(fn):
            if isinstance(n, ast.Call):
                name, meth = call_name(n), method_name(n)
                if meth == "backward" and isinstance(n.func.value, ast.Call) and method_name(n.func.value) == "scale":  # type: ignore[attr-defined]
                    events.append((n.lineno, n.col_offset, "scaled"))
                elif meth == "unscale_":
                    events.append((n.lineno, n.col_offset, "unscale"))
                elif name.split(".")[-1] in ("clip_grad_norm_", "clip_grad_value_"):
                    events.append((n.lineno, n.col_offset, "clip", n))
        state = None
        for ev in sorted(events, key=lambda e: (e[0], e[1])):
            if ev[2] in ("scaled", "unscale"):
                state = ev[2]
            elif state == "scaled":
                self.add("HL017", ev[3], "clipping scaled gradients: call `scaler.unscale_(optimizer)` first")

    def accumulation(self, loop: ast.AST) -> None:
        gated_step = False
        for n in walk_local(loop):
            if isinstance(n, ast.If) and any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod)
                                             for b in ast.walk(n.test)):  # fmt: skip
                if any(is_step_call(s) and method_name(s) == "step" for s in ast.walk(n)):
                    gated_step = True
        if not gated_step:
            return
        for n in walk_local(loop):
            if isinstance(n, ast.Call) and method_name(n) == "backward" and not self.mi._gated(n, loop):
                target = n.func.value  # type: ignore[attr-defined]
                if isinstance(target, ast.Call) and method_name(target) == "scale" and target.args:
                    target = target.args[0]
                if not self._divided(target, loop):
                    self.add("HL016", n, "accumulated loss is not divided by the number of accumulation steps")

    def _divided(self, e: ast.expr, loop: ast.AST) -> bool:
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Div, ast.Mult)):
            return True
        if isinstance(e, ast.Name):
            for n in walk_local(loop):
                if isinstance(n, (ast.Assign, ast.AugAssign)):
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    if any(isinstance(t, ast.Name) and t.id == e.id for t in targets):
                        if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult)):
                            return True
                        if isinstance(n, ast.Assign) and any(
                            isinstance(b, ast.BinOp) and isinstance(b.op, ast.Div) for b in ast.walk(n.value)
                        ):
                            return True
        return False

    def inference_mode(self, node: ast.With) -> None:
        if not any(call_name(i.context_expr) == "torch.inference_mode" for i in node.items
                   if isinstance(i.context_expr, ast.Call)):  # fmt: skip
            return
        produced = {t.id for n in node.body for n2 in ast.walk(n) if isinstance(n2, ast.Assign)
                    for t in n2.targets if isinstance(t, ast.Name)}  # fmt: skip
        fn = self.mi.enclosing_function(node)
        for n in walk_local(fn):
            if not hasattr(n, "lineno") or n.lineno <= (node.end_lineno or node.lineno):
                continue
            if isinstance(n, ast.BinOp):
                names = {x.id for x in (n.left, n.right) if isinstance(x, ast.Name)}
                other = [x for x in (n.left, n.right) if not (isinstance(x, ast.Name) and x.id in produced)]
                if names & produced and any(
                    isinstance(o, ast.Attribute) or isinstance(o, ast.Name) and re.search(r"temp|tau|^t$|^T$", o.id)
                    for o in other
                ):  # fmt: skip
                    self.add("HL010", node, "`inference_mode` output meets a trainable parameter later; use no_grad")
                    return

    def schedulers(self) -> None:
        kinds: dict[str, str] = {}
        for n in self.mi.nodes:
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                base = call_name(n.value).split(".")[-1]
                kind = None
                if base in PER_BATCH_SCHED or base == "LambdaLR" and "warmup" in ast.unparse(n.value).lower():
                    kind = "batch"
                elif base in PER_EPOCH_SCHED:
                    t_max = _kw(n.value, "T_max") or (n.value.args[1] if len(n.value.args) > 1 else None)
                    src = ast.unparse(t_max.value if isinstance(t_max, ast.keyword) else t_max) if t_max else ""
                    per_step = base == "CosineAnnealingLR" and re.search(r"step|iter|len\(|batch", src)
                    kind = None if per_step else "epoch"
                if kind:
                    for t in n.targets:
                        if dotted(t):
                            kinds[dotted(t)] = kind
        for n in self.mi.nodes:
            if isinstance(n, ast.Call) and method_name(n) == "step" and dotted(n.func.value) in kinds:  # type: ignore[attr-defined]
                kind = kinds[dotted(n.func.value)]  # type: ignore[attr-defined]
                hot = self.mi.in_hot(n)
                if kind == "batch" and not hot and self.mi.in_training_loop(n):
                    self.add("HL014", n, "a per-batch scheduler stepped once per epoch: step it after every batch")
                elif kind == "epoch" and hot:
                    self.add("HL014", n, "a per-epoch scheduler stepped every batch: step it once per epoch")

    def samplers(self) -> None:
        if "set_epoch(" in self.mi.source:
            return
        for n in self.mi.nodes:
            if isinstance(n, ast.Call) and call_name(n).split(".")[-1] == "DistributedSampler":
                self.add("HL015", n, "`DistributedSampler` without `set_epoch(epoch)`: every epoch repeats the order")


TORCH_CODE = re.compile(r"^\s*(import|from)\s+(torch|lightning|pytorch_lightning|accelerate|transformers)\b", re.M)


def check(mi: ModuleInfo) -> Iterator[Hit]:
    """All rules, for modules that use PyTorch (the rules mean nothing elsewhere: a `test_*` function
    looping over strings is not an evaluation loop)."""
    if not TORCH_CODE.search(mi.source):
        return
    yield from Checker(mi).run()
