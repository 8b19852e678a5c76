"""The type model: is an expression a tensor, a Python value, or unknown?

Flow-insensitive per function, with three sources of evidence, strongest first:
1. assignments: a name assigned from a `torch.*`/`F.*` call, a model or loss call, tensor methods or
   arithmetic on tensors, `.grad`, or bound by a loop over a loader is a tensor; a name assigned from
   `.item()`, `float()`, `len()`, a literal, `time.*()`, arithmetic on such reads, or anything read out
   of `torch.load(...)` (a checkpoint dict holds step counters and floats beside tensors) is a Python
   value. Once a name has such evidence its spelling no longer matters.
2. same-file calls: a parameter takes the kind every call site in the module passes for it, and a call
   of a same-file function has the kind of what it returns.
3. names, only for names with no other evidence: `loss`, `logits`, `*_loss`, ... look like tensors.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from hotloop.lint.attributes import class_attribute_kind
from hotloop.lint.forks import (
    RECORD,
    backed_up,
    branch_kind,
    builtin_kind,
    callback_calls,
    captured_kind,
    compare_kind,
    counter_entry,
    entry_kind,
    inner_kind,
    iterates_data,
    module_instance,
    narrowed,
    numeric_default,
    operands,
    option_element,
    passed_back,
    progress_of_enumerate,
    read_back,
    tensor_values,
    unknown_before,
    unpacked,
)
from hotloop.lint.syntax import assigned_values, dotted, is_str, method_name, read_of, refers, target_names, zeroed

TENSOR_NAME = re.compile(  # (not a flag: rsl_rl's `symmetry.use_mirror_loss`)
    r"^(?!(use|do|is|has|enable|with|apply|compute|calc)_)(?:(loss|losses_t|logits|outputs?|out|preds?|predictions?|"
    r"grads?|grad_norm|norm|total_norm|probs|scores|targets?|labels|inputs|images|x|y|xb|yb|embeddings|hidden|"
    r"features|activations?|tensor)$|.*(_loss|_logits|_tensor|_t)$)"
)
MODEL_NAME = re.compile(r"(?i)(model|net|module|encoder|decoder|teacher|student|criterion|loss_fn|lossfn|loss_func)")
LOADER_NAME = re.compile(r"(loader|dataset|data|batches|iterator|dl)", re.I)
TENSOR_METHODS = {
    "sum", "mean", "max", "min", "abs", "sqrt", "pow", "exp", "log", "norm", "detach", "float", "half", "double",
    "bfloat16", "to", "cuda", "clone", "view", "reshape", "squeeze", "unsqueeze", "softmax", "log_softmax",
    "argmax", "argmin", "any", "all", "isnan", "isinf", "isfinite", "clamp", "mul", "add", "sub", "div", "matmul",
    "contiguous", "flatten", "permute", "transpose", "std", "var", "prod", "cumsum", "masked_fill", "gather",
    "type_as", "long", "int", "bool", "eq", "ne", "gt", "lt", "ge", "le", "topk", "sort", "amax", "amin",
    "chunk", "unbind", "narrow", "expand", "expand_as", "index_select", "roll", "flip", "new_zeros", "new_ones",
    "new_full", "new_empty", "sigmoid", "tanh", "exp_", "neg", "square", "logsumexp", "nan_to_num", "byte",
    "dot", "mm", "bmm", "mv", "outer", "relu", "clamp_min", "clamp_max", "float_power", "reciprocal",
}  # fmt: skip
TENSOR_ONLY = {"byte", "bool", "long", "int", "detach", "unsqueeze", "masked_fill"}  # (not NumPy's, not nn.Module's)
READS = {"item", "tolist", "numpy"}  # methods that bring a tensor's value to Python
SCALAR_FUNCS = {
    "float", "int", "bool", "len", "range", "str", "round", "enumerate", "zip", "isinstance", "repr", "time.time",
    "time.perf_counter", "time.monotonic", "math.sqrt", "math.exp", "math.log", "math.cos", "np.mean", "numpy.mean",
    "np.array", "numpy.array", "os.path.join", "dict", "list", "tuple", "json.load", "json.loads",
}  # fmt: skip
SCALAR_METHODS = READS | {"size", "dim", "numel", "__len__", "get_last_lr", "state_dict", "format", "join", "get_lr",
                          "element_size", "nelement", "keys", "items", "values", "copy", "parse_args", "decode",
                          "startswith", "endswith", "split", "strip", "lower", "upper", "replace"}  # fmt: skip
NOT_TENSOR_TORCH = re.compile(
    r"^torch\.(cuda|device|no_grad|distributed|compile|load|save|manual_seed|get_rng_state|set_grad_enabled|"
    r"is_tensor|is_grad_enabled|is_floating_point|autocast|amp|backends|utils|optim|nn\.(?!functional)|"
    r"set_float32|get_default|inference_mode|jit|profiler|multiprocessing|hub|Generator|Size|dtype|finfo|iinfo)"
)
HYPER = ("lr", "initial_lr", "momentum", "weight_decay", "betas", "eps", "batch_size")  # numbers (MASTER's batch_size)
CONFIG_NAME = re.compile(r"^(self\.)?(\w+_)?(args|opt|opts|config|cfg|conf|hparams|hp|flags|settings|options|parser)$")
TENSOR_COLLECTION = re.compile(r"^(tensors|grads|gradients|params|parameters|losses|norms|outputs|logits|weights|"
                               r"preds|predictions|embeddings|features|activations)$|_tensors$|_grads$")  # fmt: skip


@dataclass
class FunctionInfo:
    node: ast.AST
    tensors: set[str] = field(default_factory=set)
    scalars: set[str] = field(default_factory=set)  # Python values: evidence that a name is not a tensor
    tensor_lists: set[str] = field(default_factory=set)
    list_lines: dict[str, int] = field(default_factory=dict)  # where a name was last made a list of tensors
    history: dict[str, list[tuple[int, str | None]]] = field(default_factory=dict)  # name -> [(line, kind)]: last wins
    settled: dict[str, list[tuple[int, str | None]]] = field(default_factory=dict)  # the last whole pass's

    def tensor_list_at(self, name: str, line: int) -> bool:
        """`name` holds a list of tensors at `line`: made one, and not reassigned between (`y = np.array(y)`)."""
        made = self.list_lines.get(name)
        if name not in self.tensor_lists or made is None:
            return name in self.tensor_lists
        return not any(made < at < line for at, _ in self.history.get(name, []))

    def is_tensor_name(self, name: str) -> bool:
        if name in self.tensors:
            return True
        return name not in self.scalars and bool(TENSOR_NAME.search(name))


class KindModel:
    """Mixed into ModuleInfo: needs `call_name`, `functions`, `calls_to`, `walk_local`."""

    def _kinds_init(self) -> None:
        self.info: dict[ast.AST, FunctionInfo] = {}
        self._returns: dict[ast.AST, str | None] = {}
        self._in_progress: set[ast.AST] = set()
        self._working: set[ast.AST] = set()  # functions whose info is being inferred
        self._provisional = False  # the inference under way read one of their provisional infos
        self._tentative: set[ast.AST] = set()  # infos made from provisional ones, dropped when the outermost ends
        self.attribute_kinds: dict[tuple[ast.AST, str], str | None] = {}  # `attributes.class_attribute_kind`'s

    def function_info(self, node: ast.AST) -> FunctionInfo:
        fn = self.enclosing_function(node)  # type: ignore[attr-defined]
        return self.info_of(fn)

    def info_of(self, fn: ast.AST) -> FunctionInfo:
        """`fn`'s kinds. A function whose inference read another's provisional (still empty) info, asked while
        that one is being worked out (VITS' `slice_segments`, whose caller `rand_slice_segments` passes its
        `ids_str`), is kept only until the outermost inference ends, then worked out again when next asked:
        kept for good, it would answer "unknown" depending on which function was asked first."""
        if fn in self.info:
            self._provisional |= fn in self._working or fn in self._tentative
            return self.info[fn]
        self.info[fn] = FunctionInfo(fn)  # provisional, so recursion terminates
        outer, self._provisional = self._provisional, False
        self._working.add(fn)
        try:
            self.info[fn] = info = self._infer(fn)
        finally:
            self._working.discard(fn)
        tentative, self._provisional = self._provisional, outer or self._provisional
        if tentative and self._working:
            self._tentative.add(fn)
        elif not self._working:
            for f in self._tentative - {fn}:
                del self.info[f]
            self._tentative.clear()
        return info

    def _infer(self, fn: ast.AST) -> FunctionInfo:
        info = FunctionInfo(fn)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._param_kinds(fn, info)
        body = sorted((n for n in self.walk_local(fn) if hasattr(n, "lineno")),  # type: ignore[attr-defined]
                      key=lambda n: (n.lineno, n.col_offset))  # fmt: skip  # (source order: `smooth = 0` first)
        backed = backed_up(self, body)  # (assignments a `.backward()` proves to hold a tensor)
        for _ in range(2):  # a second pass lets names defined from other names settle
            history: dict[str, list[tuple[int, str | None]]] = {}
            info.settled = info.history  # (attributes: every assignment in the function counts, below ones too)
            info.history = history  # (filled as the pass goes: a use reads the assignments above it in this pass)
            for n in body:
                if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n.value is not None:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    value = n.value
                    if isinstance(n, ast.AugAssign):  # `running += l`: the target as its assignments above made it
                        left = ast.copy_location(ast.Name(id=dotted(n.target) or "_", ctx=ast.Load()), n.target)
                        value = ast.BinOp(left=left, op=n.op, right=n.value)
                    kind = self.kind(value, info)
                    placeholder = isinstance(value, ast.Constant) and value.value is None
                    by_position = {k: v for t in targets for k, v in unpacked(self, t, value, info).items()}
                    end = n.end_lineno or n.lineno  # (a use inside a multi-line value reads the name from before)
                    for name, k in by_position.items():
                        history.setdefault(name, []).append((end, k))
                        if k == "scalar":
                            info.scalars.add(name)
                        elif k == "tensor":
                            info.tensors.add(name)
                    targets = [t for t in targets if not by_position or not isinstance(t, ast.Tuple)]
                    for t in targets:
                        if isinstance(t, ast.Attribute) and dotted(t).startswith("self."):  # `self.cur_loss = l.item()`
                            # `self.avg = self.avg * (1 - f) + now * f`: what it adds decides, not its name
                            k = self.kind(zeroed(value, dotted(t)), info) if refers(value, dotted(t)) else kind
                            history.setdefault(dotted(t), []).append((n.lineno, "none" if placeholder else k))
                        for name in target_names(t):
                            k = None if isinstance(t, ast.Tuple) and RECORD.search(name) and kind == "tensor" else kind
                            k = "tensor" if (id(n), name) in backed else k
                            if k is None and name in passed_back(self, value, info):
                                k = "tensor"  # `a, b = random_crop(a, b)`: a tensor passed through a transform
                            history.setdefault(name, []).append((end, "none" if placeholder else k))
                            if placeholder:
                                continue  # `x = None` (else `x = tensor`): says nothing about x
                            if k == "tensor":
                                info.tensors.add(name)
                                info.scalars.discard(name)
                            elif kind == "scalar" and name not in info.tensors:
                                info.scalars.add(name)
                if isinstance(n, (ast.For, ast.AsyncFor)):  # a loop target is an assignment too
                    for name, kind in self._loop_kinds(n, info).items():
                        history.setdefault(name, []).append((n.lineno, kind))
                        if kind == "tensor":
                            info.tensors.add(name)
                        elif kind == "scalar":
                            info.scalars.add(name)
                if isinstance(n, ast.Assign) and isinstance(n.value, (ast.ListComp, ast.List)):
                    elts = [n.value.elt] if isinstance(n.value, ast.ListComp) else n.value.elts
                    if elts and all(self.kind(e, info, comp=n.value) == "tensor" for e in elts):
                        for name in (name for t in n.targets for name in target_names(t)):
                            info.tensor_lists.add(name)
                            info.list_lines[name] = max(info.list_lines.get(name, 0), n.lineno)
                elif isinstance(n, ast.Call) and method_name(n) == "append" and n.args:
                    if (appended := self.kind(n.args[0], info)) == "scalar":  # `running_loss.append(l.item())`
                        info.scalars.add(dotted(n.func.value))
                    elif appended == "tensor":
                        key = dotted(n.func.value)
                        info.tensor_lists.add(key)
                        info.list_lines[key] = max(info.list_lines.get(key, 0), n.lineno)
            info.history = history
        return info

    def _loop_kinds(self, n: ast.For | ast.AsyncFor, info: FunctionInfo) -> dict[str, str | None]:
        """What a loop binds: batches of a loader are tensors (its `enumerate` index an int); `range` binds ints;
        iterating a tensor binds tensors (also inside `zip(...)`/`enumerate(...)`, position by position)."""
        it, target = n.iter, n.target
        if isinstance(it, ast.Name):  # `data_iter = enumerate(loader)` ... `for i, (x, y) in data_iter:`
            made = assigned_values(it.id, self.walk_local(info.node))  # type: ignore[attr-defined]
            one = made[0] if len(made) == 1 and isinstance(made[0], ast.Call) else None  # also `tqdm(enumerate(...))`
            if one is not None and (self.call_name(one) in ("enumerate", "zip") or progress_of_enumerate(self, one)):  # type: ignore[attr-defined]
                it = one
        if isinstance(it, ast.Call) and progress_of_enumerate(self, it):
            it = it.args[0]  # `tqdm(enumerate(zip(a_loader, b_loader)), total=n)`: the enumerate inside
        out: dict[str, str | None] = {name: None for name in target_names(target)}
        if isinstance(target, ast.Name) and isinstance(it, (ast.Name, ast.Attribute)) and any(
            isinstance(x, ast.Subscript) and isinstance(x.slice, ast.Name) and x.slice.id == target.id
            and ast.unparse(x.value) == ast.unparse(it) for s in n.body for x in ast.walk(s)
        ):  # fmt: skip
            return {target.id: "scalar"}  # `for k in batch: batch[k] = ...`: a dict's keys
        if self._iterates_data(it):
            if (isinstance(it, ast.Call) and self.call_name(it) == "enumerate"  # type: ignore[attr-defined]
                    and isinstance(target, ast.Tuple) and len(target.elts) == 2):  # fmt: skip
                out.update(dict.fromkeys(target_names(target.elts[0]), "scalar"))
                target = target.elts[1]
            if (isinstance(it, ast.Call) and self.call_name(it) == "zip" and isinstance(target, ast.Tuple)  # type: ignore[attr-defined]
                    and len(target.elts) == len(it.args)):  # fmt: skip
                for a, t in zip(it.args, target.elts, strict=True):  # `zip(loader, range(n))`: position by position
                    is_range = isinstance(a, ast.Call) and self.call_name(a) == "range"  # type: ignore[attr-defined]
                    kind = "tensor" if self._iterates_data(a) else ("scalar" if is_range else None)
                    out.update(dict.fromkeys(target_names(t), kind))
                return out
            out.update(dict.fromkeys(target_names(target), "tensor"))
            return out
        if isinstance(it, ast.Call) and self.call_name(it) == "range":  # type: ignore[attr-defined]
            return dict.fromkeys(out, "scalar")
        pairs: list[tuple[ast.expr | None, ast.expr]] = [(it, target)]
        if isinstance(it, ast.Call) and self.call_name(it) in ("zip", "enumerate") and isinstance(target, ast.Tuple):  # type: ignore[attr-defined]
            args = it.args if self.call_name(it) == "zip" else [None, *it.args]  # type: ignore[attr-defined]
            pairs = list(zip(args, target.elts, strict=False))
        for src, tgt in pairs:
            if src is None or isinstance(src, ast.Call) and method_name(src) in ("numpy", "tolist"):  # numpy data
                out.update(dict.fromkeys(target_names(tgt), "scalar"))
            elif isinstance(src, ast.Name) and isinstance(tgt, ast.Name) and self.kind(src, info) == "tensor":
                out[tgt.id] = "tensor"
            elif src is not None and tensor_values(self, src, info) and not read_back(self, src, n, info):
                # `for k, v in loss_dict.items()` (Moment-DETR), unless an earlier loop stored `.item()`s (DBNet)
                out.update(dict.fromkeys(target_names(tgt.elts[-1] if isinstance(tgt, ast.Tuple) else tgt), "tensor"))
        return out

    def _param_kinds(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, info: FunctionInfo) -> None:
        """Annotations first; else what every same-file call site passes (positionally or by keyword)."""
        params = [a.arg for a in fn.args.args]
        offset = 1 if params[:1] in (["self"], ["cls"]) else 0
        for a in fn.args.args + fn.args.kwonlyargs:
            if a.annotation is not None:
                ann = ast.unparse(a.annotation)
                if "Tensor" in ann:
                    info.tensors.add(a.arg)
                elif re.fullmatch(r"(int|float|bool|str|Optional\[(int|float|str)\]|(int|float|str) \| None)", ann):
                    info.scalars.add(a.arg)
        calls = [*self.calls_to.get(fn.name, []), *callback_calls(self, fn)]  # type: ignore[attr-defined]
        if not calls or fn in self._in_progress:
            return
        self._in_progress.add(fn)
        try:
            for i, p in enumerate(params[offset:]):
                kinds = set()
                for c in calls:
                    arg = c.args[i] if i < len(c.args) and not isinstance(c.args[i], ast.Starred) else None
                    kw = next((k.value for k in c.keywords if k.arg == p), None)
                    e = arg if arg is not None else kw
                    if e is None:
                        kinds.add("default")
                        continue
                    kinds.add(self.kind(e, self.function_info(e)))
                if p in info.tensors or p in info.scalars:
                    continue
                if "tensor" in kinds:
                    info.tensors.add(p)
                elif kinds and kinds <= {"scalar", "default"} and "scalar" in kinds:
                    info.scalars.add(p)
        finally:
            self._in_progress.discard(fn)

    def return_kind(self, fn: ast.AST) -> str | None:
        if fn in self._returns:
            return self._returns[fn]
        self._returns[fn] = None  # recursion guard
        outer, self._provisional = self._provisional, False
        kinds = {self.kind(n.value, self.info_of(fn)) for n in self.walk_local(fn)  # type: ignore[attr-defined]
                 if isinstance(n, ast.Return) and n.value is not None}  # fmt: skip
        kind = "tensor" if "tensor" in kinds else ("scalar" if kinds == {"scalar"} else None)
        provisional, self._provisional = self._provisional, outer or self._provisional
        self._returns[fn] = kind
        if provisional and self._working:  # read an info still being worked out (DropEdge's `outputs = train(...)`)
            del self._returns[fn]  # so, like such an info (`info_of`), worked out again when next asked
        return kind

    def _iterates_data(self, it: ast.expr) -> bool:
        return iterates_data(self, it, LOADER_NAME)

    def comp_tensors(self, comp: ast.AST | None, info: FunctionInfo) -> set[str]:
        """Names a comprehension binds to elements of a tensor collection (`for g in grads`)."""
        out: set[str] = set()
        for gen in getattr(comp, "generators", []):
            it = gen.iter
            name = dotted(it.func) if isinstance(it, ast.Call) else dotted(it)
            last = name.split(".")[-1] if name else ""
            if TENSOR_COLLECTION.search(last) or last in info.tensor_lists:
                out.update(target_names(gen.target))
        return out

    def kind(self, e: ast.expr, info: FunctionInfo, comp: ast.AST | None = None) -> str | None:
        """'tensor', 'scalar' (a Python value) or None (unknown), inside comprehension `comp` if given."""
        if comp is not None:
            bound = self.comp_tensors(comp, info)
            if isinstance(e, ast.Name) and e.id in bound:
                return "tensor"
            if bound and any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(e)):
                k = self.kind(e, FunctionInfo(info.node, info.tensors | bound, info.scalars, info.tensor_lists))
                if k is not None:
                    return k
        if isinstance(e, (ast.Constant, ast.JoinedStr)):
            return "scalar"
        if isinstance(e, ast.DictComp):  # `{k: v * w[k] for k, v in losses.items()}`: indexed like a tensor
            value = self.kind(e.value, info, comp=e)
            if value == "scalar":
                return "scalar"  # `{k: v.item() for ...}` holds numbers
            if any(tensor_values(self, g.iter, info) for g in e.generators):
                return "tensor"
        if isinstance(e, (ast.List, ast.Dict, ast.Set, ast.Tuple)):  # DropEdge's `return (loss.item(), t)`: numbers;
            # a dict of tensors is used like a criterion's loss dict (SAM-HQ); one of zeros is filled later (ScanRefer)
            kinds = {self.kind(x, info) for x in (e.values if isinstance(e, ast.Dict) else e.elts)}
            if kinds == {"tensor"} and isinstance(e, ast.Dict):
                return "tensor"
            zeros = isinstance(e, ast.Dict) and all(isinstance(v, ast.Constant) for v in e.values)  # filled later
            return "scalar" if kinds == {"scalar"} and not zeros else None  # (EMANet's `{'loss': loss.item()}`)
        if isinstance(e, ast.Name):
            if (k := narrowed(self.parent, e)) or option_element(self.parent, e, CONFIG_NAME):  # type: ignore[attr-defined]
                return "tensor" if k == "tensor" else "scalar"
            if (k := inner_kind(self, e, info, TENSOR_NAME, LOADER_NAME)) != "free":  # a lambda's or comprehension's
                return k
            lines = [(line, k) for line, k in info.history.get(e.id, ()) if line < getattr(e, "lineno", 0)]
            pair = {lines[-1][1], lines[-2][1]} if len(lines) > 1 else set()
            if pair in ({"tensor", "scalar"}, {None, "scalar"}) and (None not in pair or TENSOR_NAME.search(e.id)):
                branch = branch_kind(self, e, info, lines[-2][0], lines[-1][0], TENSOR_NAME)
                if branch is not None:
                    return branch
            before = [k for _, k in lines]
            if before and before[-1] != "none":  # the assignment above the use decides: `x = meter.avg` ...
                if before[-1] is not None:  # `torch.tensor([x])` ... `x = t` below does not make it a tensor
                    return before[-1]
                return "tensor" if TENSOR_NAME.search(e.id) else None
            if e.id in info.scalars and e.id not in info.tensors or not before and numeric_default(self, e, info.node):
                return "scalar"  # (a parameter `std=0` tested before it is made a tensor, TD-MPC's `pi`)
            if not before and e.id not in info.tensors:
                captured = captured_kind(self, e.id, info)
                if captured is not None:
                    return captured
            return "tensor" if info.is_tensor_name(e.id) else None
        if isinstance(e, ast.Attribute):
            if e.attr in ("shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"):
                return "scalar"
            kinds = {k for _, k in [*info.history.get(dotted(e), ()), *info.settled.get(dotted(e), ())]} - {"none"}
            if kinds:  # what this function assigns to `self.x` (anywhere in it: attributes outlive one call)
                return "tensor" if "tensor" in kinds else ("scalar" if kinds == {"scalar"} else None)
            if CONFIG_NAME.match(dotted(e.value)):
                return "scalar"  # `args.bce_loss`, `self.config.lr`: options, whatever their names
            if (k := class_attribute_kind(self, e, info.node)) is not None:
                return k  # what the class's other methods (its `__init__`) assign to `self.x`
            base = self.kind(e.value, info)
            if base == "scalar":
                return "scalar"  # an attribute of a Python value (args.lr, ckpt.step)
            if e.attr in ("grad", "data", "weight", "bias"):
                return "tensor"
            return "tensor" if TENSOR_NAME.search(e.attr) else None
        if isinstance(e, ast.Subscript):
            root = e.value
            while isinstance(root, ast.Subscript):
                root = root.value
            if CONFIG_NAME.match(dotted(root)) and isinstance(e.slice, ast.Constant):
                return "scalar"  # `self.config["model"]["lambda_loss"]`: an option (pytorch-superpoint)
            if (counter_entry(info.node, e) or isinstance(e.slice, ast.Constant) and e.slice.value in HYPER
                    or re.search(r"loss\w*\.data\[0\]$", ast.unparse(e).lower())):  # fmt: skip
                return "scalar"  # (`[g["lr"] for g in opt.param_groups]`: options; `loss.data[0]`: 0.3's item())
            if (k := entry_kind(self, e, info)) is not None:
                return k
            if isinstance(e.value, ast.Name) and narrowed(self.parent, e.value) == "container":  # type: ignore[attr-defined]
                return None  # an element of a list or tuple: a tensor as likely as not
            base = self.kind(e.value, info)
            return base if base in ("tensor", "scalar") else None
        if isinstance(e, ast.BinOp):
            if is_str(e):
                return "scalar"  # `title + ' ' + fmt(losses)`: string concatenation
            kinds = {self.kind(e.left, info), self.kind(e.right, info)}
            if "tensor" in kinds:
                return "tensor"
            if kinds == {"scalar"}:
                return "scalar"
            # Arithmetic on a Python value with names showing no sign of a tensor (`loss.item() * accum`) is a Python
            # number; an unknown call may return a tensor. A name assigned from something unknown is no such sign
            # either way (LATTICE's `self.decay * regularizer`, `regularizer` a sum of untyped `(u ** 2).sum()`).
            if "scalar" in kinds and not any(isinstance(x, ast.Call) and self.kind(x, info) != "scalar"
                                             for x in ast.walk(e)) and not any(
                    unknown_before(x, info) for x in operands(e)):  # fmt: skip
                return "scalar"
            return None
        if isinstance(e, ast.UnaryOp):
            return self.kind(e.operand, info)
        if isinstance(e, ast.Compare):
            return compare_kind(self, e, info)
        if isinstance(e, ast.BoolOp):
            kinds = {self.kind(v, info) for v in e.values}
            return "tensor" if "tensor" in kinds else ("scalar" if kinds == {"scalar"} else None)
        if isinstance(e, ast.IfExp):
            for a, b in ((e.body, e.orelse), (e.orelse, e.body)):
                if isinstance(b, ast.Constant) and b.value is None:  # `target if len(target) > 0 else None`
                    return self.kind(a, info)
            kinds = {self.kind(e.body, info), self.kind(e.orelse, info)}
            if "scalar" in kinds and (
                any(isinstance(b, ast.Name) for b in (e.body, e.orelse))
                or read_of(e.body, e.orelse)
                or read_of(e.orelse, e.body)
            ):
                return "scalar"  # `g = g.item() if isinstance(g, torch.Tensor) else g`: a Python number after
            return "tensor" if "tensor" in kinds else ("scalar" if kinds == {"scalar"} else None)
        if isinstance(e, ast.Call):
            return self._call_kind(e, info)
        return None

    def _call_kind(self, e: ast.Call, info: FunctionInfo) -> str | None:
        name = self.call_name(e)  # type: ignore[attr-defined]
        meth = method_name(e)
        if name in ("list", "tuple") and e.args and (k := self.kind(e.args[0], info)) != "scalar":
            if isinstance(e.args[0], (ast.GeneratorExp, ast.ListComp)) and self.kind(
                    e.args[0].elt, info, comp=e.args[0]) == "tensor":  # fmt: skip
                return "tensor"  # `tuple(torch.as_tensor(x, device=d) for x in xs)`: tensors, unpacked one by one
            return k  # `batch = list(next(loader_iter))` (UER): a list of the batch's tensors
        batch_values = meth == "values" and self.kind(e.func.value, info) == "tensor"  # type: ignore[attr-defined]
        if meth in SCALAR_METHODS and not batch_values or name in SCALAR_FUNCS and not (name == "dict" and e.keywords):
            return "scalar"  # (`dict(loss=l)` holds tensors; so does a batch's `.values()`: pytorch3d's NeRF)
        if meth in ("clip_grad_norm_", "get_total_norm"):
            return "tensor"  # the total norm, a device tensor (`torch.nn.utils` is otherwise not tensor-valued)
        if (meth == "apply" and isinstance(e.func, ast.Attribute) and dotted(e.func.value)[:1].isupper()
                and e.args and all(self.kind(a, info) != "scalar" for a in e.args)):  # fmt: skip
            return "tensor"  # `AllReduce.apply(t)`: an autograd Function applied to a tensor
        if name.startswith("torch.load") or name.endswith(".load_state_dict"):
            return "scalar"  # a checkpoint dict: what is read from it is treated as Python data
        if name.startswith("torch.") and not NOT_TENSOR_TORCH.match(name):
            return "tensor"
        if meth in TENSOR_METHODS and isinstance(e.func, ast.Attribute):
            recv = self.kind(e.func.value, info)
            if recv == "scalar" and (meth == "cuda" or meth == "to" and e.args and "device" in ast.unparse(e.args[0])):
                return "tensor"  # `cache_dict["ray_bundle"].to(device)` (krrish94's NeRF): only tensors are moved
            if recv in ("tensor", "scalar") or recv is None and meth in TENSOR_ONLY:
                return recv or "tensor"  # `batch["has_pose_3d"].byte()` (SPIN): only a tensor has that method
        if meth == "get" and isinstance(e.func, ast.Attribute) and self.kind(e.func.value, info) == "scalar":
            return "scalar"
        base = name.split(".")[-1] if name else ""
        if re.match(r"^_*(is|has|should|can|use)_|^[A-Z]\w*(Meter|Average)$", base):
            return "scalar"  # a predicate (`is_compiled_module(m)`), a meter (`train_loss = AverageMeter()`)
        local = self.functions.get(base)  # type: ignore[attr-defined]  # (or `sess.train_batch(...)`: EMANet)
        if local and (name == base or name.startswith("self.") or name.rpartition(".")[0] in self.instances):  # type: ignore[attr-defined]
            k = self.return_kind(local[-1])
            if k is not None:
                return k
        elif (k := self.remote_return_kind(e)) is not None:  # type: ignore[attr-defined]
            return k
        if base == "forward" and "." in name and name != "self.forward":
            return "tensor"  # `self.q_eval.forward(states)` (a DQN's network by any name): a module's output
        if (base and (MODEL_NAME.search(base) or "loss" in base.lower()) and not base[:1].isupper()
                and not re.search(r"(scale|scaling|weight|factor|coef|type|name)s?$|loss_?scale", base)):  # fmt: skip
            return "tensor"
        if re.search(r"reduce|gather|all_reduce", base) and any(self.kind(a, info) == "tensor" for a in e.args):
            return "tensor"  # `reduce_dict(loss_dict)`, `reduce_tensor(loss)`: tensors across ranks
        if name == "sum" and e.args and tensor_values(self, e.args[0], info):
            return "tensor"  # Python sum of tensors is a tensor
        if name in ("max", "min", "abs", "sum") and (k := builtin_kind(self, e, info)) is not None:
            return k
        if isinstance(e.func, (ast.Name, ast.Attribute)) and module_instance(self, dotted(e.func)):
            return "tensor"  # `mse = torch.nn.MSELoss()` ... `mse(a, b)`
        cls = getattr(self, "instances", {}).get(dotted(e.func))  # `self.D = Discriminator(...)` ... `self.D(x)`
        if cls is not None and any(isinstance(f, ast.FunctionDef) and f.name == "forward" for f in cls.body):
            return "tensor"
        return None
