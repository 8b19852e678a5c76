"""What the rules need to know about a module: where the hot loops are and which names hold tensors.

Hot regions (where a per-step cost is paid every step):
- the body of the innermost `for`/`while` loop around a `.backward()` call, an optimizer or scaler
  `.step()`, or a call to a function of the same module that does one of those;
- the whole body of a function named like a train step (`train_step`, `training_step`, `*_train_step`)
  or one that does a backward/step itself and is called from a loop of the module.
A *training loop* is any loop that contains a hot region (the epoch loop around the batch loop, too).

Boundary gates: statements under an `if` whose test uses `%` (`if step % log_every == 0:`) or a name
that says so (`log`, `print`, `eval`, `save`, `checkpoint`, `verbose`, `debug`, `report`) run once per
interval, not every step, and are not hot. A `# sync: <why>` comment marks an intended host read.

Tensor-ness is a heuristic, flow-insensitive per function: a name holds a tensor when it is assigned
from a `torch.*`/`F.*` call, a call of something named like a model or a loss, tensor arithmetic or
methods, `.grad`, or is the target of a loop over something named like a loader/dataset/batches; and it
does not when it is assigned from `.item()`, `float()`, `len()`, a literal, and so on.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

TENSOR_NAME = re.compile(
    r"^(loss|losses_t|logits|outputs?|out|preds?|predictions?|grads?|grad_norm|norm|total_norm|probs|"
    r"scores|targets?|labels|inputs|images|x|y|xb|yb|embeddings|hidden|features|activations?)$|"
    r"(_loss|_logits|_tensor|_t)$"
)
MODEL_NAME = re.compile(r"(model|net|module|encoder|decoder|teacher|student|criterion|loss_fn|lossfn|loss_func)",
                        re.I)  # fmt: skip
LOADER_NAME = re.compile(r"(loader|dataset|data|batches|iterator|dl)", re.I)
GATE_NAME = re.compile(r"(log|print|eval|valid|save|checkpoint|ckpt|verbose|debug|report|display|is_last|last_)", re.I)
TENSOR_METHODS = {
    "sum", "mean", "max", "min", "abs", "sqrt", "pow", "exp", "log", "norm", "detach", "float", "half", "double",
    "bfloat16", "to", "cuda", "clone", "view", "reshape", "squeeze", "unsqueeze", "softmax", "log_softmax",
    "argmax", "argmin", "any", "all", "isnan", "isinf", "isfinite", "clamp", "mul", "add", "sub", "div", "matmul",
    "contiguous", "flatten", "permute", "transpose", "std", "var", "prod", "cumsum", "masked_fill", "gather",
    "type_as", "long", "int", "bool", "eq", "ne", "gt", "lt", "ge", "le", "topk", "sort", "amax", "amin",
}  # fmt: skip
SCALAR_FUNCS = {"float", "int", "bool", "len", "range", "str", "round", "abs_", "enumerate", "zip", "isinstance"}
SCALAR_METHODS = {"item", "tolist", "numpy", "size", "dim", "numel", "__len__", "get_last_lr", "state_dict"}
TENSOR_COLLECTION = re.compile(
    r"^(tensors|grads|gradients|params|parameters|losses|norms|outputs|logits|weights|"
    r"preds|predictions|embeddings|features|activations)$|_tensors$|_grads$"
)
STEP_FUNCTION = re.compile(r"^(train|training)_step$|_(train|training)_step$|^train_one_step$|^train_batch$")
STEP_RECEIVER = re.compile(r"(opt|optim|optimizer|scaler)", re.I)


def dotted(node: ast.AST) -> str:
    """`torch.nn.functional.relu` for an Attribute/Name chain, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def call_name(call: ast.Call) -> str:
    return dotted(call.func)


def method_name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def is_step_call(node: ast.AST) -> bool:
    """`x.backward()`, `optimizer.step()`, `scaler.step(opt)`."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr == "backward":
        return True
    return node.func.attr == "step" and bool(STEP_RECEIVER.search(dotted(node.func.value) or ""))


def walk_local(node: ast.AST):
    """ast.walk that does not enter nested function or class definitions (nor lambdas)."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(n))


def is_gate(test: ast.expr) -> bool:
    for n in ast.walk(test):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
            return True
        if isinstance(n, ast.Name) and GATE_NAME.search(n.id):
            return True
        if isinstance(n, ast.Attribute) and GATE_NAME.search(n.attr):
            return True
    return False


@dataclass
class FunctionInfo:
    node: ast.AST
    tensors: set[str] = field(default_factory=set)
    scalars: set[str] = field(default_factory=set)
    tensor_lists: set[str] = field(default_factory=set)

    def is_tensor_name(self, name: str) -> bool:
        if name in self.scalars and name not in self.tensors:
            return False
        return name in self.tensors or bool(TENSOR_NAME.search(name)) and name not in self.scalars


class ModuleInfo:
    """Hot regions, training loops, gates and per-function tensor names of one parsed module."""

    def __init__(self, tree: ast.Module, source: str) -> None:
        self.tree, self.source, self.lines = tree, source, source.splitlines()
        # One walk builds the node list and the parent map that every rule reuses.
        self.parent: dict[ast.AST, ast.AST] = {}
        self.nodes: list[ast.AST] = []
        stack: list[ast.AST] = [tree]
        while stack:
            node = stack.pop()
            self.nodes.append(node)
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
                stack.append(child)
        self.nodes.reverse()  # parents before children, as ast.walk
        self.functions = {n.name: n for n in self.nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.step_functions = self._step_functions()
        self.hot_loops: set[ast.AST] = set()
        self.train_loops: set[ast.AST] = set()
        self.hot_functions: set[ast.AST] = set()
        self._find_hot()
        self.info: dict[ast.AST, FunctionInfo] = {}
        self.uses_cuda = bool(re.search(r"\.cuda\(|['\"]cuda|cuda\.is_available|device_count\(", source))

    # -- hot regions ----------------------------------------------------------------------------

    def _step_functions(self) -> set[str]:
        """Functions that take one training step: a backward/optimizer step not inside a loop of their own.
        (A function that loops over batches itself is an epoch function: its loop is the hot one.)"""
        names = set()
        for node in self.nodes:
            if is_step_call(node) and self.enclosing_loop(node) is None:
                fn = self.enclosing_function(node)
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(fn.name)
        return names

    def _calls_step(self, node: ast.AST) -> bool:
        if is_step_call(node):
            return True
        if isinstance(node, ast.Call):
            name = call_name(node).split(".")[-1]
            return name in self.step_functions or bool(STEP_FUNCTION.search(name))
        return False

    def enclosing_loop(self, node: ast.AST) -> ast.AST | None:
        n = self.parent.get(node)
        while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)):
            if isinstance(n, (ast.For, ast.AsyncFor, ast.While)):
                return n
            n = self.parent.get(n)
        return None

    def enclosing_function(self, node: ast.AST) -> ast.AST:
        n = self.parent.get(node)
        while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            n = self.parent.get(n)
        return n if n is not None else self.tree

    def _find_hot(self) -> None:
        for node in self.nodes:
            if self._calls_step(node):
                loop = self.enclosing_loop(node)
                if loop is not None:
                    self.hot_loops.add(loop)
                    outer = self.enclosing_loop(loop)
                    while outer is not None:
                        self.train_loops.add(outer)
                        outer = self.enclosing_loop(outer)
                    self.train_loops.add(loop)
        for name, fn in self.functions.items():
            if STEP_FUNCTION.search(name):
                self.hot_functions.add(fn)
        # A loop that calls a function holding a hot loop (an epoch function) is a training loop too.
        epoch_fns = {getattr(self.enclosing_function(loop), "name", None) for loop in self.hot_loops} - {None}
        if epoch_fns:
            for node in self.nodes:
                if isinstance(node, ast.Call) and call_name(node).split(".")[-1] in epoch_fns:
                    loop = self.enclosing_loop(node)
                    while loop is not None:
                        self.train_loops.add(loop)
                        loop = self.enclosing_loop(loop)
        called_in_loops = {
            call_name(n).split(".")[-1]
            for loop in self.hot_loops | self.train_loops
            for n in walk_local(loop)
            if isinstance(n, ast.Call)
        }
        for name in self.step_functions & called_in_loops:
            self.hot_functions.add(self.functions[name])

    def _gated(self, node: ast.AST, stop: ast.AST) -> bool:
        child, n = node, self.parent.get(node)
        while n is not None and n is not stop:
            if isinstance(n, ast.If) and child is not n.test and is_gate(n.test):
                return True
            child, n = n, self.parent.get(n)
        return False

    def in_hot(self, node: ast.AST) -> bool:
        """Runs every step: inside a hot loop's body or a hot function, and not under a boundary gate."""
        n = self.parent.get(node)
        while n is not None:
            if n in self.hot_loops or n in self.hot_functions:
                if isinstance(n, (ast.For, ast.AsyncFor)) and self._in_iter(node, n):
                    return False
                return not self._gated(node, n)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and n not in self.hot_functions:
                return False
            n = self.parent.get(n)
        return False

    def in_training_loop(self, node: ast.AST) -> bool:
        n = self.parent.get(node)
        while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            if n in self.train_loops:
                return True
            n = self.parent.get(n)
        return self.in_hot(node)

    def _in_iter(self, node: ast.AST, loop: ast.For | ast.AsyncFor) -> bool:
        n = node
        while n is not None and n is not loop:
            if n is loop.iter:
                return True
            n = self.parent.get(n)
        return False

    def has_sync_marker(self, line: int) -> bool:
        return 0 < line <= len(self.lines) and "# sync:" in self.lines[line - 1]

    # -- tensor-ness ----------------------------------------------------------------------------

    def function_info(self, node: ast.AST) -> FunctionInfo:
        fn = self.enclosing_function(node)
        if fn not in self.info:
            self.info[fn] = self._infer(fn)
        return self.info[fn]

    def _infer(self, fn: ast.AST) -> FunctionInfo:
        info = FunctionInfo(fn)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for a in fn.args.args + fn.args.kwonlyargs:
                if a.annotation is not None and "Tensor" in ast.unparse(a.annotation):
                    info.tensors.add(a.arg)
        body = list(walk_local(fn))
        for _ in range(2):  # a second pass lets names defined from other names settle
            for n in body:
                if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n.value is not None:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    kind = self.kind(n.value, info)
                    for t in targets:
                        for name in _target_names(t):
                            if kind == "tensor":
                                info.tensors.add(name)
                            elif kind == "scalar":
                                info.scalars.add(name)
                elif isinstance(n, (ast.For, ast.AsyncFor)) and self._iterates_data(n.iter):
                    target = n.target
                    if (isinstance(n.iter, ast.Call) and call_name(n.iter) == "enumerate"
                            and isinstance(target, ast.Tuple) and len(target.elts) == 2):  # fmt: skip
                        info.scalars.update(_target_names(target.elts[0]))  # the index
                        target = target.elts[1]
                    for name in _target_names(target):
                        info.tensors.add(name)
                if isinstance(n, ast.Assign) and isinstance(n.value, (ast.ListComp, ast.List)):
                    elts = [n.value.elt] if isinstance(n.value, ast.ListComp) else n.value.elts
                    if elts and all(self.kind(e, info, comp=n.value) == "tensor" for e in elts):
                        info.tensor_lists.update(name for t in n.targets for name in _target_names(t))
                elif isinstance(n, ast.Call) and method_name(n) == "append" and n.args:
                    if self.kind(n.args[0], info) == "tensor":
                        info.tensor_lists.add(dotted(n.func.value))
        return info

    def _iterates_data(self, it: ast.expr) -> bool:
        if isinstance(it, ast.Call) and call_name(it) in ("enumerate", "zip", "tqdm", "tqdm.tqdm"):
            return any(self._iterates_data(a) for a in it.args)
        name = dotted(it)
        return bool(name) and bool(LOADER_NAME.search(name.split(".")[-1])) and "range" not in name

    def comp_tensors(self, comp: ast.AST | None, info: FunctionInfo) -> set[str]:
        """Names a comprehension binds to elements of a tensor collection (`for g in grads`)."""
        out: set[str] = set()
        for gen in getattr(comp, "generators", []):
            it = gen.iter
            name = dotted(it.func) if isinstance(it, ast.Call) else dotted(it)
            last = name.split(".")[-1] if name else ""
            if TENSOR_COLLECTION.search(last) or last in info.tensor_lists:
                out.update(_target_names(gen.target))
        return out

    def kind(self, e: ast.expr, info: FunctionInfo, comp: ast.AST | None = None) -> str | None:
        """'tensor', 'scalar' or None (unknown) for an expression (inside comprehension `comp`, if any)."""
        if comp is not None and isinstance(e, ast.Name) and e.id in self.comp_tensors(comp, info):
            return "tensor"
        if comp is not None:
            bound = self.comp_tensors(comp, info)
            if bound and any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(e)):
                k = self.kind(e, FunctionInfo(info.node, info.tensors | bound, info.scalars, info.tensor_lists))
                if k is not None:
                    return k
        if isinstance(e, ast.Constant) or isinstance(e, (ast.JoinedStr, ast.List, ast.Dict, ast.Set, ast.Tuple)):
            return "scalar" if isinstance(e, (ast.Constant, ast.JoinedStr)) else None
        if isinstance(e, ast.Name):
            if e.id in info.scalars and e.id not in info.tensors:
                return "scalar"
            return "tensor" if info.is_tensor_name(e.id) else None
        if isinstance(e, ast.Attribute):
            if e.attr in ("grad", "data", "weight", "bias"):
                return "tensor"
            if e.attr in ("shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"):
                return "scalar"
            return "tensor" if TENSOR_NAME.search(e.attr) else None
        if isinstance(e, ast.Subscript):
            return "tensor" if self.kind(e.value, info) == "tensor" else None
        if isinstance(e, ast.BinOp):
            kinds = {self.kind(e.left, info), self.kind(e.right, info)}
            return "tensor" if "tensor" in kinds else ("scalar" if kinds == {"scalar"} else None)
        if isinstance(e, ast.UnaryOp):
            return self.kind(e.operand, info)
        if isinstance(e, ast.Compare):
            if all(isinstance(op, (ast.Is, ast.IsNot)) for op in e.ops):
                return "scalar"  # identity tests never read values
            kinds = {self.kind(x, info) for x in [e.left, *e.comparators]}
            return "tensor" if "tensor" in kinds else None
        if isinstance(e, ast.BoolOp):
            return "tensor" if any(self.kind(v, info) == "tensor" for v in e.values) else None
        if isinstance(e, ast.Call):
            name = call_name(e)
            meth = method_name(e)
            if meth in SCALAR_METHODS or name in SCALAR_FUNCS:
                return "scalar"
            if name.startswith(("torch.", "F.", "nn.functional.")) and not name.startswith(
                ("torch.cuda.", "torch.device", "torch.no_grad", "torch.distributed", "torch.compile")
            ):
                return "tensor"
            if meth in TENSOR_METHODS and self.kind(e.func.value, info) == "tensor":  # type: ignore[attr-defined]
                return "tensor"
            base = name.split(".")[-1] if name else ""
            if base and MODEL_NAME.search(base) and not base[:1].isupper():
                return "tensor"
            return None
        return None


def _target_names(t: ast.expr) -> list[str]:
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _target_names(e)]
    return []
