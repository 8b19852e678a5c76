"""The structural rules: how a training script is put together, beyond single expressions.

HL015 (DistributedSampler.set_epoch), HL016
(accumulation without dividing the loss), HL017 (clipping before unscale_), HL018 (evaluation without
no_grad/eval()). DataLoader options (HL011) are `loaders.py`'s, in-place saves (HL021) `saves.py`'s. Mixed into
`checks.Checker`, which owns `self.mi` and `add`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hotloop.lint.analysis import (
    MODEL_NAME,
    ModuleInfo,
    call_name,
    dotted,
    is_optimizer_step,
    method_name,
    target_names,
    walk_local,
)
from hotloop.lint.forks import summed_loss
from hotloop.lint.syntax import block_of

TRAINER_SETS = re.compile(r"(\.sampler|\.batch_sampler|self\.\w*sampler\w*)\.set_epoch\(")


def src(node: ast.AST, limit: int = 60) -> str:
    """The offending expression as the user wrote it (shortened), for messages."""
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def kw(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def is_false_node(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def is_true_node(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


# A call that runs a network in an evaluation loop: the model names, and the roles networks are named by
# (PointNet's `classifier(points)`, a GAN's `generator(z)`).
RUNS_MODEL = re.compile(MODEL_NAME.pattern + r"|classifier|generator|discriminator|backbone|predictor|^forward$",
                        re.I)  # fmt: skip
# The network itself called (not `criterion(output, y)` on a no_grad output, not `biencoder.create_input(...)`).
FORWARD_CALL = re.compile(r"^(\w*_)?(model|net|network|encoder|decoder|classifier|generator|discriminator|backbone|"
                          r"teacher|student)\d*$|^(forward|predict)$", re.I)  # fmt: skip
GRAD_OFF = re.compile(r"no_grad|inference_mode|set_grad_enabled")  # what turns gradients off around a block
EVAL_DATA = re.compile(r"(eval|val|valid|test)\w*(loader|data|dl|iter|gen)", re.I)
EVAL_FLAG = re.compile(r"(is_)?(validate|validation|valid|val|eval|evaluate|evaluation|test|testing)|cross_valid")
EVAL_FUNCTION = re.compile(r"^(val|eval|test|predict)", re.I)  # an evaluation loop by its name


def grad_off_at(mi: ModuleInfo, node: ast.AST) -> bool:
    """`node` runs under `with torch.no_grad():` (or inference_mode, set_grad_enabled), or in a function
    decorated with it."""
    child, n = node, mi.parent.get(node)
    while n is not None:
        if isinstance(n, ast.With) and any(GRAD_OFF.search(ast.unparse(i.context_expr)) for i in n.items):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            GRAD_OFF.search(ast.unparse(d)) for d in n.decorator_list
        ):
            return True
        block = next((b for b in (getattr(n, "body", None), getattr(n, "orelse", None))
                      if isinstance(b, list) and child in b), None)  # fmt: skip
        # `torch.set_grad_enabled(False)` above in the block, not turned back on since (NLSPN's validation, inside
        # its epoch loop after the training pass)
        switches = [s.value.args[0] for s in (block[: block.index(child)] if block else [])
                    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and s.value.args
                    and call_name(s.value).endswith("set_grad_enabled")]  # fmt: skip
        if switches:
            return is_false_node(switches[-1])
        child, n = n, mi.parent.get(n)
    return False


class StructureChecks:
    mi: ModuleInfo

    def add(self, code: str, node: ast.AST, message: str, edit: object = None) -> None:  # pragma: no cover
        raise NotImplementedError

    def tensor(self, e: ast.expr) -> bool:  # pragma: no cover
        raise NotImplementedError

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
            if self._in_apex_scale(ev[3], fn):
                self.add("HL017", ev[3], f"`{src(ev[3])}` clips scaled gradients inside `amp.scale_loss(...)`: apex "
                                         "unscales them when the block exits; clip after it")  # fmt: skip
                continue
            state = next((p[2] for p in reversed(events[:i]) if p[2] != "clip" and not self._exclusive(p[3], ev[3])),
                         None)  # fmt: skip
            if state == "scaled":
                self.add("HL017", ev[3], f"`{src(ev[3])}` clips scaled gradients: call `scaler.unscale_(optimizer)` "
                                         "first")  # fmt: skip

    def _in_apex_scale(self, call: ast.AST, fn: ast.AST) -> bool:
        """Inside `with amp.scale_loss(loss, optimizer) as scaled:` (NVIDIA apex, GPT2-Chinese's `--fp16`)."""
        n = self.mi.parent.get(call)
        while n is not None and n is not fn:
            if isinstance(n, ast.With) and any("scale_loss(" in ast.unparse(i.context_expr) for i in n.items):
                return True
            n = self.mi.parent.get(n)
        return False

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
                mods = [b.right for b in ast.walk(test) if isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod)]
                if mods and all(self.mi.cli_default(m, across=True) == 1 for m in mods):
                    continue  # `% args.grad_accumulation_steps` whose flag defaults to 1: no accumulation by default
                if mods or any(
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
                stmt = self.mi.parent.get(n)  # (`loss_dis.backward(); optimizer_dis.step()` in one block: FewRel's
                after = block_of(self.mi.parent, stmt)  # adversary steps at once, whatever the encoder accumulates)
                rest = after[after.index(stmt) + 1 :] if stmt in after else []
                nxt = next((s for s in rest if any(is_optimizer_step(x) for x in ast.walk(s))), None)
                if isinstance(nxt, ast.Expr) and is_optimizer_step(nxt.value):
                    continue
                target = n.func.value  # type: ignore[attr-defined]
                if n.args and not self.tensor(target):
                    target = n.args[0]  # accelerator.backward(loss), fabric.backward(loss)
                if isinstance(target, ast.Call) and method_name(target) == "scale" and target.args:
                    target = target.args[0]
                if not self._divided(target, fn) and not summed_loss(self.mi, target, fn):
                    self.add("HL016", n, f"`{src(target)}` is accumulated without dividing by the accumulation steps")

    def _returns_divided(self, call: ast.Call, at: int | None) -> bool:
        """A same-file function returns its value divided (element `at` of a returned tuple)."""
        active = self.__dict__.setdefault("_returns_active", set())  # functions being followed now
        for f in self.mi.targets_of(call):
            if f in active:
                continue  # a recursive helper
            active.add(f)
            try:
                for r in walk_local(f):
                    if isinstance(r, ast.Return) and r.value is not None:
                        value = r.value
                        if at is not None:
                            if not (isinstance(value, ast.Tuple) and at < len(value.elts)):
                                continue
                            value = value.elts[at]
                        if self._divided(value, f):
                            return True
            finally:
                active.discard(f)
        return False

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
            return self._returns_divided(e, None)
        if (isinstance(e, ast.Attribute) and isinstance(e.value, (ast.Name, ast.Attribute)) and depth < 3
                and self._divided(e.value, fn, depth + 1)):  # fmt: skip
            return True  # `losses = compute_loss(b) / grad_acc_steps`, then `losses.loss_total` (IRIS)
        if isinstance(e, (ast.Name, ast.Attribute)):
            key = dotted(e)
            for n in walk_local(fn):
                if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    at = next((i for t in targets if isinstance(t, ast.Tuple) for i, x in enumerate(t.elts)
                               if dotted(x) == key), None)  # fmt: skip
                    if at is not None and isinstance(n.value, ast.Call) and self._returns_divided(n.value, at):
                        return True  # `loss, correct = _fwd_pass(...)` whose `return loss, is_correct` divided it
                    if any(dotted(t) == key or key in target_names(t) for t in targets):
                        if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult)):
                            return True
                        value = n.value.operand if isinstance(n.value, ast.UnaryOp) else n.value
                        if not isinstance(n, ast.AugAssign) and (
                            any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Div) for b in ast.walk(value))
                            or isinstance(value, ast.Call) and self._divided(value, fn, depth)
                            or isinstance(value, (ast.Name, ast.Attribute)) and dotted(value) != key and depth < 3
                            and self._divided(value, fn, depth + 1)  # `loss = -pg_obj` after `pg_obj /= n`
                            or isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub)) and depth < 3
                            and all(self._divided(x, fn, depth + 1) for x in (value.left, value.right))  # FCGF
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

    def _conditions(self, node: ast.AST) -> set[str]:
        """The flags (`args.distributed`) of the `if`s whose body holds `node`."""
        out, child, n = set(), node, self.mi.parent.get(node)
        while n is not None:
            if isinstance(n, ast.If) and child in n.body or isinstance(n, ast.IfExp) and child is n.body:
                out |= {dotted(x) for x in ast.walk(n.test) if isinstance(x, (ast.Name, ast.Attribute)) and dotted(x)}
            child, n = n, self.mi.parent.get(n)
        return out

    def _set_by_a_trainer(self) -> bool:
        """Another file of the project calls `set_epoch` on a sampler it was handed: `self.data_loader.sampler
        .set_epoch(epoch)` in MASTER-pytorch's `Trainer`, given the loader `train.py` built (a sampler reached
        through a loader or an object's attribute, not a script's own `train_sampler`)."""
        from hotloop.lint.classes import project_files

        here = Path(self.mi.path).resolve() if self.mi.path and not self.mi.path.startswith("<") else None
        others = [text for f, text in project_files(here) if f.resolve() != here.resolve()] if here else []
        return any(TRAINER_SETS.search(text) for text in others)

    def samplers(self) -> None:
        set_epochs = [n for n in self.mi.nodes if isinstance(n, ast.Call) and method_name(n) == "set_epoch"]
        # set_epoch only under a flag (`if args.distributed:`) the sampler itself is built without: runs with
        # the flag off (one process, DistributedSampler built anyway) repeat the order every epoch.
        guards = set.intersection(*(self._conditions(c) for c in set_epochs)) if set_epochs else set()
        guards = {g for g in guards if re.search(r"distributed|ddp|world|multi|gpu", g, re.I)}
        if set_epochs and not guards or not set_epochs and self._set_by_a_trainer():
            return
        for n in self.mi.nodes:
            if isinstance(n, ast.Call) and call_name(n).split(".")[-1] == "DistributedSampler":
                shuffle = kw(n, "shuffle")
                if shuffle is not None and isinstance(shuffle.value, ast.Constant) and not shuffle.value.value:
                    continue  # an evaluation sampler: no order to vary
                parent = self.mi.parent.get(n)
                while isinstance(parent, ast.IfExp):  # `DistributedSampler(ds) if distributed else None`
                    if "SequentialSampler" in ast.unparse(parent.body if parent.orelse is n else parent.orelse):
                        break  # `SequentialSampler(pred_dataset) if local_rank == -1 else ...`: evaluation data (CLUE)
                    parent = self.mi.parent.get(parent)
                if isinstance(parent, ast.IfExp):
                    continue
                where = (
                    " ".join(dotted(t) for t in getattr(parent, "targets", []))
                    + " "
                    + " ".join(
                        k.arg or "" for k in getattr(parent, "keywords", []) if any(x is n for x in ast.walk(k.value))
                    )
                    + " "
                    + (dotted(n.args[0]) if n.args else "")  # `DistributedSampler(valset)`
                )
                if re.search(r"val|test|eval|pred", where, re.I):
                    continue
                if guards:
                    if guards & self._conditions(n):
                        continue  # built under the same flag that calls set_epoch
                    self.add("HL015", n, f"`{src(n)}` is built whatever `{sorted(guards)[0]}` is, but `set_epoch` is "
                             f"only called when it is true: without it every epoch repeats the order")  # fmt: skip
                    continue
                self.add("HL015", n, f"`{src(n)}` without `set_epoch(epoch)`: every epoch repeats the order")
