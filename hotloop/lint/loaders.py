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
from functools import partial
from pathlib import Path

from hotloop.lint.analysis import ModuleInfo, assigned_values, call_name, dotted, method_name, walk_local
from hotloop.lint.classes import project_flag_zero
from hotloop.lint.imports import Project, find_def, load_module
from hotloop.lint.loader_classes import as_dict, loader_class, loader_class_def, own_loader, through_super  # noqa: F401 (re-exported: checks imports them here)
from hotloop.lint.syntax import block_of, param_defaults, passed_for

# A consumer that times or inspects a loader (pycls's `benchmark.compute_time_full(model, loss, train_loader,
# test_loader)`) reads a few batches once: no evidence of epochs.
CONFIG = re.compile(r"^(args|opt|opts|config|cfg|hparams|hp|flags)$")  # `args.num_workers` from an options module
MEASURES = re.compile(r"(^|_)(compute_)?(time|timing|bench|benchmark|profile|visuali[sz]e|show|plot)", re.I)
# An evaluation called outside any loop (TLlib's `utils.validate(test_loader, ...)` once after training): one pass.
ONE_PASS = re.compile(r"^(val|valid|validate|validation|eval|evaluate|evaluation|test|predict)(_|$)", re.I)
_LOADERS: dict[tuple[str, float, str], tuple[ModuleInfo, ast.AST, list[ast.Call]] | None] = {}


class LoaderChecks:
    mi: ModuleInfo

    def add(self, code: str, node: ast.AST, message: str, *args: object) -> None:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def dataloader(self, c: ast.Call) -> None:
        """Only loaders with worker processes: with `num_workers=0` the main thread loads and would pin
        (one more copy on the critical path), and there are no workers to keep alive."""
        missing = self.loader_missing(c, self.mi.uses_cuda, lambda: self._reiterated(c))
        if missing and not self._never_read(c):
            kind = call_name(c).rpartition(".")[2] or "DataLoader"  # (or the project's subclass of it)
            self.add("HL011", c, f"`{kind}` with workers but without {' and '.join(missing)}")

    def _never_read(self, c: ast.Call) -> bool:
        """`dataloader_val = DataLoader(...)` in a function that nothing reads (RetinaNet builds one and never
        evaluates). A module-level loader may be imported by another file: not judged unread, unless the module
        is a script that trains at module level (MNAD's `Train.py` builds `test_batch` and never reads it)."""
        assign = self.mi.parent.get(c)
        names = {dotted(t) for t in assign.targets} if isinstance(assign, ast.Assign) else set()
        script = any(self.mi.enclosing_function(loop) is self.mi.tree for loop in self.mi.train_loops)
        if not names or "" in names or self.mi.enclosing_function(c) is self.mi.tree and not script:
            return False
        return not any(isinstance(u, (ast.Name, ast.Attribute)) and isinstance(u.ctx, ast.Load) and dotted(u) in names
                       for u in self.mi.nodes)  # fmt: skip

    def loader_missing(self, c: ast.Call, cuda: bool, reiterated: Callable[[], bool],
                       passed: dict[str, ast.expr] | None = None) -> list[str]:  # fmt: skip
        """The options a `DataLoader(...)` call with workers lacks (also asked by the cross-file pass, for a
        loader a helper of the project builds and the caller re-iterates; `passed`: the keywords the caller
        hands the helper, which its `**kwargs` forwards)."""
        kws = self._loader_kwargs(c, passed)
        if kws is None or any(isinstance(a, ast.Starred) for a in c.args):
            return []  # **kwargs we cannot see into: the options may be in there
        args = c.args  # (a project subclass whose `__init__` hands DataLoader its options: those, dc-tts's workers=8)
        if (cls := loader_class_def(self.mi, c)) is not None and (passed := through_super(cls, c)) is not None:
            kws, args = passed, []
        # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
        workers_value = kws.get("num_workers", args[5] if len(args) > 5 else None)
        if workers_value is None or isinstance(workers_value, ast.Constant) and not workers_value.value:
            return []
        flag = workers_value.attr if isinstance(workers_value, ast.Attribute) and CONFIG.match(dotted(
            workers_value.value)) and self.mi.path and not self.mi.path.startswith("<") else ""  # fmt: skip
        if (self.mi.cli_default(workers_value) == 0 or self._constant_zero(workers_value)
                or flag and project_flag_zero(Path(self.mi.path), flag)):  # fmt: skip
            return []  # `num_workers=args.dataloader_num_workers` whose flag defaults to 0, or `num_workers = 0` above
        pin = kws.get("pin_memory")  # `pin_memory=self.pin_memory` from a flag that defaults to 0 (ReChorus): unpinned
        pinned = (  # (`pin_memory=False` written out is not pinned either: baby-llama2)
            pin is not None
            and not (isinstance(pin, ast.Attribute) and self.mi.cli_default(pin) in (0, False))
            and not (isinstance(pin, ast.Constant) and not pin.value)
            or len(args) > 7
        )
        missing = []
        if cuda and not pinned:
            missing.append("`pin_memory=True` (CUDA code: copies from pageable memory are synchronous)")
        keep = kws.get("persistent_workers")  # (`persistent_workers=False` written out re-forks them too: nanoVLM)
        if (keep is None or isinstance(keep, ast.Constant) and not keep.value) and reiterated():
            missing.append("`persistent_workers=True` (workers are re-forked every epoch)")
        return missing

    def _constant_zero(self, e: ast.expr) -> bool:
        """`num_workers = 0` above, or `self.num_worker` set only from an `__init__` parameter defaulting to 0
        (TorchDrug's `Engine(..., num_worker=0)`)."""
        if isinstance(e, ast.Attribute) and dotted(e.value) == "self":
            values = [n.value for n in self.mi.nodes if isinstance(n, ast.Assign)
                      and any(dotted(t) == f"self.{e.attr}" for t in n.targets)]  # fmt: skip
            params = [param_defaults(self.mi.enclosing_function(v)).get(v.id) for v in values
                      if isinstance(v, ast.Name)]  # fmt: skip
            return bool(values) and len(params) == len(values) and all(
                isinstance(d, ast.Constant) and d.value == 0 for d in params)  # fmt: skip
        module = Project.of(self.mi).modules.get(dotted(e.value)) if isinstance(e, ast.Attribute) else None
        if module is not None:  # `import config as CFG` ... `num_workers=CFG.num_workers` with `num_workers = 0`
            other = load_module(module, module.stat().st_mtime)  # in config.py (OpenAI-CLIP)
            made = assigned_values(e.attr, other.tree.body) if other is not None else []
            return bool(made) and all(isinstance(v, ast.Constant) and v.value == 0 for v in made)
        if not isinstance(e, ast.Name):
            return False
        # the function's own assignments decide (ChatLM's `num_workers = 0` in `train`; `test` sets 4 for itself)
        fn = self.mi.enclosing_function(e)
        own = assigned_values(e.id, walk_local(fn))
        calls = self.mi.calls_to.get(getattr(fn, "name", ""), []) if not own else []
        if calls and e.id in [a.arg for a in fn.args.args + fn.args.kwonlyargs]:  # type: ignore[attr-defined]
            # a parameter every same-file caller gives 0 (DialogueGCN's `get_IEMOCAP_loaders(..., num_workers=0)`)
            given = [passed_for(fn, c, e.id) or param_defaults(fn).get(e.id) for c in calls]
            return all(isinstance(g, ast.Constant) and g.value == 0 for g in given)
        values = own or assigned_values(e.id, self.mi.nodes)
        return bool(values) and all(isinstance(v, ast.Constant) and v.value == 0 for v in values)

    def _loader_kwargs(self, c: ast.Call, passed: dict[str, ast.expr] | None = None) -> dict[str, ast.expr] | None:
        """The call's keywords, with `**kwargs` expanded when kwargs is a dict literal of the same function
        (`kwargs = {'num_workers': 1, 'pin_memory': True} if cuda else {}`: the union of the branches), or the
        function's own `**kwargs` parameter and the caller's keywords are `passed` (DeepLab's
        `make_data_loader(args, **kwargs)` building `DataLoader(train_set, ..., **kwargs)`)."""
        out = {k.arg: k.value for k in c.keywords if k.arg}
        for k in c.keywords:
            if k.arg is not None:
                continue
            if not isinstance(k.value, ast.Name):
                return None
            fn = self.mi.enclosing_function(c)
            star = getattr(getattr(fn, "args", None), "kwarg", None)
            if star is not None and star.arg == k.value.id:
                if passed is None:
                    return None
                for key, val in passed.items():
                    out.setdefault(key, val)
                continue
            nodes = list(walk_local(fn)) + list(walk_local(self.mi.tree))
            values = assigned_values(k.value.id, nodes, annotated=True)
            for n in nodes:  # `kwargs.update(cuda_kwargs)`
                if isinstance(n, ast.Call) and method_name(n) == "update" and dotted(n.func.value) == k.value.id:  # type: ignore[attr-defined]
                    for a in n.args:
                        if isinstance(a, ast.Dict):
                            values.append(a)
                        elif isinstance(a, ast.Name):
                            values += assigned_values(a.id, nodes)
            dicts = [as_dict(d) for v in values for d in ((v.body, v.orelse) if isinstance(v, ast.IfExp) else (v,))]
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
        per_pass = self.mi.enclosing_loop(c) is not None and not self._built_once_in_loop(c)
        if self._endless(c):
            return False  # one pass over an iteration-based sampler: the workers are forked once
        assign = self.mi.parent.get(c)
        if isinstance(assign, ast.Call) and call_name(assign) == "iter" and assign.args[:1] == [c]:
            return False  # `loader = iter(DataLoader(...))` (MiniGPT-4's endless webdataset): one pass, by hand
        names = _bound(assign)
        if not names or any("." in n for n in names):  # (PointDSC's `config.train_loader`, read by its Trainer)
            return not per_pass  # passed straight on or kept on an object: assume several epochs
        scope = self.mi.enclosing_function(c)
        # only the uses of this binding: up to the name's next assignment in the same block (straight-line code;
        # one in an `else` beside it is another binding, not a later one), unless that wraps the same loader
        # (`loader = accelerator.prepare(loader)`, `criterion, loader = get_criterion(cfg, loader)`)
        later = [
            v.lineno
            for v in block_of(self.mi.parent, assign)  # type: ignore[arg-type]
            if isinstance(v, ast.Assign)
            and v.lineno > c.lineno
            and _bound(v) & names
            and not {dotted(x) for x in ast.walk(v.value)} & names
        ]
        window = (c.lineno, min(later, default=10**9))
        if per_pass:  # built in each pass (a schedule's session): re-iterated only by a callee that loops epochs
            return any(isinstance(call := self.mi.parent.get(u), ast.Call) and u in call.args
                       and window[0] <= u.lineno < window[1] and self._iterated_by_callee(call, u, depth)
                       for u in walk_local(scope) if isinstance(u, ast.Name) and u.id in names)  # fmt: skip
        return self._used_again(names, scope, depth, window=window)

    def _iterated_by_callee(self, call: ast.Call, u: ast.expr, depth: int) -> bool:
        """The same-file function `call` runs iterates the parameter `u` is passed as, in a loop inside a loop."""
        for fn in self.mi.targets_of(call):
            params = [a.arg for a in fn.args.args]  # type: ignore[attr-defined]
            params = params[1:] if params[:1] in (["self"], ["cls"]) else params
            name = next((k.arg for k in call.keywords if k.value is u), None)
            if name is None and u in call.args and call.args.index(u) < len(params):
                name = params[call.args.index(u)]
            if name and self._used_again({name}, fn, depth + 1, loops_only=True):
                return True
        return False

    def _used_again(self, names: set[str], scope: ast.AST, depth: int, loops_only: bool = False,
                    window: tuple[int, int] = (0, 10**9)) -> bool:  # fmt: skip
        """A loader bound to `names` in `scope` is iterated in a loop there, or by its callers (returned); with
        `loops_only`, handing it to an unknown consumer is no evidence."""
        for u in walk_local(scope) if scope is not self.mi.tree else self.mi.nodes:
            if not (isinstance(u, (ast.Name, ast.Attribute)) and dotted(u) in names and isinstance(u.ctx, ast.Load)
                    and window[0] <= u.lineno < window[1]):  # fmt: skip
                continue
            if self.mi.enclosing_function(u) is not scope:  # a global loader read by a function (an epoch function,
                if not self._read_once(u):  # called again and again), not a `test()` run once after training
                    return True
                continue
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
            outer = self._through_wrappers(outer)
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
            if given and depth < 2 and self._iterated_by_callee(call, u, depth):  # type: ignore[arg-type]
                return True  # `voc_train_loop(..., train_set, ...)`, a same-file function looping epochs over it
            if given and (cls := self.mi.classes.get(dotted(call.func))) is not None:  # type: ignore[union-attr]
                if self._kept_reiterated(cls, call, u):  # type: ignore[arg-type]
                    return True  # `BertForNer(args, train_loader, dev_loader, test_loader)`: what its methods do
                continue
            if given and not loops_only and not self.mi.targets_of(call):  # type: ignore[arg-type]
                name = self.mi.call_name(call)
                last = name.rpartition(".")[2]
                if name not in ("len", "print", "iter", "next", "enumerate") and not MEASURES.search(last) and not (
                        ONE_PASS.search(last)):  # fmt: skip
                    return True  # an unknown consumer (a trainer's fit) may run epochs
        # PyTorch-Encoding's `def training(epoch): for ... in enumerate(trainloader)` nested in the function that
        # built the loader, and called in its epoch loop: the closure re-iterates it
        # (or one with its own epoch loop around the batches: neuralcoref's `run_epochs` over `zip(..., dataloader)`)
        for f in (f for f in walk_local(scope) if isinstance(f, ast.FunctionDef)):
            uses = [u for u in ast.walk(f) if isinstance(u, ast.Name) and u.id in names]
            if uses and (any(self.mi.enclosing_loop(c) is not None for c in self.mi.calls_to.get(f.name, []))
                         or any(self._looped_in(u, f) for u in uses)):  # fmt: skip
                return True
        return False

    def _looped_in(self, u: ast.expr, fn: ast.AST) -> bool:
        """`u` is used again and again inside `fn`: in a loop there (as a loop's iterable, in a loop around it)."""
        loop = self.mi.enclosing_loop(u)
        if isinstance(loop, (ast.For, ast.AsyncFor)) and any(n is u for n in ast.walk(loop.iter)):
            loop = self.mi.enclosing_loop(loop)
        return loop is not None and self.mi.enclosing_function(loop) is fn

    def _read_once(self, u: ast.expr) -> bool:
        """`u` is iterated by a loop in no loop, in a function called only at module level outside any loop (or a
        measure taken of it): AttentionDeepMIL's `test()` after its epochs reads `test_loader` once."""
        fn, outer = self.mi.enclosing_function(u), self._through_wrappers(self.mi.parent.get(u))
        calls = self.mi.calls_to.get(getattr(fn, "name", ""), [])
        looped = isinstance(outer, ast.For) and outer.iter is not None and u in ast.walk(outer.iter)
        measured = isinstance(outer, ast.Call) and call_name(outer) == "len"
        top = all(self.mi.enclosing_loop(k) is None and self.mi.enclosing_function(k) is self.mi.tree for k in calls)
        return bool(calls) and (looped and self.mi.enclosing_loop(outer) is None or measured) and top

    def _through_wrappers(self, outer: ast.AST | None) -> ast.AST | None:
        """What uses a loader past the `enumerate(...)`/`tqdm(...)` around it (the `for` that iterates it)."""
        while isinstance(outer, ast.Call) and self.mi.call_name(outer) in ("enumerate", "tqdm", "tqdm.tqdm"):
            outer = self.mi.parent.get(outer)
        return outer

    def _kept_reiterated(self, cls: ast.ClassDef, call: ast.Call, u: ast.expr) -> bool:
        """A loader handed to a same-file class's constructor, which keeps it as `self.<attr>`: re-iterated when a
        method loops over it inside a loop, or loops over it once and is called in a loop (a `dev()` run every
        epoch); a `test()` run once after training reads it once. Kept any other way: assume several epochs."""
        init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        params = [a.arg for a in init.args.args[1:]] if init is not None else []
        name = next((k.arg for k in call.keywords if k.value is u), None)
        if name is None and u in call.args and call.args.index(u) < len(params):
            name = params[call.args.index(u)]
        kept = [dotted(t) for n in walk_local(init) if isinstance(n, ast.Assign) and dotted(n.value) == name
                for t in n.targets] if init is not None and name else []  # fmt: skip
        if len(kept) != 1 or not kept[0].startswith("self."):
            return True
        once = set()
        for m in (f for f in cls.body if isinstance(f, ast.FunctionDef) and f is not init):
            for v in walk_local(m):
                if not (isinstance(v, ast.Attribute) and dotted(v) == kept[0] and isinstance(v.ctx, ast.Load)):
                    continue
                outer = self._through_wrappers(self.mi.parent.get(v))
                if not (isinstance(outer, (ast.For, ast.AsyncFor)) and v in ast.walk(outer.iter)):
                    if not (isinstance(outer, ast.Call) and self.mi.call_name(outer) == "len"):
                        return True  # handed on (to a trainer, an evaluator): unknown
                elif self.mi.enclosing_loop(outer) is not None and self.mi.enclosing_function(
                        self.mi.enclosing_loop(outer)) is m:  # fmt: skip
                    return True
                else:
                    once.add(m.name)
        return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in once
                   and self.mi.enclosing_loop(c) is not None for c in self.mi.nodes)  # fmt: skip


def _no_workers(loader: ast.Call, fn: ast.AST, call: ast.Call, caller: ModuleInfo) -> bool:
    """`DataLoader(..., num_workers=num_workers)` in `def make(..., num_workers=0)`: the caller's argument (or
    the parameter's default) decides; `num_workers=args.num_workers` with the caller's `--num-workers`
    defaulting to 0 (DLRM), or SPADE's `int(opt.nThreads)` with `--nThreads` defaulting to 0 in the project's
    options module: no workers either."""
    value = next((k.value for k in loader.keywords if k.arg == "num_workers"), None)
    if isinstance(value, ast.Call) and call_name(value) == "int" and len(value.args) == 1:
        value = value.args[0]
    local = assigned_values(value.id, walk_local(fn)) if isinstance(value, ast.Name) and fn is not None else []
    if len(local) == 1 and isinstance(local[0], ast.Attribute):
        value = local[0]  # `num_workers = cfg.num_workers` above the loader, `cfg` the caller's `args` (e3_diffusion)
    on_disk = bool(caller.path) and not caller.path.startswith("<")
    if isinstance(value, ast.Attribute) and (
        caller.cli_default(value) == 0 or on_disk and project_flag_zero(Path(caller.path), value.attr)
    ):
        return True
    if not isinstance(value, ast.Name) or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    names = [a.arg for a in fn.args.args]
    params = names[1:] if names[:1] == ["self"] else names
    defaults = param_defaults(fn)
    given = next((k.value for k in call.keywords if k.arg == value.id), None)
    if given is None and value.id in params and params.index(value.id) < len(call.args):
        given = call.args[params.index(value.id)]
    if given is None:  # not passed (or passed through *args/**kwargs we cannot see): the default, if any
        given = defaults.get(value.id)
    return isinstance(given, ast.Constant) and given.value == 0


Built = list[tuple[Path, int, list[str]]]  # (file, line, missing options) of each loader a helper builds


def loaders_built(file: Path, name: str, caller: object, call: ast.Call, hops: int = 2) -> Built:
    """(file, line, missing options) of each DataLoader with workers that `name` builds in `file`, judged with
    the caller's CUDA-ness and whether the caller re-iterates what the call returns. A builder that only
    returns another project helper's result (Swin's `data.build_loader` returning `.build`'s, pycls's
    `construct_train_loader` returning `_construct_loader(...)`) builds what that helper builds."""
    from hotloop.lint.checks import Checker

    key = (str(file), file.stat().st_mtime, name)
    if key not in _LOADERS:  # most helpers build no loader: find that out once, from the text first
        try:
            text = file.read_text(encoding="utf-8-sig", errors="replace")
        except OSError:
            text = ""
        mi = load_module(file, key[1]) if "DataLoader" in text or hops and "return" in text else None
        fn = find_def(mi.tree, name, ("__init__",)) if mi is not None else None
        calls = [d for d in ast.walk(fn) if isinstance(d, ast.Call)
                 and call_name(d).split(".")[-1] == "DataLoader"] if fn is not None else []  # fmt: skip
        _LOADERS[key] = (mi, fn, calls) if fn is not None else None
    if _LOADERS[key] is None:
        return []
    mi, fn, calls = _LOADERS[key]  # type: ignore[misc]
    if not calls:
        return _returned(mi, fn, caller, call, hops - 1) if hops else []
    helper = Checker(mi)
    out = []
    for d in calls:
        if not _no_workers(d, fn, call, caller.mi):  # type: ignore[attr-defined]
            # a loader the helper keeps to itself (cirtorch's `extract_vectors` returns the vectors) lives one call:
            # whether the helper re-iterates it decides, not what the caller does with the result
            outer = partial(caller._reiterated, call)  # type: ignore[attr-defined]
            judge = outer if _handed_out(mi, fn, d) else partial(helper._reiterated, d)
            passed = caller._loader_kwargs(call)  # type: ignore[attr-defined]
            missing = helper.loader_missing(d, caller.mi.uses_cuda, judge, passed)
            if missing:
                out.append((Path(mi.path), d.lineno, missing))
    return out


def _bound(assign: ast.AST | None) -> set[str]:
    """The names an assignment binds, tuple targets unpacked (`train_loader, val_loader = build(cfg)`)."""
    targets = getattr(assign, "targets", []) if isinstance(assign, ast.Assign) else []
    return {dotted(e) for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t]) if dotted(e)}


def _handed_out(mi: ModuleInfo, fn: ast.AST, d: ast.Call) -> bool:
    """The helper hands the loader `d` out (returns it, keeps it on `self` as an `__init__` does, or never iterates
    it itself: `loaders.append(loader)`), rather than iterating it and returning only what it computed."""
    assign = mi.parent.get(d)
    names = {dotted(t) for t in assign.targets} if isinstance(assign, ast.Assign) else set()
    if not names or any(n.startswith("self.") or not n for n in names) or getattr(fn, "name", "") == "__init__":
        return True
    nodes = list(walk_local(fn))
    iterated = any(isinstance(n, (ast.For, ast.comprehension)) and names & {dotted(x) for x in ast.walk(n.iter)}
                   for n in nodes)  # fmt: skip
    return not iterated or any(isinstance(r, ast.Return) and r.value is not None
                               and names & {dotted(x) for x in ast.walk(r.value)} for r in nodes)  # fmt: skip


def _returned(mi: ModuleInfo, fn: ast.AST, caller: object, call: ast.Call, hops: int) -> Built:
    """The loaders of the project helpers whose result `fn` returns as it is (`return _build_loader(cfg)`)."""
    project = Project.of(mi)
    out = []
    for r in sorted((r for r in walk_local(fn) if isinstance(r, ast.Return)), key=lambda r: r.lineno):
        if isinstance(r.value, ast.Call) and (name := call_name(r.value)):
            local = find_def(mi.tree, name, ()) if "." not in name else None
            target = (Path(mi.path), name) if isinstance(local, ast.FunctionDef) else project.callee(r.value)
            if target is not None and "." not in target[1]:
                out += loaders_built(*target, caller, call, hops)
    return out
