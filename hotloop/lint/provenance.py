"""Host provenance: a read of a tensor that lives on the host waits for no device.

`ix = torch.randint(n, (8,))` then `data[i] for i in ix`, a pinned shard's header, `x.cpu().numpy()`: the
sync rules skip reads whose tensors are made on the CPU (a factory without `device=`), pinned, from numpy,
or derived from such (views, slices, dtype casts, same-file helpers returning them). The other direction
too: a loader's batch `copy_`-ed into a tensor moved to the device, blocking (HL012). Mixed into
`checks.Checker`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from hotloop.lint.analysis import MOVER_FN, ModuleInfo, assigned_values, dotted, method_name, target_names, walk_local
from hotloop.lint.forks import comp_binding
from hotloop.lint.moved import appended, device_iterators, iterated_batch, moved_whole_before, trainer_buffer
from hotloop.lint.structure import kw as _kw
from hotloop.lint.structure import src as _src
from hotloop.lint.syntax import binding_before, passed_for

# A network called as a function: `self.model(batch)`, `netG(z)`, `self.encoder(x)`, an agent's `self.actor(obs)` or
# `self.qf1_target(obs2, a)` (not `build_model(cfg)`).
MODULE_CALL = re.compile(
    r"^(?!(build|create|get|make|load|init|setup|compute)_)(model|net\w*|\w*_(model|net)|encoder|decoder|generator|"
    r"discriminator|teacher|student|actor|critic|qf\d?|q_?net\d?|(actor|critic|qf\d?|q_?net\d?)_target|forward)$",
    re.I,
)


def moves_to_device(c: ast.Call) -> bool:
    """`.cuda()`, `.to(device)`, `.to(self.device)`, `.to(x)` (another tensor's device), `.to(device=...)`; not
    `.to(torch.float16)`, `.to(weight_dtype)`: casts."""
    meth = method_name(c)
    if meth == "cuda":
        return True
    first = dotted(c.args[0]) if c.args else ""
    last = first.rpartition(".")[2].lower()
    dtype = bool(first) and (first.startswith("torch.") or "dtype" in last or last.endswith("_type")
                             or last in ("half", "precision")) and "device" not in first  # fmt: skip
    return meth == "to" and (bool(c.args) and not dtype or _kw(c, "device") is not None)


class HostProvenance:
    mi: ModuleInfo

    def add(self, code: str, node: ast.AST, message: str) -> None:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def kind(self, e: ast.expr) -> str | None:  # pragma: no cover (Checker's)
        raise NotImplementedError

    def host_read(self, node: ast.AST) -> bool:
        """The value read at `node` is a host tensor (made on the CPU, pinned, or from numpy), so the read is
        no device sync: `ix = torch.randint(n, (8,))` ... `data[i]` for i in ix, a pinned shard's header."""
        if isinstance(node, ast.Call):
            reads = ("item", "cpu", "numpy", "tolist", "nonzero", "unique", "masked_select", "bincount")
            method = (
                isinstance(node.func, ast.Attribute)
                and method_name(node) in reads
                and not self.mi.call_name(node).startswith("torch.")
            )  # torch.nonzero(x): x is read
            exprs = [node.func.value] if method else list(node.args)  # type: ignore[attr-defined]
        elif isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)):
            exprs = [node.test]
        elif isinstance(node, ast.Subscript):
            exprs = [node.value]
        elif isinstance(node, ast.JoinedStr):
            exprs = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
        else:
            return False
        tensors = [e for e in exprs if self.kind(e) != "scalar"]
        return bool(tensors) and all(self._host(e) for e in tensors)

    HOST_FACTORIES = {"from_numpy", "from_file", "tensor", "as_tensor", "empty", "zeros", "ones", "full", "arange",
                      "randint", "randperm", "rand", "randn", "frombuffer", "linspace", "logspace", "eye",
                      "hann_window", "hamming_window", "blackman_window", "bartlett_window",
                      "kaiser_window"}  # fmt: skip
    LEGACY = {
        "Tensor",
        "FloatTensor",
        "LongTensor",
        "IntTensor",
        "ByteTensor",
        "BoolTensor",
        "DoubleTensor",
        "HalfTensor",
    }  # `torch.LongTensor(range(n))`: on the host unless a CUDA default tensor type is set
    HOST_KEEPING = {"pin_memory", "cpu", "numpy", "clone", "view", "reshape", "contiguous", "long", "int", "float",
                    "flatten", "squeeze", "unsqueeze", "sum", "max", "min", "mean", "nonzero", "tolist", "cumsum",
                    "diff", "item", "type", "bool", "eq", "ne", "lt", "gt", "le", "ge", "any", "all", "numel",
                    "expand", "expand_as", "repeat", "t", "transpose", "permute", "abs", "double", "half"}  # fmt: skip

    def _host(self, e: ast.expr, depth: int = 0) -> bool:
        memo = self.__dict__.setdefault("_host_memo", {})
        if e not in memo:
            memo[e] = False  # a cycle (`x = x.view(...)`) proves nothing
            memo[e] = self._host_uncached(e, depth)
        return memo[e]

    def _host_uncached(self, e: ast.expr, depth: int) -> bool:
        if depth > 10 or "set_default_device" in self.mi.source:
            return False
        if isinstance(e, ast.Constant):
            return True
        if isinstance(e, ast.Name):
            fn = self.mi.enclosing_function(e)
            if self._moved_later(e, fn):
                return True  # `labels[i][j] != pad` ... then `labels = labels.to(device)`: still on the host here
            if unbound_before(e, fn) and self._host_param(e, fn, depth):
                return True  # a parameter, read before anything is assigned to it: what the callers pass
            s = binding_before(self.mi.parent, e, e.id)
            if s is not None and len(s.targets) == 1 and isinstance(s.targets[0], ast.Tuple) and isinstance(
                    s.value, ast.Name):  # fmt: skip
                return self._host(s.value, depth + 1)  # `points, target = data` just above, `data` a host batch
            if s is not None and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) and any(
                    isinstance(x, ast.Call) and method_name(x) == "cpu" for x in ast.walk(s.value)) and not any(
                    isinstance(n, (ast.Assign, ast.AugAssign)) and s.lineno < n.lineno < e.lineno
                    and e.id in {x for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                                 for x in target_names(t)}
                    for n in walk_local(fn)) and self._host(s.value, depth + 1):  # fmt: skip
                return True  # the assignment that reaches the read: `correct = correct.cpu().sum()` (relationnet)
            gen = comp_binding(self.mi.parent, e)  # `int(i) for i in batch["index"]` before the batch is moved (OLMo)
            if gen is not None and (source := _loop_source(gen.target, gen.iter, e.id)) is not None:
                return self._host(source, depth + 1)
            for n in self.mi.enclosing_loops(e):  # `for a in acc: a.item()` in a step where `a` was a device batch
                if isinstance(n, ast.For) and (source := _loop_source(n.target, n.iter, e.id)) is not None:
                    stores = [x for x in walk_local(n) if isinstance(x, (ast.Assign, ast.AugAssign))]
                    if not any(e.id in target_names(t) for x in stores
                               for t in (x.targets if isinstance(x, ast.Assign) else [x.target])):  # fmt: skip
                        return self._unmoved_batch(e.id, n, fn) or self._host(source, depth + 1)
                    break
            values = []
            loops = set(self.mi.enclosing_loops(e))
            for n in walk_local(fn):
                if isinstance(n, ast.For) and (source := _loop_source(n.target, n.iter, e.id)) is not None:
                    # `for idx in torch.where(host_labels == k)[0]:` yields host tensors; so does a loader whose
                    # batch the loop never moves, while moving other things (GraphRNN's `data['len']`)
                    values.append(ast.Constant(0) if self._unmoved_batch(e.id, n, fn) else source)
                if not isinstance(n, (ast.Assign, ast.AugAssign)):
                    continue
                if n.lineno <= e.lineno <= (n.end_lineno or n.lineno) and any(x is e for x in ast.walk(n.value)):
                    continue  # `loc_t = loc_t.cuda()` (RetinaFace's loss): the value read is the one from before
                if n.lineno > e.lineno and not loops & set(self.mi.enclosing_loops(n)):
                    continue  # `if lens.is_cuda: seq = seq.cuda()` below the read: not what it reads (one in a loop
                    # around the read is: it reaches the read on the next turn)
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple) and len(t.elts) == len(n.value.elts):
                        values += [v for x, v in zip(t.elts, n.value.elts, strict=True) if e.id in target_names(x)]
                    elif e.id in target_names(t):
                        values.append(n.value)
            return bool(values) and all(self._host(v, depth + 1) for v in values)
        if isinstance(e, (ast.Subscript, ast.Attribute)):  # (or a never-moved trainer's buffer: audiolm's `steps`)
            return trainer_buffer(self.mi, e) or self._host(e.value, depth + 1)
        if isinstance(e, (ast.Compare, ast.BinOp, ast.UnaryOp, ast.BoolOp)):
            parts = [x for x in ast.iter_child_nodes(e) if isinstance(x, ast.expr)]
            parts = [x for x in parts if self.kind(x) != "scalar"]
            tensors = [x for x in parts if self.kind(x) == "tensor"]
            if isinstance(e, ast.Compare) and tensors:  # `labels[i][j] != media_token_id`: the tensor side decides
                parts = tensors
            return bool(parts) and all(self._host(x, depth + 1) for x in parts)
        if isinstance(e, ast.Call):
            name, meth = self.mi.call_name(e), method_name(e)
            if name.rpartition(".")[2] == "Variable" and e.args:  # PyTorch 0.3's wrapper: what it wraps
                return self._host(e.args[0], depth + 1)
            if name.startswith("torch."):
                meth = ""  # a function of the torch module, not a method of a tensor
            if name.startswith("torch.") and name.split(".")[-1] in self.HOST_FACTORIES and name.count(".") == 1:
                device = _kw(e, "device")
                if device is None and name in ("torch.as_tensor", "torch.tensor") and e.args and self.kind(
                        e.args[0]) == "tensor":  # fmt: skip
                    return self._host(e.args[0], depth + 1)  # `torch.as_tensor(v)` keeps a device tensor there (HALOs)
                return device is None or isinstance(device.value, ast.Constant) and device.value.value == "cpu"
            if name.count(".") == 1 and name[6:] in self.LEGACY:
                return "set_default_tensor_type" not in self.mi.source
            if meth in ("pin_memory", "cpu", "numpy") or name.split(".")[0] in ("np", "numpy"):
                return True  # (NumPy computes on the host: `np.random.rand(s, b) <= p` is a host mask)
            if re.search(r"(^|_|2)(cpu|numpy|np)$", name.split(".")[-1]) and not meth:  # `to_cpu(loss)` helpers
                return True
            moves = meth == "to" and moves_to_device(e)
            if (meth in self.HOST_KEEPING or meth == "to" and not moves) and isinstance(e.func, ast.Attribute):
                return self._host(e.func.value, depth + 1)
            local = self.mi.targets_of(e)
            if not local and e.args and CRITERION.search(dotted(e.func).rpartition(".")[2]):
                return self._host(e.args[0], depth + 1)  # `criterion(preds, text, ...)` of `preds = model(x).cpu()`
            if local and depth < 3:  # a same-file helper that returns host tensors
                rets = [r.value for f in local for r in walk_local(f) if isinstance(r, ast.Return) and r.value]
                return bool(rets) and all(self._host(r, depth + 1) for r in rets)
            if name == "torch.where" and len(e.args) == 1:  # the indices of a host condition
                return self._host(e.args[0], depth + 1)
            if name.startswith("torch.") and name.count(".") == 1 and e.args and _kw(e, "device") is None:
                # a torch function of host tensors computes on the host: `torch.cumsum(torch.unique_consecutive(
                # torch.tensor(sizes), ...)[1], 0)` (DINO's crop boundaries), `torch.cat([a, b])`, `torch.nonzero(m)`
                first = e.args[0]
                items = first.elts if isinstance(first, (ast.List, ast.Tuple)) else [first]
                items += [a for a in e.args[1:] if self.kind(a) == "tensor"]
                return all(self._host(x, depth + 1) for x in items)
        return False

    def _unmoved_batch(self, name: str, loop: ast.For, fn: ast.AST) -> bool:
        """`name` is a batch of a loader (`for i, data in enumerate(loader)`) that `fn` never rebinds, moves in
        place (`data[k] = ...`) or hands to a mover (`to_device(data)`), while it does move something to the
        device (`data["x"].cuda()` is a copy: `data` stays): the loader yields host tensors (not one prepared by
        Accelerate/Fabric, nor a dataset kept on the GPU, where nothing is moved)."""
        if not self.mi._iterates_data(loop.iter) or self._loaders_move():
            return False
        calls = [c for c in walk_local(fn) if isinstance(c, ast.Call)]
        moves = any(isinstance(c.func, ast.Attribute) and moves_to_device(c) for c in calls)
        handed = any(MOVER_FN.search(dotted(c.func).rpartition(".")[2]) and any(
            isinstance(a, ast.Name) and a.id == name for a in c.args) for c in calls)  # fmt: skip
        changed = any(isinstance(a, ast.Assign) and any(name in target_names(t) or isinstance(t, ast.Subscript)
                                                        and dotted(t.value) == name for t in a.targets)
                      for a in walk_local(fn))  # fmt: skip
        return moves and not handed and not changed

    def _loaders_move(self) -> bool:
        """The module's batches may come on the device: prepared by Accelerate/Fabric, prefetched, or yielded by
        the file's own `__iter__`/`__next__` after a move (Bag-of-Tricks-for-AT's `Batches`). Looked up once."""
        if "_loaders_move_memo" not in self.__dict__:
            self.__dict__["_loaders_move_memo"] = bool(
                re.search(r"\.prepare\(|setup_dataloaders|prefetch", self.mi.source, re.I)) or any(
                isinstance(f, ast.FunctionDef) and f.name in ("__iter__", "__next__") and any(
                    isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and moves_to_device(c)
                    for c in ast.walk(f)) for f in self.mi.nodes)  # fmt: skip
        return self.__dict__["_loaders_move_memo"]

    def _moved_later(self, e: ast.Name, fn: ast.AST) -> bool:
        """`e` is read before the line where the function moves that very name to the device (`labels =
        labels.to(device_id)`), with no assignment in between: the script itself says it is on the host."""
        line = e.lineno
        assigns = [n for n in walk_local(fn) if isinstance(n, ast.Assign)
                   and any(e.id in target_names(t) for t in n.targets)]  # fmt: skip
        given_to = {}  # each assignment's value for the name
        for n in assigns:
            v = n.value
            # `images, labels = (2 * images.to(device) - 1, ...)` (minimal-diffusion): the value given to the name
            if isinstance(v, ast.Tuple) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Tuple) \
                    and len(v.elts) == len(n.targets[0].elts):  # fmt: skip
                v = next(x for t, x in zip(n.targets[0].elts, v.elts, strict=True) if e.id in target_names(t))
            given_to[n] = v
        for n in assigns:
            v = given_to[n]
            moves = any(isinstance(c, ast.Call) and moves_to_device(c) and isinstance(c.func, ast.Attribute)
                        and isinstance(c.func.value, ast.Name) and c.func.value.id == e.id
                        for c in ast.walk(v))  # fmt: skip
            # `x, y, lengths = to_cuda(x, y, lengths)` (XLM): a mover helper given the very name
            given = isinstance(v, ast.Call) and MOVER_FN.search(dotted(v.func).rpartition(".")[2]) and any(
                isinstance(a, ast.Name) and a.id == e.id for a in v.args)  # fmt: skip
            if line < n.lineno and (moves or given):
                # nothing binds the name in between, a loop's target included: dgcnn's `label.cpu()` in the train
                # loop is not before the test loop's `for data, label in test_loader: ... label.to(device)`
                loops = [f for f in walk_local(fn) if isinstance(f, ast.For) and e.id in target_names(f.target)]
                # (a wrapper of the name itself in between, `x = Variable(x)` in tacotron's step, keeps it where it is)
                rebinds = [m for m in assigns if not (
                    any(isinstance(x, ast.Name) and x.id == e.id for x in ast.walk(given_to[m]))
                    and not any(isinstance(c, ast.Call) and moves_to_device(c) for c in ast.walk(given_to[m])))
                ]  # fmt: skip
                return not any(line < m.lineno < n.lineno for m in [*rebinds, *loops])
        return False

    def _host_param(self, e: ast.Name, fn: ast.AST, depth: int) -> bool:
        """A parameter every same-file call passes a host value for (XLM's `self.mask_out(x, lengths)`, called
        before `to_cuda(x, ...)`)."""
        args = getattr(fn, "args", None)
        params = [a.arg for a in [*args.posonlyargs, *args.args]] if args is not None else []
        if e.id not in params or depth > 4:
            return False
        given = [passed_for(fn, c, e.id) for c in self.mi.calls_to.get(getattr(fn, "name", ""), [])]
        return bool(given) and all(g is not None and self._host(g, depth + 1) for g in given)

    def legacy_cuda_copies(self, c: ast.Call, meth: str | None) -> None:
        """In hot code: `imgs.type(Tensor)` with a CUDA tensor type copies the batch blocking (HL012);
        `Tensor(np.random.normal(...))` builds host data and copies it (HL024)."""
        if meth == "type" and len(c.args) == 1 and self.cuda_type(c.args[0]) and not self.on_device(c.func.value, c):  # type: ignore[attr-defined]
            self.add("HL012", c, f"`{_src(c)}` copies to the device without `non_blocking=True`: the host blocks")
        elif (meth == "type" and len(c.args) == 1 and re.fullmatch(r"torch\.[A-Z]\w*Tensor", dotted(c.args[0]))
              and self.on_device(c.func.value, c)):  # type: ignore[attr-defined]  # fmt: skip
            self.add("HL007", c, f"`{_src(c)}`: a CPU tensor type, so the device tensor is copied to the host every "
                                 "step")  # fmt: skip  # (FewRel's accuracy: `(pred == label).type(torch.FloatTensor)`)
        elif (isinstance(c.func, (ast.Name, ast.Attribute)) and self.cuda_type(c.func) and c.args  # (AutoGAN's
              and (isinstance(c.args[0], (ast.List, ast.ListComp))  # `torch.cuda.FloatTensor(np.random.normal(...))`)
                   or isinstance(c.args[0], ast.Call) and dotted(c.args[0].func).startswith("np."))):  # fmt: skip
            self.add("HL024", c, f"`{_src(c)}` builds host data and copies it to the device every step")

    def cuda_type(self, e: ast.expr) -> bool:
        """`torch.cuda.FloatTensor`, or PyTorch-GAN's `Tensor = torch.cuda.FloatTensor if cuda else
        torch.FloatTensor` (the CUDA branch is the run that matters)."""

        def name(x: ast.expr) -> str:  # (through the module's aliases: `import torch as th`, pytorch-maddpg)
            return self.mi.resolve(dotted(x), self.mi.aliases)

        if name(e).startswith("torch.cuda.") and name(e).endswith("Tensor"):
            return True
        return isinstance(e, ast.Name) and any(
            isinstance(v, ast.IfExp) and any(name(b).startswith("torch.cuda.") for b in (v.body, v.orelse))
            or name(v).startswith("torch.cuda.") and name(v).endswith("Tensor")
            for v in assigned_values(e.id, self.mi.nodes))  # fmt: skip

    def factory_made(self, e: ast.expr, depth: int = 0) -> bool:
        """`e` is a tensor a torch factory made on the host in this function (`ids = torch.tensor([ids])`, then
        `ids = ids.repeat(n, 1)`), not a batch: no prepared loader put it on the device (T2I-Adapter)."""
        while isinstance(e, ast.Call) and method_name(e) in self.HOST_KEEPING and isinstance(e.func, ast.Attribute):
            e = e.func.value
        if isinstance(e, (ast.Attribute, ast.Subscript)):  # `tokenizer(..., return_tensors="pt").input_ids`
            return self.factory_made(e.value, depth + 1)
        if isinstance(e, ast.Call):
            name = self.mi.call_name(e)
            if getattr(_kw(e, "return_tensors"), "value", None) is not None:  # a tokenizer's output: host tensors
                return isinstance(_kw(e, "return_tensors").value, ast.Constant)  # type: ignore[union-attr]
            return name.count(".") == 1 and name.startswith("torch.") and _kw(e, "device") is None and (
                name[6:] in self.HOST_FACTORIES or name[6:] in self.LEGACY)  # fmt: skip
        if not isinstance(e, ast.Name) or depth > 4:
            return False
        s = binding_before(self.mi.parent, e, e.id)
        return s is not None and self.factory_made(s.value, depth + 1)

    def host_built(self, c: ast.Call) -> bool:
        """The tensor this `.to(device)`/`.cuda()` moves was made on the host just before, in this function
        (`torch.LongTensor(range(n)).to(y.device)`, `torch.zeros(b, t).to(device)`): a copy every call, which
        the tensor made on the device (`torch.arange(n, device=...)`) would avoid."""
        recv = c.func.value if isinstance(c.func, ast.Attribute) else None
        return recv is not None and not isinstance(recv, ast.Constant) and self._host(recv)

    def blocking_copy_in(self, c: ast.Call) -> bool:
        """`im_data.data.resize_(data[0].size()).copy_(data[0])` (Faster R-CNN's loop): a batch from the loader
        copied into a preallocated device tensor without `non_blocking=True`, so the host waits for it."""
        if method_name(c) != "copy_" or len(c.args) != 1 or _kw(c, "non_blocking") is not None:
            return False
        dst: ast.expr = c.func.value  # type: ignore[attr-defined]
        while isinstance(dst, ast.Attribute) and dst.attr == "data" or isinstance(dst, ast.Call) and (
                method_name(dst) == "resize_" and isinstance(dst.func, ast.Attribute)):  # fmt: skip
            dst = dst.value if isinstance(dst, ast.Attribute) else dst.func.value  # type: ignore[attr-defined]
        src: ast.expr = c.args[0]
        while isinstance(src, (ast.Subscript, ast.Attribute)):
            src = src.value
        made = isinstance(src, ast.Call) and self.factory_made(src)  # `noises.data.copy_(t.randn(b, nz, 1, 1))`
        if not (isinstance(dst, ast.Name) and (isinstance(src, ast.Name) or made)):
            return False
        # moved there, or made there: `input_A = Tensor(b, c, h, w)` with `Tensor = torch.cuda.FloatTensor` (CycleGAN)
        moved = any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and dst.id in
                    {x for t in n.targets for x in target_names(t)}
                    and (moves_to_device(n.value) or self.cuda_type(n.value.func))
                    for n in self.mi.nodes)  # fmt: skip
        return moved and (made or self._from_loader(src))  # type: ignore[arg-type]

    def _from_loader(self, e: ast.Name) -> bool:
        """A batch: bound by `next(data_iter)` in this function, or by a loop over a loader."""
        fn = self.mi.enclosing_function(e)
        for n in walk_local(fn):
            if isinstance(n, ast.Assign) and e.id in {x for t in n.targets for x in target_names(t)}:
                if isinstance(n.value, ast.Call) and self.mi.call_name(n.value) == "next":
                    return True
            if isinstance(n, (ast.For, ast.AsyncFor)) and e.id in target_names(n.target):
                return self.mi._iterates_data(n.iter)
        return False

    def batch_target(self, name: str, at: ast.AST) -> bool:
        """`name` is bound by a loop around `at` over a loader (`for model_in, labels in train_loader:`): a batch,
        whatever it is called (not `for model in self.models:`)."""
        return any(isinstance(n, ast.For) and name in target_names(n.target) and self.mi._iterates_data(n.iter)
                   for n in self.mi.enclosing_loops(at))  # fmt: skip

    def on_device(self, e: ast.expr, at: ast.AST, depth: int = 0) -> bool:
        """`e` is already on the device where `at` runs, by the statements before it in its blocks:
        `x = x.cuda()` earlier, or the output of a call given such a tensor (`x_pred = netG(s.cuda())`). A
        `.cuda()` of it copies nothing (MelGAN's `netD(x_pred_t.cuda())`)."""
        if depth > 6:
            return False
        if isinstance(e, ast.Name):
            if self._moved_in_branch_before(e.id, at) or moved_whole_before(self.mi, e.id, at):
                return True
            value = self.value_before(e.id, at)
            if value is None and (value := self.value_before(e.id, at, unpack=True)) is not None:
                # a module's outputs share its device; a same-file helper's tuple may hold host-built tensors
                value = None if isinstance(value, ast.Call) and self.mi.targets_of(value) else value
            if value is None:  # (or a batch of an iterator built on the device: torchtext's `BucketIterator`)
                return self._device_param(e, depth) or device_iterators(self.mi) and iterated_batch(self.mi, e.id, at)
            return self.on_device(value, value, depth + 1)
        if isinstance(e, (ast.List, ast.Tuple)):  # `torch.cat([batch_y[:, :k], dec_inp])`: one device, all of them
            return any(self.on_device(x, at, depth + 1) for x in e.elts)
        if isinstance(e, ast.Attribute) and e.attr in ("shape", "dtype", "device", "ndim"):
            return False  # a tensor's metadata, on the host
        if isinstance(e, (ast.Subscript, ast.Attribute)):
            return self.on_device(e.value, at, depth + 1)
        if isinstance(e, ast.BinOp):
            return self.on_device(e.left, at, depth + 1) or self.on_device(e.right, at, depth + 1)
        if isinstance(e, ast.Compare):  # `(gt_label > 0)` of a device tensor is a device mask
            return any(self.on_device(x, at, depth + 1) for x in [e.left, *e.comparators])
        if not isinstance(e, ast.Call):
            return False
        name = self.mi.call_name(e)
        if MODULE_CALL.search(dotted(e.func).rpartition(".")[2]):
            return True  # a module's outputs live on its device (VoiceCraft's `out = self.model(batch)`, `out['loss']`)
        if name.startswith("torch.") and name.split(".")[-1] in self.HOST_FACTORIES:  # `torch.rand(n)`
            device = _kw(e, "device")
            return device is not None and not (isinstance(device.value, ast.Constant) and device.value.value == "cpu")
        meth = method_name(e) if isinstance(e.func, ast.Attribute) and not name.startswith("torch.") else ""
        if meth in ("size", "dim", "numel", "tolist", "item") or name in ("len", "int", "float"):
            return False  # Python numbers
        if meth and moves_to_device(e):
            return not (e.args and isinstance(e.args[0], ast.Constant) and e.args[0].value == "cpu")
        if meth in ("cpu", "numpy", "pin_memory"):
            return False
        if meth == "type" and e.args and re.match(r"torch\.[A-Z]\w*Tensor$", dotted(e.args[0])):
            return False  # `.type(torch.FloatTensor)`: a CPU tensor type, so a copy to the host (RND's mask)
        if meth and isinstance(e.func, ast.Attribute) and self.on_device(e.func.value, at, depth + 1):
            return True  # `.detach()`, `.view()` of a device tensor
        if (meth in self.HOST_KEEPING or meth in ("view_as", "reshape_as")) and self._host(e.func.value):
            return False  # the receiver's device, whatever its arguments' (wgan-gp's `alpha.expand_as(real_data)`)
        if name in ("torch.cat", "torch.stack") and e.args and appended(self.mi, e.args[0], self._at(depth)):
            return True  # the list holds only what was appended on the device (SAM-Med3D's click points)
        return any(self.on_device(a, at, depth + 1) for a in e.args)  # a module or function of device tensors

    def _at(self, depth: int) -> Callable[[ast.expr, ast.AST], bool]:
        return lambda v, c: self.on_device(v, c, depth + 1)

    def _device_param(self, e: ast.Name, depth: int) -> bool:
        """A parameter, read before anything is assigned to it, that every hot same-file call passes a tensor
        already on the device for (Autoformer's `_predict(batch_x, batch_y, ...)` after `batch_y =
        batch_y.float().to(self.device)`; its evaluation caller, not hot, passes the batch as loaded)."""
        fn = self.mi.enclosing_function(e)
        args = getattr(fn, "args", None)
        if args is None or e.id not in [a.arg for a in [*args.posonlyargs, *args.args]] or not unbound_before(e, fn):
            return False
        hot = [c for c in self.mi.calls_to.get(getattr(fn, "name", ""), []) if self.mi.in_hot(c)]
        return bool(hot) and all((g := passed_for(fn, c, e.id)) is not None and self.on_device(g, c, depth + 1)
                                 for c in hot)  # fmt: skip

    def _moved_in_branch_before(self, name: str, at: ast.AST) -> bool:
        """`if self.use_cuda: alpha = alpha.cuda()` in a block around `at`, before it, with no other binding of
        `name` between: on the device in a GPU run (a branch on another flag, `if use_batching: images =
        images.to(device)`, says nothing of the other path)."""
        child, n = at, self.mi.parent.get(at)
        while n is not None and not isinstance(n, (ast.Module, ast.Lambda)):
            if isinstance(n, (ast.For, ast.AsyncFor)) and child is not n.iter and name in target_names(n.target):
                return False  # `for images, labels in loader:` binds it anew every pass
            block = getattr(n, "body", None)
            if isinstance(block, list) and child in block:
                for s in reversed(block[: block.index(child)]):
                    last = s.body[-1] if isinstance(s, ast.If) else None
                    if (isinstance(last, ast.Assign) and re.search(r"cuda|gpu|device", ast.unparse(s.test), re.I)
                            and any(name in target_names(t) for t in last.targets)):  # fmt: skip
                        return isinstance(last.value, ast.Call) and self.on_device(last.value, last.value)
                    if any(isinstance(x, ast.Name) and x.id == name and isinstance(x.ctx, ast.Store)
                           for x in ast.walk(s)):  # fmt: skip
                        return False  # bound again (assigned, a loop or `with` target) after any such branch
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                break
            child, n = n, self.mi.parent.get(n)
        return False

    def value_before(self, name: str, at: ast.AST, unpack: bool = False) -> ast.expr | None:
        """The value last assigned to `name` in the statements before `at`'s, in its block or the blocks
        around it (not across a function boundary). With `unpack`, an unpacking gives `name`'s element
        (`a, b = a.to(d), b.to(d)`) or the call whose outputs it takes (`logit, cam, _ = self.disGA(x)`)."""
        s = binding_before(self.mi.parent, at, name)
        if s is None:
            return None
        single = len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
        return s.value if single else _element(s, name) if unpack else None


def _element(s: ast.Assign, name: str) -> ast.expr | None:
    t = s.targets[0] if len(s.targets) == 1 else None
    if not isinstance(t, ast.Tuple) or not all(isinstance(x, ast.Name) for x in t.elts):
        return None
    if isinstance(s.value, ast.Tuple) and len(s.value.elts) == len(t.elts):
        return s.value.elts[[x.id for x in t.elts].index(name)]  # type: ignore[attr-defined]
    return s.value if isinstance(s.value, ast.Call) else None


# A loss module or function called on predictions (not a `compute_loss(batch, model)` helper, which may move the
# batch itself): its value lives where the predictions do.
CRITERION = re.compile(r"^(\w*_)?(criterion|crit|loss_fn|loss_func|lossfn)(_\w*)?$|^(mse|l1|nll|ctc|bce)_loss$", re.I)


def _loop_source(target: ast.expr, it: ast.expr, name: str) -> ast.expr | None:
    """What a loop takes `name` from: `it` for `for name in it` (or `for a, name in it`), `lengths` for NCRFpp's
    `for idx, (seq, label, seqlen) in enumerate(zip(words, labels, lengths))`; None when `name` is not bound by
    this loop."""
    if isinstance(target, ast.Name):
        return it if target.id == name else None
    if not isinstance(target, ast.Tuple) or name not in target_names(target):
        return None
    func = dotted(it.func) if isinstance(it, ast.Call) and not it.keywords else ""
    if func == "enumerate" and len(target.elts) == 2 and it.args:  # type: ignore[attr-defined]  # (`enumerate(x, 0)`)
        return _loop_source(target.elts[1], it.args[0], name)  # type: ignore[attr-defined]
    if func == "zip" and len(target.elts) == len(it.args):  # type: ignore[attr-defined]
        return next((src for t, a in zip(target.elts, it.args, strict=True)  # type: ignore[attr-defined]
                     if (src := _loop_source(t, a, name)) is not None), None)  # fmt: skip
    return None if func in ("enumerate", "zip") else it  # `for src, tgt, euler in tqdm(loader)`: a batch's part


def unbound_before(e: ast.Name, fn: ast.AST) -> bool:
    """Nothing in `fn` binds `e`'s name (an assignment or a loop target) on a line before it: a parameter read as
    the callers passed it."""
    return not any(isinstance(n, (ast.Assign, ast.AugAssign, ast.For)) and n.lineno < e.lineno and e.id in
                   {x for t in getattr(n, "targets", [getattr(n, "target", None)]) if t for x in target_names(t)}
                   for n in walk_local(fn))  # fmt: skip
