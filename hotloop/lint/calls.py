"""Which same-file functions a call reaches: `f(...)`, `self.f(...)` (the caller's own class first, then the
same-file subclasses' overrides), `obj.f(...)`, `obj.part.f(...)` (`self.part = Part(...)` in `obj`'s class),
`obj(...)` with `obj = Cls(...)` and `Cls(...).f()` in the file
(`Cls.f`, `Cls.forward`), `g(...)` with `g = partial(f, ...)` at module level, and a local name or dict bound to
functions (`fn = mixed_list if random() < p else noise_list`, `{"TransE": self.TransE, ...}[name](...)`).
Mixed into `analysis.ModuleInfo`, which follows these calls to find what runs every step."""

from __future__ import annotations

import ast

from hotloop.lint.syntax import (
    assigned_values,
    constructed,
    derives,
    dotted,
    method_of,
    param_defaults,
    passed_for,
    walk_local,
)


class CallModel:
    """Call resolution; needs `nodes`, `parent`, `tree`, `functions`, `partials`, `_next_targets` and
    `enclosing_function` from the module model."""

    nodes: list[ast.AST]
    parent: dict[ast.AST, ast.AST]
    tree: ast.Module
    functions: dict[str, list[ast.AST]]
    partials: dict[str, str]
    instances: dict[str, ast.ClassDef]
    _next_targets: dict[ast.AST, list[ast.AST]]

    def enclosing_function(self, node: ast.AST) -> ast.AST: ...

    def local_target(self, call: ast.Call) -> str:
        """The name of the same-file function a call may reach: `f(...)`, `self.f(...)`, `cls.f(...)`, and `g(...)`
        with `g = partial(f, train=True)` assigned once at module level (world-models' epoch function)."""
        f = call.func
        if isinstance(f, ast.Name):
            return self.partials.get(f.id, f.id)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("self", "cls"):
            return f.attr
        return ""

    def _instances(self) -> dict[str, ast.ClassDef]:
        """`agent = Agent(...)`, `self.policy = Policy(...)` with the class in this file: the name's methods
        are that class's (`agent.learn(batch)` in the loop runs `Agent.learn`)."""
        self.classes = {n.name: n for n in self.nodes if isinstance(n, ast.ClassDef)}
        return constructed(self.nodes, lambda c: self.classes.get(c.func.id) if isinstance(c.func, ast.Name) else None)

    def _methods(self, cls: ast.ClassDef, *names: str) -> list[ast.AST]:
        """The first of `names` defined in `cls`, or else in its same-file base classes."""
        found = method_of(cls, names, self.classes)
        return [found] if found is not None else []

    def targets_of(self, call: ast.Call) -> list[ast.AST]:
        """The same-file functions a call may reach; for `self.f(...)`, the `f` of the caller's own class
        when it has one (two loss classes each with a `build_targets` do not share them); for `obj.f(...)`
        with `obj = Cls(...)` in this file, `Cls.f`."""
        if isinstance(call.func, ast.Attribute) and (cls := self.instances.get(dotted(call.func.value))) is not None:
            return self._methods(cls, call.func.attr)
        made = call.func.value if isinstance(call.func, ast.Attribute) else None
        if (isinstance(made, ast.Attribute) and dotted(made.value) in self.instances
                and (cls := self.instances.get(f"self.{made.attr}")) is not None):  # fmt: skip
            return self._methods(cls, call.func.attr)  # type: ignore[union-attr]  # `trainer.policy_net.get_action(s)`
        if isinstance(made, ast.Call) and (cls := self.classes.get(dotted(made.func))) is not None:
            return self._methods(cls, call.func.attr)  # type: ignore[union-attr]  # `Checkpoint(model).save()`
        if (cls := self.instances.get(dotted(call.func))) is not None:  # `criterion(pred, y)`: the module's forward
            return self._methods(cls, "forward", "__call__")
        if (isinstance(call.func, ast.Name) and call.func.id == "model" and isinstance(
                fn := self.enclosing_function(call), ast.FunctionDef) and any(dotted(d) == "staticmethod" for d in
                fn.decorator_list) and isinstance(cls := self.parent.get(fn), ast.ClassDef)):  # fmt: skip
            return self._methods(cls, "forward")  # `KGEModel.train_step(model, ...)`: the model is a KGEModel
        found = self._next_targets.get(call) or self.functions.get(self.local_target(call), []) or self._chosen(call)
        if isinstance(call.func, ast.Attribute) and dotted(call.func.value) in ("self", "cls"):
            # a method, never a module-level function (`self.main(x)` of an nn.Sequential is not `def main()`)
            found = [f for f in found if isinstance(self.parent.get(f), ast.ClassDef)]
            cls = self.parent.get(self.enclosing_function(call))
            own = [f for f in found if self.parent.get(f) is cls]
            # and the overrides of the same-file subclasses (UER's `Trainer.train` calling
            # `self.forward_propagation`, which `BertTrainer`, `MlmTrainer`, ... define)
            subs = [f for f in found if derives(self.tree, self.parent.get(f), cls)] if own else []
            return own + subs or found
        return found

    def _chosen(self, call: ast.Call) -> list[ast.AST]:
        """The functions a local name (or a dict of them) bound in the calling function may be."""
        f = call.func.value if isinstance(call.func, ast.Subscript) else call.func  # `funcs[self.name](...)`
        key = (self.enclosing_function(call), getattr(f, "id", ""))
        seen = self.__dict__.setdefault("_chosen_seen", {})
        if key not in seen and key[1]:
            values = assigned_values(key[1], walk_local(key[0] or self.tree))
            fn = key[0]
            if not values and f is call.func and key[1] in {*param_defaults(fn), *(a.arg for a in getattr(
                    getattr(fn, "args", None), "args", []))}:  # fmt: skip
                # a parameter: what the default and the same-file callers pass for it (drn's `train(...,
                # eval_score=accuracy)` calling `eval_score(output, target)` every step)
                given = [param_defaults(fn).get(key[1])]
                given += [passed_for(fn, c, key[1]) for c in getattr(self, "calls_to", {}).get(fn.name, [])]
                values = [g for g in given if isinstance(g, ast.Name)]
            if f is not call.func:
                values = [v for d in values if isinstance(d, ast.Dict) for v in d.values]
            names = [n for v in values for n in ((v.body, v.orelse) if isinstance(v, ast.IfExp) else (v,))]
            names = [n.attr if isinstance(n, ast.Attribute) and dotted(n.value) == "self" else getattr(n, "id", "")
                     for n in names]  # fmt: skip
            seen[key] = [f for n in names for f in self.functions.get(n, [])]
        return seen.get(key, [])
