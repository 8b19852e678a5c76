"""A helper's work chosen by a constant argument: `model(u, pos, neg, mode='train_cf')` runs only the
`if mode == 'train_cf':` branch of KGAT's `forward`, not its `update_att` branch (once per epoch, with host
reads). The cross-file pass (`effects.py`) records, for each read it finds in a helper, the parameter test the
read sits under (directly in the called function, or around the one call of a same-file method that reaches
it), and a call site passing another constant for that parameter does not get it.
"""

from __future__ import annotations

import ast

from hotloop.lint.analysis import ModuleInfo
from hotloop.lint.syntax import param_defaults, walk_local

Mode = tuple[str, int, frozenset]  # (parameter, its position after self, the constants it runs for)
GIVEN = frozenset({"<given>"})  # `if mask is not None:` with `mask=None` a parameter: runs when the call passes one


def _params(fn: ast.AST) -> list[str]:
    args = getattr(fn, "args", None)
    names = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]] if args is not None else []
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def _tests(mi: ModuleInfo, node: ast.AST, params: list[str]) -> Mode | None:
    """The innermost `if p == "const":` (or `p in ("a", "b")`) whose body holds `node`, `p` a parameter."""
    child, n = node, mi.parent.get(node)
    while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        t = n.test if isinstance(n, ast.If) and child in n.body else None
        if (p := optional(t, params, mi.enclosing_function(node))) is not None:
            return (p, params.index(p), GIVEN)
        if isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id in params and len(t.ops) == 1:
            right = t.comparators[0]
            values = right.elts if isinstance(t.ops[0], ast.In) and isinstance(right, (ast.Tuple, ast.List)) else (
                [right] if isinstance(t.ops[0], ast.Eq) else [])  # fmt: skip
            consts = frozenset(v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str))
            if consts and len(consts) == len(values):
                return (t.left.id, params.index(t.left.id), consts)
        child, n = n, mi.parent.get(n)
    return None


def optional(t: ast.expr | None, params: list[str], fn: ast.AST | None) -> str | None:
    """The parameter of `fn` whose default is None that `if mask is not None:` / `if mask:` tests."""
    if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.IsNot) and isinstance(
            t.comparators[0], ast.Constant) and t.comparators[0].value is None:  # fmt: skip
        t = t.left
    if not isinstance(t, ast.Name) or t.id not in params or fn is None:
        return None
    default = param_defaults(fn).get(t.id)
    return t.id if isinstance(default, ast.Constant) and default.value is None else None


def mode_of(mi: ModuleInfo, entry: ast.AST | None, node: ast.AST) -> Mode | None:
    """The parameter test of the called function `entry` under which `node` (a read in its file) runs."""
    if entry is None:
        return None
    params = _params(entry)
    fn = mi.enclosing_function(node)
    if fn is entry:
        return _tests(mi, node, params)
    sites = [c for c in walk_local(entry) if isinstance(c, ast.Call) and fn in mi.targets_of(c)]
    modes = {_tests(mi, c, params) for c in sites}
    return modes.pop() if len(modes) == 1 else None


def passes_other(c: ast.Call, mode: Mode | None) -> bool:
    """The call passes a constant for the mode's parameter that does not select the read's branch."""
    if mode is None:
        return False
    name, position, consts = mode
    given = next((k.value for k in c.keywords if k.arg == name), None)
    if given is None and position < len(c.args) and not any(isinstance(a, ast.Starred) for a in c.args):
        given = c.args[position]
    if consts is GIVEN:  # the read runs only when the call passes a value (not None) for the parameter
        unseen = any(isinstance(a, ast.Starred) for a in c.args) or any(k.arg is None for k in c.keywords)
        return not unseen and (given is None or isinstance(given, ast.Constant) and given.value is None)
    return isinstance(given, ast.Constant) and isinstance(given.value, str) and given.value not in consts
