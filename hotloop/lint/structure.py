"""The structural rules: how a training script is put together, beyond single expressions.

HL011 (DataLoader options), HL014 (scheduler cadence), HL015 (DistributedSampler.set_epoch), HL016
(accumulation without dividing the loss), HL017 (clipping before unscale_), HL018 (evaluation without
no_grad/eval()), HL021 (torch.save in place). Mixed into `checks.Checker`, which owns `self.mi` and `add`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from hotloop.lint.analysis import (
    MODEL_NAME,
    ModuleInfo,
    assigned_values,
    call_name,
    dotted,
    is_optimizer_step,
    is_step_call,
    method_name,
    target_names,
    walk_local,
)

PER_BATCH_SCHED = ("OneCycleLR", "CyclicLR")
PER_EPOCH_SCHED = ("StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "ReduceLROnPlateau")


def src(node: ast.AST, limit: int = 60) -> str:
    """The offending expression as the user wrote it (shortened), for messages."""
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def kw(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def is_false_node(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


class StructureChecks:
    mi: ModuleInfo

    def add(self, code: str, node: ast.AST, message: str, edit: object = None) -> None:  # pragma: no cover
        raise NotImplementedError

    def tensor(self, e: ast.expr) -> bool:  # pragma: no cover
        raise NotImplementedError

    def dataloader(self, c: ast.Call) -> None:
        """Only loaders with worker processes: with `num_workers=0` the main thread loads and would pin
        (one more copy on the critical path), and there are no workers to keep alive."""
        missing = self.loader_missing(c, self.mi.uses_cuda, lambda: self._reiterated(c))
        if missing and not self._never_read(c):
            self.add("HL011", c, f"`DataLoader` with workers but without {' and '.join(missing)}")

    def _never_read(self, c: ast.Call) -> bool:
        """`dataloader_val = DataLoader(...)` in a function that nothing reads (RetinaNet builds one and never
        evaluates). A module-level loader may be imported by another file: not judged unread."""
        assign = self.mi.parent.get(c)
        names = {dotted(t) for t in assign.targets} if isinstance(assign, ast.Assign) else set()
        if not names or "" in names or self.mi.enclosing_function(c) is self.mi.tree:
            return False
        return not any(isinstance(u, (ast.Name, ast.Attribute)) and isinstance(u.ctx, ast.Load) and dotted(u) in names
                       for u in self.mi.nodes)  # fmt: skip

    def loader_missing(self, c: ast.Call, cuda: bool, reiterated: Callable[[], bool]) -> list[str]:
        """The options a `DataLoader(...)` call with workers lacks (also asked by the cross-file pass, for a
        loader a helper of the project builds and the caller re-iterates)."""
        kws = self._loader_kwargs(c)
        if kws is None or any(isinstance(a, ast.Starred) for a in c.args):
            return []  # **kwargs we cannot see into: the options may be in there
        # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
        workers_value = kws.get("num_workers", c.args[5] if len(c.args) > 5 else None)
        if workers_value is None or isinstance(workers_value, ast.Constant) and not workers_value.value:
            return []
        if self.mi.cli_default(workers_value) == 0 or self._constant_zero(workers_value):
            return []  # `num_workers=args.dataloader_num_workers` whose flag defaults to 0, or `num_workers = 0` above
        pinned = "pin_memory" in kws or len(c.args) > 7
        missing = []
        if cuda and not pinned:
            missing.append("`pin_memory=True` (CUDA code: copies from pageable memory are synchronous)")
        if "persistent_workers" not in kws and reiterated():
            missing.append("`persistent_workers=True` (workers are re-forked every epoch)")
        return missing

    def _constant_zero(self, e: ast.expr) -> bool:
        if not isinstance(e, ast.Name):
            return False
        values = assigned_values(e.id, self.mi.nodes)
        return bool(values) and all(isinstance(v, ast.Constant) and v.value == 0 for v in values)

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
            values = assigned_values(k.value.id, nodes, annotated=True)
            for n in nodes:  # `kwargs.update(cuda_kwargs)`
                if isinstance(n, ast.Call) and method_name(n) == "update" and dotted(n.func.value) == k.value.id:  # type: ignore[attr-defined]
                    for a in n.args:
                        if isinstance(a, ast.Dict):
                            values.append(a)
                        elif isinstance(a, ast.Name):
                            values += assigned_values(a.id, nodes)
            dicts = [_as_dict(d) for v in values for d in ((v.body, v.orelse) if isinstance(v, ast.IfExp) else (v,))]
            if not dicts or not all(isinstance(d, ast.Dict) for d in dicts):
                return None
            for d in dicts:
                for key, val in zip(d.keys, d.values, strict=True):  # type: ignore[attr-defined]
                    if not isinstance(key, ast.Constant):
                        return None
                    out.setdefault(key.value, val)
        return out

    def _reiterated(self, c: ast.Call, depth: int = 0) -> bool:
        """The loader is iterated more than once in its lifetime: used inside a loop (an epoch loop around
        it), or handed to code that loops epochs. A loader built inside a loop, or iterated once (a test
        set read at the end, an evaluation loader rebuilt per call), never re-forks."""
        if self.mi.enclosing_loop(c) is not None:
            return False  # built per epoch: persistent workers would not survive the loader anyway
        assign = self.mi.parent.get(c)
        names = {dotted(t) for t in assign.targets if dotted(t)} if isinstance(assign, ast.Assign) else set()
        if not names or any(n.startswith(("self.", "cls.")) for n in names):
            return True  # passed straight on or kept on an object: assume several epochs
        scope = self.mi.enclosing_function(c)
        for u in walk_local(scope) if scope is not self.mi.tree else self.mi.nodes:
            if not (isinstance(u, (ast.Name, ast.Attribute)) and dotted(u) in names and isinstance(u.ctx, ast.Load)):
                continue
            if self.mi.enclosing_function(u) is not scope:
                return True  # a global loader read by a function (an epoch function, called again and again)
            outer = self.mi.parent.get(u)
            if (
                isinstance(outer, ast.Return)
                and isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef))
                and depth < 2
            ):
                # `loader = DataLoader(...); return loader` in a builder: what its same-file callers do with it
                if any(self._reiterated(call, depth + 1) for call in self.mi.calls_to.get(scope.name, [])):
                    return True
                continue
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
        return False  # never iterated where we can see it: no evidence of several epochs

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
        # pygcn's full-batch `def test(): model.eval(); output = model(features, adj)`: no loop, one forward
        whole = not loops and bool(re.fullmatch(r"(test|val|valid|validate|validation|evaluate|eval)", fn.name, re.I)
                                   and re.search(r"\.eval\(\)", ast.unparse(fn)) and runs_model(fn))  # fmt: skip
        if not whole and (not loops or not calls_model):
            return
        calls = self.mi.calls_to.get(fn.name, [])
        if flag is not None:  # a shared train/eval loop: only its train=False calls evaluate
            idx = [a.arg for a in fn.args.args].index(flag) - (1 if fn.args.args[0].arg in ("self", "cls") else 0)
            calls = [c for c in calls if is_false_node(getattr(kw(c, flag), "value", None))
                     or len(c.args) > idx >= 0 and is_false_node(c.args[idx])]  # fmt: skip
            if not calls:
                return
        elif any(is_step_call(n) for n in walk_local(fn)):
            return
        if any(isinstance(n, ast.Call) and re.search(r"(valid|val|eval|validation|test|predict)_step$", call_name(n))
               and not self.mi.targets_of(n) for n in walk_local(fn)):  # fmt: skip
            return  # a trainer's `valid_step` (another file) sets the mode and turns gradients off itself
        src = ast.unparse(fn) + self._callee_source(fn)
        if not re.search(r"no_grad|inference_mode|set_grad_enabled", src) and not (
            calls and all(self._caller_has(c, "grad") for c in calls)
        ):
            self.add("HL018", fn, f"`{fn.name}` runs the model without `torch.no_grad()`: activations are kept")
        if not re.search(r"\.eval\(\)|\.train\(False\)|\.train\(mode=False\)", src) and not (
            calls and all(self._caller_has(c, "eval") for c in calls)
        ):
            what = f"`{fn.name}(..., {flag}=False)`" if flag else f"`{fn.name}`"
            self.add("HL018", fn, f"{what} runs the model without `model.eval()`: dropout/batch norm train")

    def _callee_source(self, fn: ast.AST, depth: int = 2) -> str:
        """The source of the same-file functions `fn` calls (two levels): `eval()` -> `eval_step()` holding the
        `with torch.no_grad():` counts for `eval()`."""
        if depth == 0:
            return ""
        out = ""
        for n in walk_local(fn):
            if isinstance(n, ast.Call):
                for f in self.mi.targets_of(n):
                    if f is not fn:
                        out += "\n" + ast.unparse(f) + self._callee_source(f, depth - 1)
        return out

    def inline_evaluation(self, loop: ast.For) -> None:
        """`for batch in eval_dataloader: outputs = model(**batch)` written inline (not in an `eval*` function):
        no_grad must come from a `with` around it (or the function's decorator), eval() from above it."""
        it = loop.iter.args[0] if isinstance(loop.iter, ast.Call) and loop.iter.args else loop.iter
        name = dotted(it).split(".")[-1]
        name = dotted(it) or ast.unparse(loop.iter)
        if not re.search(r"(eval|val|valid|test)\w*(loader|data|dl)|(loader|data|dl)\w*(eval|val|test)", name, re.I):
            return
        fn = self.mi.enclosing_function(loop)
        if re.match(r"^(val|eval|test)", getattr(fn, "name", ""), re.I):
            return  # the function-level check covers it
        body = list(walk_local(loop))
        if any(is_step_call(n) for n in body) or not any(
            isinstance(n, ast.Call) and MODEL_NAME.search(call_name(n).split(".")[-1] or "-") for n in body
        ):
            return
        grad_off = any(re.search(r"no_grad|inference_mode", ast.unparse(d)) for d in getattr(fn, "decorator_list", []))
        n = self.mi.parent.get(loop)
        while n is not None and n is not fn and not grad_off:
            if isinstance(n, ast.With) and any(
                re.search(r"no_grad|inference_mode|set_grad_enabled", ast.unparse(i.context_expr)) for i in n.items
            ):
                grad_off = True
            n = self.mi.parent.get(n)
        inner = any(isinstance(w, ast.With) and re.search(r"no_grad|inference_mode", ast.unparse(w)) for w in body)
        if not grad_off and not inner:
            self.add("HL018", loop, f"`for ... in {src(loop.iter)}` runs the model without `torch.no_grad()`: "
                     "activations are kept")  # fmt: skip

    def _caller_has(self, call: ast.Call, what: str) -> bool:
        """The caller switched to eval mode before the call, or runs it under no_grad."""
        caller = self.mi.enclosing_function(call)
        if what == "eval":
            return any(isinstance(n, ast.Call) and (method_name(n) == "eval" or method_name(n) == "train"
                                                    and n.args and is_false_node(n.args[0]))
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
                self.add("HL017", ev[3], f"`{src(ev[3])}` clips scaled gradients: call `scaler.unscale_(optimizer)` "
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
            if (isinstance(n, ast.If) and any(is_optimizer_step(x) for s in n.body + n.orelse for x in ast.walk(s))
                    and not any(method_name(x) == "backward" for s in n.body for x in ast.walk(s)
                                if isinstance(x, ast.Call))):  # fmt: skip
                # (a gated block with its own backward and step - a GAN's lazy regularisation every N steps -
                # is a periodic extra update, not the end of an accumulation window)
                test = n.test
                if any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod) for b in ast.walk(test)) or any(
                    isinstance(x, ast.Name) and (x.id in mod_names or re.search("accum", x.id, re.I))
                    for x in ast.walk(test)
                ):  # fmt: skip
                    accumulating = True
            elif isinstance(n, ast.With) and any(re.search(r"no_sync|no_backward_sync", ast.unparse(i.context_expr))
                                                 for i in n.items):  # fmt: skip
                accumulating = True
        micro = isinstance(loop, ast.For) and (
            isinstance(loop.iter, ast.Call)
            and call_name(loop.iter) == "range"
            or re.search(r"micro|(^|_)mbs?($|_)|chunk", ast.unparse(loop.target) + " " + ast.unparse(loop.iter))
        )
        if (not accumulating and micro
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
                    self.add("HL016", n, f"`{src(target)}` is accumulated without dividing by the accumulation steps")

    def _divided(self, e: ast.expr, fn: ast.AST, depth: int = 0) -> bool:
        if depth == 0 and any(
            isinstance(n, ast.Call) and re.search(r"scale_grad", call_name(n)) for n in walk_local(fn)
        ):
            return True  # `scale_grads(model, 1 / num_tokens)`: normalised on the gradients
        if depth == 0 and any(
            isinstance(n, ast.Call) and method_name(n) in ("mul_", "div_") and ".grad" in ast.unparse(n.func)
            or isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult))
            and ".grad" in ast.unparse(n.target)
            for n in walk_local(fn)
        ):  # fmt: skip
            return True  # the gradients are scaled before the step (`p.grad.mul_(1 / n)`): the same effect
        """Divided (or scaled) where it is made: inline, by an assignment in the function, or in the return
        of the same-file function that computes it."""
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Div):
            return True
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):  # `loss * (1 / n)`, not `loss * loss_scale`
            return not re.search(r"scale", ast.unparse(e), re.I)
        if (
            isinstance(e, ast.Call)
            and isinstance(e.func, ast.Attribute)
            and e.func.attr in ("mul", "div", "mul_", "div_")
        ):
            if e.func.attr.startswith("div") or any(  # `loss.sum().mul(scaling / batch_total)`
                isinstance(b, ast.BinOp) and isinstance(b.op, ast.Div) for a in e.args for b in ast.walk(a)
            ):
                return True  # fmt: skip
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
                if isinstance(n, ast.With) and depth < 3:  # `with amp.scale_loss(loss, opt) as scaled_loss:`
                    for item in n.items:
                        made = item.context_expr
                        if (isinstance(item.optional_vars, ast.Name) and item.optional_vars.id == key
                                and isinstance(made, ast.Call) and made.args
                                and self._divided(made.args[0], fn, depth + 1)):  # fmt: skip
                            return True
        return False

    def schedulers(self) -> None:
        kinds: dict[str, str] = {}
        for n in self.mi.nodes:
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                base = call_name(n.value).split(".")[-1]
                kind = None
                if base in PER_BATCH_SCHED or base == "LambdaLR" and "warmup" in ast.unparse(n.value).lower():
                    kind = "batch"
                elif base in PER_EPOCH_SCHED:
                    t_max = kw(n.value, "T_max") or (n.value.args[1] if len(n.value.args) > 1 else None)
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

    def _conditions(self, node: ast.AST) -> set[str]:
        """The flags (`args.distributed`) of the `if`s whose body holds `node`."""
        out, child, n = set(), node, self.mi.parent.get(node)
        while n is not None:
            if isinstance(n, ast.If) and child in n.body or isinstance(n, ast.IfExp) and child is n.body:
                out |= {dotted(x) for x in ast.walk(n.test) if isinstance(x, (ast.Name, ast.Attribute)) and dotted(x)}
            child, n = n, self.mi.parent.get(n)
        return out

    def samplers(self) -> None:
        set_epochs = [n for n in self.mi.nodes if isinstance(n, ast.Call) and method_name(n) == "set_epoch"]
        # set_epoch only under a flag (`if args.distributed:`) the sampler itself is built without: runs with
        # the flag off (one process, DistributedSampler built anyway) repeat the order every epoch.
        guards = set.intersection(*(self._conditions(c) for c in set_epochs)) if set_epochs else set()
        guards = {g for g in guards if re.search(r"distributed|ddp|world|multi|gpu", g, re.I)}
        if set_epochs and not guards:
            return
        for n in self.mi.nodes:
            if isinstance(n, ast.Call) and call_name(n).split(".")[-1] == "DistributedSampler":
                shuffle = kw(n, "shuffle")
                if shuffle is not None and isinstance(shuffle.value, ast.Constant) and not shuffle.value.value:
                    continue  # an evaluation sampler: no order to vary
                parent = self.mi.parent.get(n)
                while isinstance(parent, ast.IfExp):  # `DistributedSampler(ds) if distributed else None`
                    parent = self.mi.parent.get(parent)
                where = (
                    " ".join(dotted(t) for t in getattr(parent, "targets", []))
                    + " "
                    + " ".join(
                        k.arg or "" for k in getattr(parent, "keywords", []) if any(x is n for x in ast.walk(k.value))
                    )
                    + " "
                    + (dotted(n.args[0]) if n.args else "")  # `DistributedSampler(valset)`
                )
                if re.search(r"val|test|eval", where, re.I):
                    continue
                if guards:
                    if guards & self._conditions(n):
                        continue  # built under the same flag that calls set_epoch
                    self.add("HL015", n, f"`{src(n)}` is built whatever `{sorted(guards)[0]}` is, but `set_epoch` is "
                             f"only called when it is true: without it every epoch repeats the order")  # fmt: skip
                    continue
                self.add("HL015", n, f"`{src(n)}` without `set_epoch(epoch)`: every epoch repeats the order")


def _as_dict(e: ast.expr) -> ast.expr:
    """`dict(batch_size=b, num_workers=n)` as the literal `{"batch_size": b, "num_workers": n}` (Pytorch-UNet's
    `loader_args`); anything else as it is."""
    if isinstance(e, ast.Call) and call_name(e) == "dict" and not e.args and all(k.arg for k in e.keywords):
        return ast.Dict(keys=[ast.Constant(k.arg) for k in e.keywords], values=[k.value for k in e.keywords])
    return e
