"""Indexing in the hot loop: boolean masks (HL006, a data-dependent size) and Python lists of indices
(HL024: a constant list the loop could build once, or a BatchSampler's list copied every minibatch).
Mixed into `checks.Checker`.
"""

from __future__ import annotations

import ast

from hotloop.lint.analysis import ModuleInfo, assigned_values, dotted, method_name, target_names, walk_local
from hotloop.lint.structure import src


class IndexChecks:
    mi: ModuleInfo

    def add(self, code: str, node: ast.AST, message: str, *args: object) -> None:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def tensor(self, e: ast.expr) -> bool:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def kind(self, e: ast.expr) -> str | None:  # pragma: no cover (Checker's)
        raise NotImplementedError

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
            return
        parts = idx.elts if isinstance(idx, ast.Tuple) else [idx]
        if any(self._constant_list(i) for i in parts) and self.tensor(node.value):
            self.add("HL024", node, f"`{src(node)}`: indexing with a Python list copies it to the device every step")
        elif (
            any(self._sampled_list(i) for i in parts)
            and self.kind(node.value) != "scalar"
            and self.mi.device_code
            and not (
                isinstance(self.mi.parent.get(node), ast.Attribute) and self.mi.parent[node].attr in ("to", "cuda")
            )
        ):  # host data, moved after: HL012's business
            self.add(
                "HL024",
                node,
                f"`{src(node)}`: a Python list of indices from a BatchSampler is copied to the "
                "device for every minibatch; index with a device tensor (torch.randperm(n, device=...) sliced)",
            )

    def _sampled_list(self, e: ast.expr) -> bool:
        """A loop variable drawn from a `BatchSampler` (a Python list of ints per minibatch)."""
        if not isinstance(e, ast.Name):
            return False
        samplers = {dotted(t) for n in self.mi.nodes if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                    and self.mi.call_name(n.value).endswith("BatchSampler") for t in n.targets}  # fmt: skip
        n = self.mi.parent.get(e)
        while n is not None:
            if isinstance(n, (ast.For, ast.AsyncFor)) and e.id in target_names(n.target):
                it = n.iter
                return dotted(it) in samplers or isinstance(it, ast.Call) and self.mi.call_name(it).endswith(
                    "BatchSampler")  # fmt: skip
            n = self.mi.parent.get(n)
        return False

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
            values = assigned_values(e.id, [*walk_local(fn), *walk_local(self.mi.tree)])
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
