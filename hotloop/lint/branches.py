"""Branches on tensors (HL005): `if loss > best:`, `while not torch.isfinite(x).all():`, `assert (a == b).all()`,
`if bool(loss == 0):` in the hot loop each read a device value on the host to choose the Python path. Not
reported: Python values (the kind model says scalar), a flag that short-circuits the test once it held
(`if started or not torch.all(...)`). Mixed into `checks.Checker`.
"""

from __future__ import annotations

import ast

from hotloop.lint.analysis import ModuleInfo, assigned_values, call_name, dotted, method_name, target_names
from hotloop.lint.structure import src as _src
from hotloop.lint.syntax import param_defaults


def is_test(mi: ModuleInfo, node: ast.AST) -> bool:
    """`node` is the whole test of an `if`/`while`/conditional expression."""
    parent = mi.parent.get(node)
    return isinstance(parent, (ast.If, ast.While, ast.IfExp)) and parent.test is node


def never_runs(mi: ModuleInfo, node: ast.AST) -> bool:
    """Under `if False:`, `if 0 and cfg.x:` (code switched off by hand, OpenPCDet's old save path), or in the
    `else:` of `if True:`: dead code reads nothing."""
    child, n = node, mi.parent.get(node)
    while n is not None and not isinstance(n, ast.Module):
        if isinstance(n, ast.If) and child is not n.test:
            t = n.test
            tests = t.values if isinstance(t, ast.BoolOp) and isinstance(t.op, ast.And) else [t]
            # (not a flag whose default leaves the branch off: tried in session 19, it lost 99 labelled findings
            # behind flags the README commands set - `--mask`, `--use-ctc`, `--with_tracking` - to save 30 false ones)
            false = any(isinstance(x, ast.Constant) and not x.value or _old_torch(mi, x, ast.Eq) for x in tests)
            true = isinstance(t, ast.Constant) and bool(t.value) or _old_torch(mi, t, ast.NotEq)
            if false and child in n.body or true and child in n.orelse:
                return True
        child, n = n, mi.parent.get(n)
    return False


def _old_torch(mi: ModuleInfo, t: ast.expr, op: type) -> bool:
    """`torch_ver == '0.3'` (with `torch_ver = torch.__version__[:3]`), `torch.__version__.startswith("0.")`:
    a test for a PyTorch release before 1.0 (with `op` ast.Eq; with ast.NotEq, for any other), which a run today
    answers no (Efficient-Segmentation-Networks' `Variable(images).cuda()` branch is dead)."""
    if isinstance(t, ast.Call) and method_name(t) == "startswith" and op is ast.Eq and t.args:
        old, seen = t.args[0], t.func.value  # type: ignore[attr-defined]
    elif isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], op):
        old, seen = t.comparators[0], t.left
    else:
        return False
    if not (isinstance(old, ast.Constant) and isinstance(old.value, str) and old.value.startswith("0.")):
        return False
    made = assigned_values(seen.id, mi.nodes) if isinstance(seen, ast.Name) else [seen]
    return any("torch.__version__" in ast.unparse(v) for v in made)


def _filled(t: ast.expr) -> str:
    """What a cache-filling test asks about: `self.buf` in `self.buf is None`, `cache` in `key not in cache`,
    `self.queue` in `not hasattr(self, "queue")`; the first test of an `or` (`self.src_mask is None or
    self.src_mask.size(0) != len(src)`: rebuilt only when the size changes). '' for any other test."""
    if isinstance(t, ast.BoolOp) and isinstance(t.op, ast.Or):
        return _filled(t.values[0])
    if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and isinstance(t.operand, ast.Call):
        args = t.operand.args
        named = len(args) == 2 and isinstance(args[1], ast.Constant) and call_name(t.operand) == "hasattr"
        return f"{dotted(args[0])}.{args[1].value}" if named else ""  # type: ignore[union-attr]
    if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Is):
        return dotted(t.left)
    if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.NotIn):
        return dotted(t.comparators[0])
    return ""


def built_once(mi: ModuleInfo, node: ast.AST) -> bool:
    """In the body of an `if` that fills a cache (`_filled`) and sets what it tested: built on the first call
    and kept (HiFi-GAN's `mel_basis`, Real-ESRGAN's training-pair queue, the Transformer's cached causal mask),
    not every step. A body that does not set it (`if ema is None: other = loss.item()`) runs every time."""
    child, n = node, mi.parent.get(node)
    while n is not None and not isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(n, ast.If) and child in n.body and (name := _filled(n.test)):
            stores = [t for s in n.body for a in ast.walk(s) if isinstance(a, (ast.Assign, ast.AugAssign))
                      for t in (a.targets if isinstance(a, ast.Assign) else [a.target])]  # fmt: skip
            if any(dotted(t.value if isinstance(t, ast.Subscript) else t) == name for t in stores):
                return True
        child, n = n, mi.parent.get(n)
    return False


class BranchChecks:
    mi: ModuleInfo

    def add(self, code: str, node: ast.AST, message: str, *args: object) -> None:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def kind(self, e: ast.expr) -> str | None:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def tensor(self, e: ast.expr) -> bool:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def branch(self, node: ast.AST) -> None:
        test = node.test  # type: ignore[attr-defined]
        if not self.mi.in_hot(test) or self.mi.has_sync_marker(node.lineno):
            return
        if isinstance(test, ast.Call) and self.mi.call_name(test) == "bool" and len(test.args) == 1:
            test = test.args[0]  # `if bool(loss == 0):` branches on the tensor inside
        if self.kind(test) == "scalar" or self._latched(node) or self._named_only(test):
            return
        if self.tensor(test) or any(
            isinstance(n, ast.Call)
            and self.mi.call_name(n) in ("torch.isnan", "torch.isinf", "torch.any", "torch.all")
            or isinstance(n, ast.Call)
            and call_name(n) in ("any", "all")
            and n.args
            and isinstance(n.args[0], ast.GeneratorExp)
            and self._reads_tensors(n.args[0])
            for n in ast.walk(test)
        ):
            kind = {ast.If: "if", ast.While: "while", ast.Assert: "assert", ast.IfExp: "conditional"}[type(node)]
            self.add("HL005", node, f"`{kind} {_src(test)}` reads a tensor on the host every step")

    def _named_only(self, test: ast.expr) -> bool:
        """`if focal_loss:` (or `if not dice_loss:`) on a name nothing here made a tensor - a parameter the
        callers in another file pass `False` for (bubbliiiing's `fit_one_epoch` options): its name is no
        evidence for a truth test, which on a real multi-element tensor would raise anyway."""
        t = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else test
        if not isinstance(t, ast.Name):
            return False
        # (`def torch_single_train(..., meta_loss=None)`, `if meta_loss:`: was the option given; flow-forecast)
        default = param_defaults(self.mi.enclosing_function(t)).get(t.id)
        none = isinstance(default, ast.Constant) and default.value is None
        return t.id not in self.mi.function_info(t).tensors or none

    def _latched(self, node: ast.AST) -> bool:
        """`if started or not torch.all(q[-1] == 0): started = True`: a Python flag checked first and set in
        the body short-circuits the tensor test once it has held - a read until then, not every step."""
        test, body = getattr(node, "test", None), getattr(node, "body", None)
        if not (
            isinstance(test, ast.BoolOp)
            and isinstance(test.op, ast.Or)
            and isinstance(test.values[0], ast.Name)
            and isinstance(body, list)
        ):  # (a conditional expression's body is one expression)
            return False
        flag = test.values[0].id
        return any(isinstance(s, ast.Assign) and flag in [n for t in s.targets for n in target_names(t)]
                   and isinstance(s.value, ast.Constant) and s.value.value is True
                   for s in body)  # fmt: skip

    def _reads_tensors(self, gen: ast.GeneratorExp) -> bool:
        """`any(not torch.isfinite(p.grad).all() for p in params)`: Python truth-tests a tensor per element."""
        elt = gen.elt.operand if isinstance(gen.elt, ast.UnaryOp) else gen.elt
        return self.mi.kind(elt, self.mi.function_info(gen), comp=gen) == "tensor" or (
            isinstance(elt, ast.Call) and self.mi.call_name(elt).startswith("torch."))  # fmt: skip
