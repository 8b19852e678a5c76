"""Formatting a tensor for a person (HL002): an f-string, `"%.3f" % loss`, `"{:.4f}".format(loss)` or
`fmt.format(...)` with `fmt` a string made above (KPConv's `message = '...'; message.format(..., net.output_loss)`)
in the hot loop each read the value on the host. A logging call that is given the tensor is reported once, on
the call (`checks`), not again for the string inside it. Mixed into `checks.Checker`.
"""

from __future__ import annotations

import ast
import re

from hotloop.lint.analysis import ModuleInfo, assigned_values, call_name, walk_local
from hotloop.lint.structure import src as _src

LOG_FUNCS = re.compile(
    r"^(print|log|log_value|logging\.\w+|logger\.\w+|log\.\w+|\w*logger\.(info|debug|warning|error|update|log\w*)"
    r"|([\w.]*\.)?_?\w*(meter|writer|tracker|run|wandb|logger)\.(update|log|log_dict|add_scalar|add_scalars)"
    r"|\w*\.set_(description|postfix))$"
)


class FormatChecks:
    mi: ModuleInfo

    def add(self, code: str, node: ast.AST, message: str, *args: object) -> None:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def tensor(self, e: ast.expr) -> bool:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def str_format(self, c: ast.Call) -> None:
        """`"{:.6f}".format(grad_norm)`, or `message.format(...)` with `message` assigned a string in the same
        function (every assignment of it a string), in hot code (the caller checked)."""
        fmt = c.func.value  # type: ignore[attr-defined]
        if isinstance(fmt, ast.Name):
            values = assigned_values(fmt.id, walk_local(self.mi.enclosing_function(c)))
            fmt = values[0] if values and all(isinstance(v, ast.Constant) for v in values) else fmt
        if isinstance(fmt, ast.Constant) and isinstance(fmt.value, str):
            if shown := next((a for a in [*c.args, *(k.value for k in c.keywords)] if self.tensor(a)), None):
                self.add("HL002", c, f"`str.format` formats the tensor `{_src(shown)}` on the host every step")

    def fstring(self, node: ast.JoinedStr) -> None:
        if not self.mi.in_hot(node):
            return
        parent = self.mi.parent.get(node)
        if isinstance(parent, ast.Call) and LOG_FUNCS.match(call_name(parent)):
            if any(self.tensor(a) for a in parent.args):
                return  # already reported as HL002 on the call
        for v in node.values:
            if isinstance(v, ast.FormattedValue) and self.tensor(v.value):
                shown = f"`{{{_src(v.value, 40)}}}`"
                self.add("HL002", node, f"{shown} in an f-string formats a tensor (a host read) every step")
                return

    def percent_format(self, node: ast.BinOp) -> None:
        """`"%.4g" % loss` / `fmt % (epoch, *mloss)`: %-formatting a tensor reads it, like an f-string."""
        left = node.left
        is_str = isinstance(left, ast.Constant) and isinstance(left.value, str) or isinstance(left, ast.BinOp) and any(
            isinstance(x, ast.Constant) and isinstance(x.value, str) for x in ast.walk(left))  # fmt: skip
        parent = self.mi.parent.get(node)
        if not is_str or not self.mi.in_hot(node) or isinstance(parent, ast.Call) and LOG_FUNCS.match(
                call_name(parent)) and node in parent.args and self.tensor(node):  # fmt: skip
            return  # `print("%.3f" % norm)`: reported once, on the call
        values = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        values = [v.value if isinstance(v, ast.Starred) else v for v in values]
        shown = next((v for v in values if self.tensor(v)), None)
        if shown is not None:
            self.add("HL002", node, f"%-formatting the tensor `{_src(shown)}` reads it on the host every step")
