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
    is_optimizer_step,
    is_step_call,
    method_name,
    target_names,
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


def _src(node: ast.AST, limit: int = 60) -> str:
    """The offending expression as the user wrote it (shortened), for messages."""
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kw(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def _is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _is_false_node(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _is_false(kw: ast.keyword | None) -> bool:
    return kw is not None and _is_false_node(kw.value)


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
        return [h for h in self.hits if not (h.code in SYNC_RULES and (self.mi.has_sync_marker(h.node.lineno)
                                                                       or not self.mi.device_code))]  # fmt: skip

    def add(self, code: str, node: ast.AST, message: str, edit: Edit | None = None) -> None:
        self.hits.append(Hit(code, node, message, edit))

    def kind(self, e: ast.expr) -> str | None:
        return self.mi.kind(e, self.mi.function_info(e))

    def tensor(self, e: ast.expr) -> bool:
        return self.kind(e) == "tensor"

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
        mi, name, meth, raw = self.mi, self.mi.call_name(c), method_name(c), call_name(c)
        hot = mi.in_hot(c)
        base = name.split(".")[-1]
        if hot:
            if meth == "item" and not c.args and self.kind(c.func.value) != "scalar":  # type: ignore[attr-defined]
                self.add("HL001", c, f"`{_src(c)}` reads the tensor on the host every step")
            elif name in ("float", "int", "bool") and len(c.args) == 1 and self.tensor(c.args[0]):
                self.add("HL001", c, f"`{_src(c)}` reads a tensor on the host every step")
            if LOG_FUNCS.match(raw):
                shown = next((a for a in c.args if self.tensor(a)), None)
                if shown is not None:
                    self.add("HL002", c, f"`{raw}` formats the tensor `{_src(shown)}` on the host every step")
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
                and self._constant_list(c.args[0])
            ):  # fmt: skip
                self.add("HL024", c, "`torch.tensor(list, device=...)` builds and copies host data every step")
            if name == "torch.compile" and c.args and self._defined_in_loop(c.args[0], c):
                self.add("HL025", c, "a new function is compiled every iteration: torch.compile recompiles")
        if mi.in_training_loop(c):
            if name in ("torch.cuda.synchronize", "torch.cuda.empty_cache") and not self._deliberate(c):
                self.add("HL020", c, f"`{_src(c)}` inside the training loop")
            if name == "torch.save" and not self._replaced_atomically(c) and not self._fresh_path(c):
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
        nb = _kw(c, "non_blocking")
        if nb is not None and not (isinstance(nb.value, ast.Constant) and not nb.value.value):
            return
        if not self.tensor(recv) or self._cpu_branch(c):
            return
        end = c.end_col_offset or 0
        text = ast.get_source_segment("\n".join(self.mi.lines), c)
        edit = None
        if text is not None and text.endswith(")") and c.lineno == c.end_lineno:
            sep = ", " if (c.args or c.keywords) else ""
            edit = Edit(c.end_lineno, end - 1, c.end_lineno, end - 1, f"{sep}non_blocking=True")
        self.add("HL012", c, "host-to-device copy without `non_blocking=True` blocks the host", edit)

    def _deliberate(self, c: ast.Call) -> bool:
        """A timing barrier (a clock read within two lines) or behind a flag/gate: chosen, not an accident."""
        fn = self.mi.enclosing_function(c)
        if re.search(r"bench|profil", getattr(fn, "name", "") + " " + self.mi.path, re.I):
            return True  # a benchmark's barrier is its purpose (a training script timing each step is not)
        child, n = c, self.mi.parent.get(c)
        while n is not None and n is not fn:
            if isinstance(n, ast.If) and child is not n.test and not self.mi.is_update_gate(n):
                return True
            if isinstance(n, (ast.For, ast.While)) and n in self.mi.hot_loops:
                break
            child, n = n, self.mi.parent.get(n)
        return False

    def _cpu_branch(self, node: ast.AST) -> bool:
        """Under `if device_type == 'cuda': ... else:` (or `if device == 'cpu':`): not the CUDA path."""
        child, n = node, self.mi.parent.get(node)
        while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if isinstance(n, ast.If) and child is not n.test:
                test = ast.unparse(n.test)
                if "cuda" in test and child in n.orelse and "!=" not in test and "not " not in test:
                    return True
                if re.search(r"['\"](cpu|mps)['\"]", test) and child in n.body and "!=" not in test:
                    return True
            child, n = n, self.mi.parent.get(n)
        return False

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

    def _fresh_path(self, c: ast.Call) -> bool:
        """Saving to a buffer, or to a path named by the epoch/step (a new file each time) overwrites nothing."""
        if len(c.args) < 2:
            target = getattr(_kw(c, "f"), "value", None)
        else:
            target = c.args[1]
        if target is None:
            return False
        text = ast.unparse(target)
        if re.search(r"BytesIO|buffer|buf\b|\bio\b", text):
            return True
        fn = self.mi.enclosing_function(c)
        seen: set[str] = set()
        todo = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]  # `path = f"ckpt_{epoch}.pt"`, two deep
        for _ in range(2):
            found = []
            for name in set(todo) - seen:
                seen.add(name)
                values = [n.value for n in walk_local(fn) if isinstance(n, ast.Assign)
                          and any(name in target_names(t) for t in n.targets)]  # fmt: skip
                if len(values) == 1:
                    text += " " + ast.unparse(values[0])
                    found += [n.id for n in ast.walk(values[0]) if isinstance(n, ast.Name)]
            todo = found
        if re.search(r"BytesIO\(", text):
            return True
        formatted = re.findall(r"\{([^{}]*)\}|%\s*\(?([^)]*)\)?|format\(([^)]*)\)|str\(([^)]*)\)", text)
        varying = re.compile(r"\b(epoch|ep|step|steps|global_step|iteration|iter|it|i|n_iter|batch_idx|e)\b", re.I)
        return any(varying.search(" ".join(g)) for g in formatted)

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
        """Only loaders with worker processes: with `num_workers=0` the main thread loads and would pin
        (one more copy on the critical path), and there are no workers to keep alive."""
        kws = self._loader_kwargs(c)
        if kws is None or any(isinstance(a, ast.Starred) for a in c.args):
            return  # **kwargs we cannot see into: the options may be in there
        # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
        workers_value = kws.get("num_workers", c.args[5] if len(c.args) > 5 else None)
        if workers_value is None or isinstance(workers_value, ast.Constant) and not workers_value.value:
            return
        pinned = "pin_memory" in kws or len(c.args) > 7
        missing = []
        if self.mi.uses_cuda and not pinned:
            missing.append("`pin_memory=True` (CUDA code: copies from pageable memory are synchronous)")
        if "persistent_workers" not in kws and self._reiterated(c):
            missing.append("`persistent_workers=True` (workers are re-forked every epoch)")
        if missing:
            self.add("HL011", c, f"`DataLoader` with workers but without {' and '.join(missing)}")

    def _loader_kwargs(self, c: ast.Call) -> dict[str, ast.expr] | None:
        """The call's keywords, with `**kwargs` expanded when kwargs is a dict literal of the same function
        (`kwargs = {'num_workers': 1, 'pin_memory': True} if cuda else {}`: the union of the branches)."""
        out = {k.arg: k.value for k in c.keywords if k.arg}
        for k in c.keywords:
            if k.arg is not None:
                continue
            if not isinstance(k.value, ast.Name):
                return None
            fn = self.mi.enclosing_function(c)
            nodes = list(walk_local(fn)) + list(walk_local(self.mi.tree))
            values = [n.value for n in nodes if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
                      and any(k.value.id in target_names(t) for t in getattr(n, "targets", [getattr(n, "target", None)]))]  # fmt: skip
            for n in nodes:  # `kwargs.update(cuda_kwargs)`
                if isinstance(n, ast.Call) and method_name(n) == "update" and dotted(n.func.value) == k.value.id:  # type: ignore[attr-defined]
                    for a in n.args:
                        values += [a] if isinstance(a, ast.Dict) else [
                            m.value for m in nodes if isinstance(m, ast.Assign) and isinstance(a, ast.Name)
                            and any(a.id in target_names(t) for t in m.targets)]  # fmt: skip
            dicts = [d for v in values for d in ((v.body, v.orelse) if isinstance(v, ast.IfExp) else (v,))]
            if not dicts or not all(isinstance(d, ast.Dict) for d in dicts):
                return None
            for d in dicts:
                for key, val in zip(d.keys, d.values):  # type: ignore[attr-defined]
                    if not isinstance(key, ast.Constant):
                        return None
                    out.setdefault(key.value, val)
        return out

    def _reiterated(self, c: ast.Call) -> bool:
        """The loader is iterated more than once in its lifetime: used inside a loop (an epoch loop around
        it), or handed to code that loops epochs. A loader built inside a loop, or iterated once (a test
        set read at the end, an evaluation loader rebuilt per call), never re-forks."""
        if self.mi.enclosing_loop(c) is not None:
            return False  # built per epoch: persistent workers would not survive the loader anyway
        assign = self.mi.parent.get(c)
        names = {dotted(t) for t in assign.targets if dotted(t)} if isinstance(assign, ast.Assign) else set()
        if not names or any(n.startswith(("self.", "cls.")) for n in names):
            return True  # passed straight on or kept on an object: assume several epochs
        scope, used = self.mi.enclosing_function(c), False
        for u in walk_local(scope) if scope is not self.mi.tree else self.mi.nodes:
            if not (isinstance(u, (ast.Name, ast.Attribute)) and dotted(u) in names and isinstance(u.ctx, ast.Load)):
                continue
            used = True
            if self.mi.enclosing_function(u) is not scope:
                return True  # a global loader read by a function (an epoch function, called again and again)
            outer = self.mi.parent.get(u)
            while isinstance(outer, ast.Call) and self.mi.call_name(outer) in ("enumerate", "tqdm", "tqdm.tqdm"):
                outer = self.mi.parent.get(outer)
            if isinstance(outer, (ast.For, ast.AsyncFor)) and outer.iter is not None and u in ast.walk(outer.iter):
                if self.mi.enclosing_loop(outer) is not None:
                    return True
                continue
            if self.mi.enclosing_loop(u) is not None:
                return True  # used every epoch (`train(model, loader)` inside `for epoch ...`)
            call = self.mi.parent.get(u)
            if isinstance(call, ast.Call) and u in call.args and not self.mi.targets_of(call):
                if self.mi.call_name(call) not in ("len", "print", "iter", "next"):
                    return True  # an unknown consumer (a trainer's fit) may run epochs
        return not used  # never read here: exported to code we cannot see

    def branch(self, node: ast.AST) -> None:
        test = node.test  # type: ignore[attr-defined]
        if not self.mi.in_hot(test) or self.mi.has_sync_marker(node.lineno):
            return
        if self.kind(test) == "scalar":
            return
        if self.tensor(test) or any(
            isinstance(n, ast.Call) and self.mi.call_name(n) in ("torch.isnan", "torch.isinf", "torch.any", "torch.all")
            for n in ast.walk(test)
        ):
            kind = {ast.If: "if", ast.While: "while", ast.Assert: "assert", ast.IfExp: "conditional"}[type(node)]
            self.add("HL005", node, f"`{kind} {_src(test)}` reads a tensor on the host every step")

    def subscript(self, node: ast.Subscript) -> None:
        if not self.mi.in_hot(node) or isinstance(node.ctx, ast.Store):
            return  # `x[mask] = v` is a masked fill on the device: no size to read
        idx = node.slice
        if (
            isinstance(idx, ast.Compare)
            and self.tensor(idx)
            or (isinstance(idx, ast.Name) and idx.id in self._mask_names(node))
        ):
            self.add("HL006", node, "boolean-mask indexing has a data-dependent size: a sync every step")
        elif self._constant_list(idx) and self.tensor(node.value):
            self.add("HL024", node, f"`{_src(node)}`: indexing with a Python list copies it to the device every step")

    def _constant_list(self, e: ast.expr) -> bool:
        """A Python list the loop could build once: a literal of constants, `list(range(...))`, or a name
        bound only to such (per-step data built from lists cannot be hoisted and is not reported)."""
        def const(v: ast.expr) -> bool:
            if isinstance(v, (ast.List, ast.Tuple)):
                return bool(v.elts) and all(isinstance(x, ast.Constant) or isinstance(x, ast.UnaryOp)
                                            and isinstance(x.operand, ast.Constant) for x in v.elts)  # fmt: skip
            return isinstance(v, ast.Call) and self.mi.call_name(v) == "list" and bool(v.args) and isinstance(
                v.args[0], ast.Call) and self.mi.call_name(v.args[0]) == "range"  # fmt: skip
        if isinstance(e, ast.Name):
            fn = self.mi.enclosing_function(e)
            values = [n.value for n in list(walk_local(fn)) + list(walk_local(self.mi.tree)) if isinstance(n, ast.Assign)
                      and any(e.id in target_names(t) for t in n.targets)]  # fmt: skip
            return bool(values) and all(const(v) for v in values)
        return const(e)

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
        """An evaluation loop (a `val*`/`eval*`/`test*` function, or any function run with `train=False`)
        that misses no_grad or model.eval(), unless every same-file caller provides it."""
        flag = next((a.arg for a in fn.args.args if a.arg in ("train", "training", "is_train", "is_training")),
                    None)  # fmt: skip
        if not re.match(r"^(val|eval|test)", fn.name, re.I) and flag is None:
            return
        loops = [n for n in walk_local(fn) if isinstance(n, (ast.For, ast.While))]
        def runs_model(node: ast.AST, depth: int = 0) -> bool:
            return any(isinstance(n, ast.Call) and (MODEL_NAME.search(call_name(n).split(".")[-1] or "-")
                       or depth < 2 and any(runs_model(f, depth + 1) for f in self.mi.targets_of(n) if f is not fn))
                       for n in walk_local(node))  # fmt: skip

        calls_model = any(runs_model(loop) for loop in loops)
        if not loops or not calls_model:
            return
        calls = self.mi.calls_to.get(fn.name, [])
        if flag is not None:  # a shared train/eval loop: only its train=False calls evaluate
            idx = [a.arg for a in fn.args.args].index(flag) - (1 if fn.args.args[0].arg in ("self", "cls") else 0)
            calls = [c for c in calls if _is_false(_kw(c, flag)) or len(c.args) > idx >= 0 and
                     isinstance(c.args[idx], ast.Constant) and c.args[idx].value is False]  # fmt: skip
            if not calls:
                return
        elif any(is_step_call(n) for n in walk_local(fn)):
            return
        src = ast.unparse(fn)
        if not re.search(r"no_grad|inference_mode|set_grad_enabled", src) and not (
            calls and all(self._caller_has(c, "grad") for c in calls)
        ):
            self.add("HL018", fn, f"`{fn.name}` runs the model without `torch.no_grad()`: activations are kept")
        if not re.search(r"\.eval\(\)|\.train\(False\)|\.train\(mode=False\)", src) and not (
            calls and all(self._caller_has(c, "eval") for c in calls)
        ):
            what = f"`{fn.name}(..., {flag}=False)`" if flag else f"`{fn.name}`"
            self.add("HL018", fn, f"{what} runs the model without `model.eval()`: dropout/batch norm train")

    def _caller_has(self, call: ast.Call, what: str) -> bool:
        """The caller switched to eval mode before the call, or runs it under no_grad."""
        caller = self.mi.enclosing_function(call)
        if what == "eval":
            return any(isinstance(n, ast.Call) and (method_name(n) == "eval" or method_name(n) == "train"
                                                    and n.args and _is_false_node(n.args[0]))
                       and n.lineno <= call.lineno for n in walk_local(caller))  # fmt: skip
        if isinstance(caller, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            re.search(r"no_grad|inference_mode", ast.unparse(d)) for d in caller.decorator_list
        ):
            return True
        n = self.mi.parent.get(call)
        while n is not None and n is not caller:
            if isinstance(n, ast.With) and any(re.search(r"no_grad|inference_mode", ast.unparse(i.context_expr))
                                               for i in n.items):  # fmt: skip
                return True
            n = self.mi.parent.get(n)
        return False

    def clip_order(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Branch-aware: a clip in the `else:` of `if use_amp: scaler.scale(loss).backward()` never saw the
        scaler; the state that reaches a clip is the last scale/unscale on a path that can lead to it."""
        events = []
        for n in walk_local(fn):
            if isinstance(n, ast.Call):
                meth = method_name(n)
                if meth == "backward" and isinstance(n.func.value, ast.Call) and method_name(n.func.value) == "scale":  # type: ignore[attr-defined]
                    events.append((n.lineno, n.col_offset, "scaled", n))
                elif meth == "unscale_":
                    events.append((n.lineno, n.col_offset, "unscale", n))
                elif self.mi.call_name(n).split(".")[-1] in ("clip_grad_norm_", "clip_grad_value_"):
                    events.append((n.lineno, n.col_offset, "clip", n))
        events.sort(key=lambda e: (e[0], e[1]))
        for i, ev in enumerate(events):
            if ev[2] != "clip":
                continue
            state = next((p[2] for p in reversed(events[:i]) if p[2] != "clip" and not self._exclusive(p[3], ev[3])),
                         None)  # fmt: skip
            if state == "scaled":
                self.add("HL017", ev[3], f"`{_src(ev[3])}` clips scaled gradients: call `scaler.unscale_(optimizer)` "
                                         "first")  # fmt: skip

    def _exclusive(self, a: ast.AST, b: ast.AST) -> bool:
        """a and b sit in different branches of one `if`: no single pass runs both."""
        def branches(n: ast.AST) -> dict[ast.AST, str]:
            out, child, p = {}, n, self.mi.parent.get(n)
            while p is not None:
                if isinstance(p, ast.If):
                    out[p] = "body" if child in p.body else ("orelse" if child in p.orelse else "test")
                child, p = p, self.mi.parent.get(p)
            return out
        ba, bb = branches(a), branches(b)
        return any(k in bb and {ba[k], bb[k]} == {"body", "orelse"} for k in ba)

    def accumulation(self, loop: ast.AST) -> None:
        """Several backward passes per optimizer step: an update gate (`if (i + 1) % accum == 0:`, or a flag
        computed with `%`) around the step, backward under `no_sync`/`no_backward_sync`, or a micro-step
        `for _ in range(n)` loop whose optimizer step is outside it. Accelerate's `accumulate` context
        divides inside `accelerator.backward`, so it is never reported."""
        fn = self.mi.enclosing_function(loop)
        body = list(walk_local(fn))
        if any(isinstance(n, ast.Call) and method_name(n) == "accumulate" for n in body):
            return
        mod_names = {name for n in body if isinstance(n, ast.Assign)
                     and any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod) for b in ast.walk(n.value))
                     for t in n.targets for name in target_names(t)}  # fmt: skip
        accumulating = False
        for n in walk_local(loop):
            if isinstance(n, ast.If) and any(is_optimizer_step(x) for s in n.body + n.orelse for x in ast.walk(s)):
                test = n.test
                if any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod) for b in ast.walk(test)) or any(
                    isinstance(x, ast.Name) and (x.id in mod_names or re.search("accum", x.id, re.I))
                    for x in ast.walk(test)
                ):  # fmt: skip
                    accumulating = True
            elif isinstance(n, ast.With) and any(re.search(r"no_sync|no_backward_sync", ast.unparse(i.context_expr))
                                                 for i in n.items):  # fmt: skip
                accumulating = True
        if (not accumulating and isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)
                and call_name(loop.iter) == "range"
                and not any(is_optimizer_step(x) for x in walk_local(loop))):  # fmt: skip
            outer = self.mi.parent.get(loop)
            while outer is not None and outer is not fn:
                if isinstance(outer, (ast.For, ast.While)) and any(is_optimizer_step(x) for x in walk_local(outer)):
                    accumulating = True
                    break
                outer = self.mi.parent.get(outer)
        if not accumulating:
            return
        for n in walk_local(loop):
            if isinstance(n, ast.Call) and method_name(n) == "backward" and not self.mi._gated(n, loop):
                target = n.func.value  # type: ignore[attr-defined]
                if n.args and not self.tensor(target):
                    target = n.args[0]  # accelerator.backward(loss), fabric.backward(loss)
                if isinstance(target, ast.Call) and method_name(target) == "scale" and target.args:
                    target = target.args[0]
                if not self._divided(target, fn):
                    self.add("HL016", n, f"`{_src(target)}` is accumulated without dividing by the accumulation steps")

    def _divided(self, e: ast.expr, fn: ast.AST, depth: int = 0) -> bool:
        """Divided (or scaled) where it is made: inline, by an assignment in the function, or in the return
        of the same-file function that computes it."""
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Div, ast.Mult)):
            return True
        if isinstance(e, ast.IfExp):  # `loss / n if n > 1 else loss`
            return self._divided(e.body, fn, depth) or self._divided(e.orelse, fn, depth)
        if isinstance(e, ast.Call):
            return any(isinstance(r, ast.Return) and r.value is not None and self._divided(r.value, f)
                       for f in self.mi.targets_of(e) for r in walk_local(f))  # fmt: skip
        if isinstance(e, (ast.Name, ast.Attribute)):
            key = dotted(e)
            for n in walk_local(fn):
                if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    if any(dotted(t) == key or key in target_names(t) for t in targets):
                        if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult)):
                            return True
                        value = n.value.operand if isinstance(n.value, ast.UnaryOp) else n.value
                        if not isinstance(n, ast.AugAssign) and (
                            any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Div) for b in ast.walk(value))
                            or isinstance(value, ast.Call) and self._divided(value, fn, depth)
                            or isinstance(value, (ast.Name, ast.Attribute)) and dotted(value) != key and depth < 3
                            and self._divided(value, fn, depth + 1)  # `loss = -pg_obj` after `pg_obj /= n`
                        ):  # fmt: skip
                            return True
        return False

    def inference_mode(self, node: ast.With) -> None:
        if not any(self.mi.call_name(i.context_expr) == "torch.inference_mode" for i in node.items
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
                shuffle = _kw(n, "shuffle")
                if shuffle is not None and isinstance(shuffle.value, ast.Constant) and not shuffle.value.value:
                    continue  # an evaluation sampler: no order to vary
                parent = self.mi.parent.get(n)
                where = " ".join(dotted(t) for t in getattr(parent, "targets", [])) + " " + " ".join(
                    k.arg or "" for k in getattr(parent, "keywords", []) if k.value is n)
                if re.search(r"val|test|eval", where, re.I):
                    continue
                self.add("HL015", n, f"`{_src(n)}` without `set_epoch(epoch)`: every epoch repeats the order")


TORCH_CODE = re.compile(r"^\s*(import|from)\s+(torch|lightning|pytorch_lightning|accelerate|transformers)\b", re.M)


def check(mi: ModuleInfo) -> Iterator[Hit]:
    """All rules, for modules that use PyTorch (the rules mean nothing elsewhere: a `test_*` function
    looping over strings is not an evaluation loop)."""
    if not TORCH_CODE.search(mi.source):
        return
    yield from Checker(mi).run()
