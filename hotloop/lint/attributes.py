"""The kind of `self.x` read in one method from what the class's other methods assign to it.

A replay buffer's `__init__` makes `self._states = torch.zeros(n, d, device=device)` and its `sample` indexes
`self._states[idx]`; a loss's `__init__` keeps `self.weight_t = weight_t` (a Python number, defaulting to
1.0) and its `forward` tests `if self.weight_t > 0`. The method reading the attribute assigns nothing to it,
so its own history is silent: the class's methods speak for it. A tensor anywhere wins (an attribute that is
sometimes a tensor syncs when it is); a Python value only when every assignment is one; `None` says nothing, except
that an attribute sometimes `None` and otherwise built by a call that is not a `torch.*` factory
(`build_loss(opt).to(device)`) is left unknown: mostly an optional module, tested for existence.
"""

from __future__ import annotations

import ast

from hotloop.lint.syntax import dotted, param_defaults


def class_attribute_kind(model, e: ast.Attribute, fn: ast.AST) -> str | None:  # noqa: ANN001 (a KindModel)
    """'tensor', 'scalar' or None for `self.<attr>` read in method `fn`, by what the class's methods assign it."""
    cls = model.parent.get(fn)
    if not isinstance(cls, ast.ClassDef) or not (isinstance(e.value, ast.Name) and e.value.id == "self"):
        return None
    key = (cls, e.attr)  # every method's assignments: the answer is the same whichever method asks first
    if key in model.attribute_kinds:
        return model.attribute_kinds[key]
    model.attribute_kinds[key] = None  # provisional: an assignment that reads the attribute again terminates
    kinds, made = set(), False
    for m in cls.body:
        if not isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for n in model.walk_local(m):
            if (isinstance(n, ast.Call) and dotted(n.func) == "self.register_buffer" and len(n.args) > 1
                    and isinstance(n.args[0], ast.Constant) and n.args[0].value == e.attr
                    and not isinstance(n.args[1], ast.Constant) and not cls.name.endswith("Trainer")):  # fmt: skip
                # `self.register_buffer("queue_ptr", torch.zeros(1))` (MoCo): a model's tensor, on its device (not a
                # trainer's step counter, lucidrains' `register_buffer("steps", ...)`: the trainer is not moved)
                kinds.add("tensor")
            if isinstance(n, ast.Assign) and any(dotted(t) == f"self.{e.attr}" for t in n.targets):
                v = n.value  # `x = torch.zeros(n, device=d) if flag else None`: each branch
                for b in (v.body, v.orelse) if isinstance(v, ast.IfExp) else (v,):
                    if isinstance(b, ast.Constant) and b.value is None:
                        kinds.add("none")
                        continue
                    kinds.add(_value_kind(model, b, m))
                    made |= isinstance(b, ast.Call) and dotted(b.func).startswith("torch.")
    if "none" in kinds and not made:  # `build_loss(opt).to(device)` or None: an optional module, tested for
        kinds = {None} if kinds - {"none", "scalar"} else kinds
    kinds.discard("none")
    model.attribute_kinds[key] = "tensor" if "tensor" in kinds else ("scalar" if kinds == {"scalar"} else None)
    return model.attribute_kinds[key]


def _value_kind(model, value: ast.expr, m: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:  # noqa: ANN001
    """A parameter with a number for a default, or annotated `int`/`float`/`bool`, is a Python value."""
    if isinstance(value, ast.Name):
        d = param_defaults(m).get(value.id)
        if isinstance(d, ast.Constant) and isinstance(d.value, (int, float, bool)):
            return "scalar"
        args = m.args
        ann = next((a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg == value.id), None)
        if ann is not None and ast.unparse(ann) in ("int", "float", "bool"):
            return "scalar"
    return model.kind(value, model.info_of(m))
