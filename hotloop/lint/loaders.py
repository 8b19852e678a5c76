"""HL011: a DataLoader's options, judged by how the script uses the loader.

With worker processes and CUDA code, `pin_memory=True` (copies from pageable memory are synchronous); with
workers and a loader iterated more than once (an epoch loop around it, a function called per epoch, an
unknown consumer such as a trainer's `fit`), `persistent_workers=True` (else every epoch re-forks them).
Not judged: `num_workers=0` (literally, by a CLI default, or by the caller of a builder), options hidden in
`**kwargs` we cannot read, a loader built per epoch, and a loader built in a function and never read.
Mixed into `checks.Checker`; the cross-file pass asks `loader_missing` about a helper's loaders.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from hotloop.lint.analysis import ModuleInfo, assigned_values, call_name, dotted, method_name, walk_local


class LoaderChecks:
    mi: ModuleInfo

    def add(self, code: str, node: ast.AST, message: str, *args: object) -> None:  # pragma: no cover (Checker's)
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

    def _endless(self, c: ast.Call) -> bool:
        """`DataLoader(ds, batch_sampler=make_batch_data_sampler(sampler, bs, args.max_iters))`, an
        `InfiniteSampler`: the whole run is one pass, so there is no second epoch to re-fork workers for."""
        given = [k.value for k in c.keywords if k.arg in ("sampler", "batch_sampler")]
        fn = self.mi.enclosing_function(c)
        text = " ".join(ast.unparse(g) + " " + " ".join(ast.unparse(v) for v in assigned_values(g.id, walk_local(fn)))
                        if isinstance(g, ast.Name) else ast.unparse(g) for g in given)  # fmt: skip
        return bool(re.search(r"infinite|iterationbased|\b(max|num|total)_iters?\b", text, re.I))

    def _built_once_in_loop(self, c: ast.Call) -> bool:
        """`if epoch >= freeze_epoch and not unfrozen: loader = DataLoader(...); unfrozen = True` in the epoch
        loop: built at one epoch (`epoch == n` of the loop's counter, or a flag the branch itself sets), then
        iterated every epoch after. Not `epoch > 0` or `step % 500 == 0`: those build it again and again."""
        loop = self.mi.enclosing_loop(c)
        target = loop.target if isinstance(loop, ast.For) else None
        counter = {x.id for x in ast.walk(target) if isinstance(x, ast.Name)} if target is not None else set()
        n = self.mi.parent.get(c)
        while n is not None and n is not loop:
            if isinstance(n, ast.If):
                tested = {x.id for x in ast.walk(n.test) if isinstance(x, ast.Name)}
                flags = {t.id for s in n.body if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
                         for t in s.targets if isinstance(t, ast.Name)}  # fmt: skip
                at_one = any(isinstance(x, ast.Compare) and isinstance(x.ops[0], ast.Eq)
                             and isinstance(x.left, ast.Name) and x.left.id in counter
                             for x in ast.walk(n.test))  # fmt: skip
                periodic = any(isinstance(x, ast.BinOp) and isinstance(x.op, ast.Mod) for x in ast.walk(n.test))
                if tested & flags or at_one and not periodic:
                    return True
            n = self.mi.parent.get(n)
        return False

    def _reiterated(self, c: ast.Call, depth: int = 0) -> bool:
        """The loader is iterated more than once in its lifetime: used inside a loop (an epoch loop around
        it), or handed to code that loops epochs. A loader built anew in each pass of a loop, iterated once (a
        test set read at the end, an evaluation loader rebuilt per call), or over an endless sampler never
        re-forks; one built once inside the loop (`_built_once_in_loop`) does."""
        if self.mi.enclosing_loop(c) is not None and not self._built_once_in_loop(c):
            return False  # built per epoch: persistent workers would not survive the loader anyway
        if self._endless(c):
            return False  # one pass over an iteration-based sampler: the workers are forked once
        assign = self.mi.parent.get(c)
        names = {dotted(t) for t in assign.targets if dotted(t)} if isinstance(assign, ast.Assign) else set()
        if not names or any(n.startswith(("self.", "cls.")) for n in names):
            return True  # passed straight on or kept on an object: assume several epochs
        return self._used_again(names, self.mi.enclosing_function(c), depth)

    def _used_again(self, names: set[str], scope: ast.AST, depth: int, loops_only: bool = False) -> bool:
        """A loader bound to `names` in `scope` is iterated in a loop there, or by its callers (returned); with
        `loops_only`, handing it to an unknown consumer is no evidence."""
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
            if isinstance(outer, ast.Tuple) and isinstance(self.mi.parent.get(outer), ast.Return) and depth < 2:
                # `return train_loader, train_sampler`: the caller's name at the same place in its unpacking
                # (not when the name was rebound to `iter(loader)` before: one pass of an infinite sampler)
                if any(isinstance(v, ast.Call) and call_name(v) in ("iter", "cycle")
                       for v in assigned_values(dotted(u), walk_local(scope))):  # fmt: skip
                    continue
                i = outer.elts.index(u)
                for call in self.mi.calls_to.get(getattr(scope, "name", ""), []):
                    bound = self.mi.parent.get(call)
                    t = bound.targets[0] if isinstance(bound, ast.Assign) and len(bound.targets) == 1 else None
                    if (isinstance(t, ast.Tuple) and len(t.elts) == len(outer.elts) and dotted(t.elts[i])
                            and self.mi.enclosing_loop(call) is None  # (a builder called per epoch: rebuilt)
                            and self._used_again({dotted(t.elts[i])}, self.mi.enclosing_function(call), depth + 1,
                                                 loops_only=True)):  # fmt: skip
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
            if isinstance(call, ast.keyword):  # `BERTTrainer(bert, train_dataloader=loader)`
                call = self.mi.parent.get(call)
            given = isinstance(call, ast.Call) and (u in call.args or any(k.value is u for k in call.keywords))
            if given and not loops_only and not self.mi.targets_of(call):  # type: ignore[arg-type]
                if self.mi.call_name(call) not in ("len", "print", "iter", "next"):
                    return True  # an unknown consumer (a trainer's fit) may run epochs
        return False  # never iterated where we can see it: no evidence of several epochs


def _as_dict(e: ast.expr) -> ast.expr:
    """`dict(batch_size=b, num_workers=n)` as the literal `{"batch_size": b, "num_workers": n}` (Pytorch-UNet's
    `loader_args`); anything else as it is."""
    if isinstance(e, ast.Call) and call_name(e) == "dict" and not e.args and all(k.arg for k in e.keywords):
        return ast.Dict(keys=[ast.Constant(k.arg) for k in e.keywords], values=[k.value for k in e.keywords])
    return e
