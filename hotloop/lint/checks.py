"""The checks: one pass over a module's AST, each node offered to the rules that care about its type.

Each finding carries an optional `Edit` (for `--fix`): a source span and its replacement.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from hotloop.lint.analysis import (
    MODEL_NAME,
    ModuleInfo,
    assigned_values,
    call_name,
    dotted,
    method_name,
    target_names,
    walk_local,
)
from hotloop.lint.branches import BranchChecks, built_once, is_test, never_runs
from hotloop.lint.callers import mark_called, mark_remote
from hotloop.lint.drivers import feeds_env, prepared
from hotloop.lint.effects import cross_file_hits, logger_reads, quiet_logger
from hotloop.lint.evals import EvalChecks, eval_hits
from hotloop.lint.forks import DEVICE_TEST, made_module
from hotloop.lint.formats import LOG_FUNCS, FormatChecks
from hotloop.lint.indexing import IndexChecks
from hotloop.lint.loaders import LoaderChecks, loader_class, own_loader
from hotloop.lint.provenance import HostProvenance, moves_to_device
from hotloop.lint.rules import SYNC_CODES as SYNC_RULES
from hotloop.lint.saves import SaveChecks
from hotloop.lint.schedules import ScheduleChecks
from hotloop.lint.structure import StructureChecks, is_true_node
from hotloop.lint.structure import kw as _kw
from hotloop.lint.structure import src as _src
from hotloop.lint.syntax import (
    a_grad,
    chained_read,
    copied,
    data0,
    empty_copy,
    graphless,
    made_here,
    reduced,
    under_no_grad,
)
from hotloop.lint.totals import meter_totals, rollout_list, running_totals

VALUE_NAME = re.compile(r"(loss|losses|logits|outputs?|preds?)$", re.I)  # a network's value (MMGCN's `model_loss`)
SAVES = ("save_on_master", "accelerator.save")  # `torch.save` under another name (DETR's utils, Accelerate)
PER_STEP = SYNC_RULES | {"HL004", "HL012", "HL024"}  # costs paid each time the code runs: none under a cache fill

# `np.isnan(grad_norm)`: NumPy converts the tensor on the host (on CUDA it raises: the value must come back first)
NUMPY_TESTS = {f"{m}.{f}" for m in ("np", "numpy") for f in ("isnan", "isinf", "isfinite", "isclose", "allclose")}


@dataclass
class Edit:
    line: int
    col: int
    end_line: int
    end_col: int
    text: str
    what: str = ""  # what `--fix` prints: "`torch.tensor([a, b])` -> `torch.stack([a, b])`"


@dataclass
class Hit:
    code: str
    node: ast.AST
    message: str
    edit: Edit | None = None
    no_fix: str = ""  # for a fixable rule, why this instance is left to the user


def _span(node: ast.AST, text: str) -> Edit:
    return Edit(node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0, text)


class Checker(StructureChecks, EvalChecks, ScheduleChecks, LoaderChecks, SaveChecks, HostProvenance, IndexChecks,
              BranchChecks, FormatChecks):  # fmt: skip
    def __init__(self, mi: ModuleInfo) -> None:
        self.mi = mi
        self.hits: list[Hit] = []

    def run(self) -> list[Hit]:
        src = self.mi.source
        clip = "clip_grad" in src
        for node in self.mi.nodes:
            if isinstance(node, (ast.For, ast.While)) and node in self.mi.hot_loops:  # (a `while` is a branch too)
                self.accumulation(node)
                for total, message in [*running_totals(self.mi, node, self.value_before), *meter_totals(self.mi, node)]:
                    self.add("HL019", total, message)
                if isinstance(node, ast.For):
                    continue
            if isinstance(node, ast.Call):
                self.call(node)
            elif isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)):
                self.branch(node)
                if isinstance(node, ast.If) and "next(" in src:
                    self.gated_evaluation(node)
            elif isinstance(node, ast.Subscript):
                self.subscript(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                self.closure(node)
                if not isinstance(node, ast.Lambda):
                    self.evaluation(node)
                    if clip:
                        self.clip_order(node)
            elif isinstance(node, (ast.For, ast.ListComp, ast.GeneratorExp)) and node not in self.mi.train_loops:
                self.inline_evaluation(node)
            elif isinstance(node, ast.With) and "inference_mode" in src:
                self.inference_mode(node)
            elif isinstance(node, ast.JoinedStr):
                self.fstring(node)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                self.percent_format(node)
        if "LR" in src or "sched" in src:
            self.schedulers()
        if "DistributedSampler" in src:
            self.samplers()
        return [h for h in self.hits if not (h.code in SYNC_RULES and (
            self.mi.has_sync_marker(h.node.lineno) or not self.mi.device_code or self.host_read(h.node)
            or feeds_env(self.mi, h.node)) or never_runs(self.mi, h.node)
            or h.code in PER_STEP and built_once(self.mi, h.node))]  # fmt: skip

    def add(self, code: str, node: ast.AST, message: str, edit: Edit | None = None, no_fix: str = "") -> None:
        self.hits.append(Hit(code, node, message, edit, no_fix))

    def kind(self, e: ast.expr) -> str | None:
        return self.mi.kind(e, self.mi.function_info(e))

    def tensor(self, e: ast.expr) -> bool:
        return self.kind(e) == "tensor"

    def tensorish_iterable(self, e: ast.expr) -> bool:
        if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
            return bool(e.elts) and any(self.tensor(x) for x in e.elts)
        if isinstance(e, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self.mi.kind(e.elt, self.mi.function_info(e), comp=e) == "tensor"
        if isinstance(e, ast.Name):
            return self.mi.function_info(e).tensor_list_at(e.id, e.lineno)
        return False

    # -- calls ----------------------------------------------------------------------------------

    def call(self, c: ast.Call) -> None:
        mi, name, meth, raw = self.mi, self.mi.call_name(c), method_name(c), call_name(c)
        hot = mi.in_hot(c)
        base = name.split(".")[-1]
        if not hot and meth in ("to", "cuda") and isinstance(c.func, ast.Attribute) and self._in_getitem(c):
            self.transfer(c, per_sample=True)
        if hot:
            if meth == "item" and not c.args and self.kind(c.func.value) != "scalar" and not copied(c.func.value):  # type: ignore[attr-defined]
                self.add("HL001", c, f"`{_src(c)}` reads the tensor on the host every step")
            elif meth in ("get_scale", "state_dict") and re.search(r"scaler$", _src(c.func.value), re.I):  # type: ignore[attr-defined]
                self.add("HL001", c, f"`{_src(c)}` reads the GradScaler's scale with `.item()` every step")
            elif name in ("float", "int", "bool") and len(c.args) == 1 and self.tensor(c.args[0]):
                if not (name == "bool" and is_test(self.mi, c)):  # `if bool(loss == 0):` is a branch: HL005
                    self.add("HL001", c, f"`{_src(c)}` reads a tensor on the host every step")
            elif (name.startswith("math.") or name in NUMPY_TESTS) and c.args and self.tensor(c.args[0]) and not (
                    self._comp_bound(c.args[0])):  # fmt: skip
                into = "a NumPy value" if name in NUMPY_TESTS else "a Python float"
                self.add("HL001", c, f"`{_src(c)}` converts a tensor to {into}: a host read every step")
            if LOG_FUNCS.match(raw):
                values = [a.value if isinstance(a, ast.Starred) else a for a in c.args]
                values += [k.value for k in c.keywords]
                values += [v for a in values if isinstance(a, ast.Dict) for v in a.values]
                shown = next((a for a in values if self.tensor(a) and not data0(a)), None)  # (`.data[0]`: HL001)
                # a logger that `.item()`s what it gets: any computed value may be a tensor (`-log_prob.mean()`)
                read = next((a for a in values if a is shown or isinstance(a, (ast.Call, ast.UnaryOp, ast.BinOp))
                             and self.kind(a) != "scalar"), None)  # fmt: skip
                if read is not None and (where := logger_reads(self.mi, c)):
                    self.add("HL001", c, f"`{raw}` reads `{_src(read)}` with `.item()` ({where}) every step")
                elif shown is not None and not quiet_logger(self.mi, c):
                    self.add("HL002", c, f"`{raw}` formats the tensor `{_src(shown)}` on the host every step")
            if meth == "format":
                self.str_format(c)
            if name in ("torch.nonzero", "torch.masked_select", "torch.unique", "torch.argwhere", "torch.bincount") or (
                meth in ("nonzero", "masked_select", "unique", "bincount") and isinstance(c.func, ast.Attribute)
                and (self.tensor(c.func.value) or meth == "masked_select" and self.kind(c.func.value) is None)
            ):  # fmt: skip
                self.add("HL006", c, f"`{meth or name}` has a data-dependent size: a sync every step")
            if meth in ("cpu", "numpy", "tolist") and isinstance(c.func, ast.Attribute) and not c.args:
                last = dotted(c.func.value).split(".")[-1]  # (`x.numpy().tolist()`: the copy is `.numpy()`'s)
                module = MODEL_NAME.search(last) and not VALUE_NAME.search(last)  # `model.cpu()`, not `model_loss`'s
                if not (module or chained_read(c) or self._host(c.func.value)):  # type: ignore[attr-defined]
                    self.add("HL007", c, f"`.{meth}()` copies to the host and waits, every step")
            if meth in ("to", "cuda") and isinstance(c.func, ast.Attribute):
                self.transfer(c)
            self.legacy_cuda_copies(c, meth)
            if meth == "copy_" and self.blocking_copy_in(c):
                self.add("HL012", c, f"`{_src(c)}` copies host data into a device tensor without `non_blocking=True`")
            if meth == "repeat_interleave" or name == "torch.repeat_interleave":
                repeats = c.args[1] if name == "torch.repeat_interleave" and len(c.args) > 1 else (
                    c.args[0] if meth == "repeat_interleave" and name != "torch.repeat_interleave" and c.args else None
                )  # fmt: skip
                if (
                    _kw(c, "output_size") is None
                    and not isinstance(repeats, ast.Constant)
                    and not (repeats is not None and self.kind(repeats) == "scalar")
                ):  # `x.size()[1]`: a Python int
                    self.add("HL022", c, f"`{_src(c)}`: tensor repeats and no `output_size`: a sync")
            if name == "torch.where" and len(c.args) == 1 and not c.keywords:
                self.add("HL022", c, f"`{_src(c)}`: one-argument `torch.where` has a data-dependent size: a sync")
            if base in ("clip_grad_norm_", "clip_grad_norm") and is_true_node(
                getattr(_kw(c, "error_if_nonfinite"), "value", None)
            ):
                self.add("HL023", c, f"`{_src(c)}`: `error_if_nonfinite=True` reads the norm on the host every step")
            if (
                name in ("torch.tensor", "torch.as_tensor")
                and _kw(c, "device") is not None
                and c.args
                and self.python_data(c.args[0])
            ):  # fmt: skip
                self.add("HL024", c, f"`{_src(c)}` builds host data and copies it to the device every step")
            if name == "torch.compile" and c.args and self._defined_in_loop(c.args[0], c):
                self.add("HL025", c, f"`{_src(c)}` compiles a new function every iteration: it recompiles each time")
        if mi.in_training_loop(c):
            # (also nvdiffrec's `torch.cuda.current_stream().synchronize()`)
            stream_sync = meth == "synchronize" and re.search(r"current_stream\(|default_stream\(", ast.unparse(c))
            barrier = name in ("torch.cuda.synchronize", "torch.cuda.empty_cache") or stream_sync
            if barrier and hot and not self._deliberate(c):
                self.add("HL020", c, f"`{_src(c)}` inside the training loop")
            shown = name if name.endswith(SAVES) else "torch.save"
            if (self._save_helper_in_place(c) or name == shown and self._checkpoint_payload(c)
                    and not self._replaced_atomically(c) and not self._fresh_path(c)):  # fmt: skip
                self.add("HL021", c, f"`{shown}` to the final path: a crash mid-write corrupts the checkpoint")
            if meth == "append" and c.args and mi.in_hot(c) and not under_no_grad(mi.parent, c):
                arg = c.args[0]
                if (
                    isinstance(arg, (ast.Name, ast.Attribute, ast.Subscript))
                    and not any(isinstance(x, ast.Attribute) and x.attr == "data" for x in ast.walk(arg))  # `l.data[0]`
                    and self.tensor(arg)
                    and re.search(r"loss|logit|out|pred|score|prob|hidden|feat|embed|activ", ast.unparse(arg))
                    and not (
                        isinstance(arg, ast.Name)
                        and (vs := assigned_values(arg.id, mi.nodes))
                        and all(map(graphless, vs))
                    )  # fmt: skip
                    and not self._per_step_list(c)
                ):
                    self.add("HL019", c, f"`{_src(c)}` appends a tensor without `.detach()`: its graph stays alive")
        if name in ("torch.tensor", "torch.as_tensor") and c.args and self.tensorish_iterable(c.args[0]):
            edit, no_fix = None, ""
            if name == "torch.tensor" and not c.keywords and len(c.args) == 1:
                arg = c.args[0]
                inner = ast.unparse(arg)
                if isinstance(arg, ast.GeneratorExp):
                    inner = f"[{inner[1:-1] if inner.startswith('(') else inner}]"
                edit = _span(c, f"torch.stack({inner})")
                edit.what = f"`{_src(c)}` -> `torch.stack({_src(arg, 40)})`"
            elif name == "torch.as_tensor":
                no_fix = "torch.as_tensor may share memory with its input; torch.stack always copies"
            else:
                no_fix = "dtype=/device= keywords: torch.stack keeps the elements' dtype and device, so a rewrite " \
                         "could change the result; add `.to(...)` by hand"  # fmt: skip
            self.add("HL003", c, f"`{_src(c)}` reads each tensor on the host; use `torch.stack`", edit, no_fix)
        if name in ("max", "min", "sorted"):  # Python's sum only adds: device ops, no host read
            tensors = [a for a in c.args if self.tensor(a)]  # and numbers: `max(n_pos.sum().float(), 1)` (SSD)
            if (len(c.args) == 1 and self.tensorish_iterable(c.args[0])) or len(c.args) > 1 and (
                    len(tensors) == len(c.args) or any(reduced(a) for a in tensors) and all(
                    a in tensors or isinstance(a, ast.Constant) for a in c.args)):  # fmt: skip
                better = "torch.sort(torch.stack(...))" if name == "sorted" else f"torch.stack(...).{name}()"
                self.add("HL004", c, f"Python `{name}` over tensors compares on the host; use `{better}`")
        if name in ("torch._foreach_norm",) and c.args and not self._float32_guard(c):
            self.add("HL009", c, f"`{_src(c)}` accumulates in the input dtype: guard it to float32")
        if (base in ("DataLoader", "WebLoader", "StatefulDataLoader") and not own_loader(mi, c)
                or base[:1].isupper() and loader_class(mi, c)):  # fmt: skip
            self.dataloader(c)
        if meth == "zero_" and hot and not c.args and a_grad(c.func.value) and not made_here(mi, c.func.value):  # type: ignore[attr-defined]
            self.add("HL013", c, f"`{_src(c)}` writes zeros into the gradient every step (what `zero_grad("
                     "set_to_none=False)` does): set it to None instead")  # fmt: skip
        if meth == "zero_grad":
            kw = _kw(c, "set_to_none")
            flag = kw is not None and not isinstance(kw.value, ast.Constant)
            if flag and self.mi.cli_default(kw.value, across=True) is False:  # type: ignore[union-attr]
                self.add("HL013", c, f"`{_src(c)}`: `{_src(kw.value)}` defaults to False, so zeros are written into "
                         "every gradient unless the flag is passed", None, "the value comes from a flag: change its "
                         "default or drop the argument by hand")  # fmt: skip
            if kw is not None and isinstance(kw.value, ast.Constant) and kw.value.value is False:
                edit = self._drop_kw(c, "set_to_none")
                if edit is not None:
                    edit.what = f"`{_src(c)}` -> `{_src(c.func)}()`"
                self.add("HL013", c, f"`{_src(c)}` writes zeros into every gradient", edit,
                         "" if edit else "zero_grad has other arguments or spans lines: drop `set_to_none=False` by "
                         "hand")  # fmt: skip

    def _in_getitem(self, c: ast.Call) -> bool:
        """Inside a Dataset's `__getitem__`: run by the DataLoader for every sample of every batch."""
        fn = self.mi.enclosing_function(c)
        return isinstance(fn, ast.FunctionDef) and fn.name == "__getitem__"

    def transfer(self, c: ast.Call, per_sample: bool = False) -> None:
        recv = c.func.value  # type: ignore[attr-defined]
        rname = dotted(recv)
        if (rname and MODEL_NAME.search(rname.split(".")[-1]) and not self.batch_target(rname, c)
                or made_module(self.mi, recv) or empty_copy(c)):  # fmt: skip  # (honk's batch is `model_in`)
            return  # a model, or `nn.MSELoss(reduction="mean").cuda()` in a per-step helper: no data copied
        if isinstance(recv, ast.Call) and self.mi.call_name(recv).endswith("_like") and recv.args and not self._host(
                recv.args[0]):  # fmt: skip
            return  # `torch.zeros_like(embedding).cuda()` (KGReasoning): made where `embedding` is, no copy
        if c.func.attr == "to":  # type: ignore[attr-defined]
            if not moves_to_device(c):
                return  # `.to(torch.float16)`, `.to(weight_dtype)`: a cast
            target = c.args[0] if c.args else _kw(c, "device").value  # type: ignore[union-attr]
            if isinstance(target, ast.Constant) and target.value == "cpu":  # `.cpu()` spelled `.to("cpu")`
                if _kw(c, "non_blocking") is None and self.tensor(recv):
                    self.add("HL007", c, f"`{_src(c)}` copies to the host and waits, every step")
                return
        nb = _kw(c, "non_blocking")
        if nb is not None and not (isinstance(nb.value, ast.Constant) and not nb.value.value):
            return
        if self._cpu_branch(c) or not (self.tensor(recv) or self.kind(recv) is None and self._device_target(c)):
            return
        if self.on_device(recv, c):
            return  # already moved (`x = x.cuda()` above, or a model's output): this copies nothing
        target_node = c.args[0] if c.args else getattr(_kw(c, "device"), "value", c)
        target = ast.unparse(target_node)
        if isinstance(target_node, ast.Name):  # `device = accelerator.device` ... `.to(device)`
            fn = self.mi.enclosing_function(c)
            target += " ".join(ast.unparse(v) for v in assigned_values(target_node.id, walk_local(fn)))
        if (re.search(r"accelerator|fabric|\w\.device", target) and not self.factory_made(recv)
                and prepared(self.mi, c)):  # fmt: skip
            return  # a prepared loader already yields batches on the device: this .to() copies nothing
        end = c.end_col_offset or 0
        text = ast.get_source_segment("\n".join(self.mi.lines), c)
        edit, no_fix = None, ""
        if text is not None and text.endswith(")") and c.lineno == c.end_lineno:
            sep = ", " if (c.args or c.keywords) else ""
            edit = Edit(c.end_lineno, end - 1, c.end_lineno, end - 1, f"{sep}non_blocking=True")
            edit.what = f"`{_src(c)}`: `non_blocking=True` added"
        else:
            no_fix = "the call spans several lines (or its source could not be located)"
        if per_sample:
            self.add("HL012", c, f"`{_src(c)}` in `__getitem__` copies every sample to the device, blocking; return "
                     "host tensors and move the collated batch (pin_memory=True, non_blocking=True)", None,
                     "a copy per sample: move the batch instead")  # fmt: skip
            return
        self.add("HL012", c, f"`{_src(c)}` copies to the device without `non_blocking=True`: the host blocks", edit,
                 no_fix)  # fmt: skip

    def _deliberate(self, c: ast.Call) -> bool:
        """A timing barrier (a clock read within two lines) or behind a flag/gate: chosen, not an accident."""
        fn = self.mi.enclosing_function(c)
        if re.search(r"bench|profil", getattr(fn, "name", "") + " " + self.mi.path, re.I):
            return True  # a benchmark's barrier is its purpose (a training script timing each step is not)
        child, n = c, self.mi.parent.get(c)
        while n is not None and n is not fn:
            if (isinstance(n, ast.If) and child is not n.test and not self.mi.is_update_gate(n)
                    and not DEVICE_TEST.search(ast.unparse(n.test))):  # fmt: skip
                return True  # behind a flag the user opts into (a device or distributed check is no opt-in)
            if isinstance(n, (ast.For, ast.While)) and n in self.mi.hot_loops:
                break
            child, n = n, self.mi.parent.get(n)
        return False

    def _device_target(self, c: ast.Call) -> bool:
        """`.to(device)`, `.to(args.device)`, `.to(f"cuda:{rank}")`, `.cuda()`: a move to the accelerator, so the
        receiver (not a model: those are excluded by name) is data."""
        if c.func.attr == "cuda":  # type: ignore[attr-defined]
            return True
        target = c.args[0] if c.args else getattr(_kw(c, "device"), "value", None)
        return target is not None and bool(re.search(r"device|cuda|rank|gpu|\bdev\b", ast.unparse(target), re.I))

    def _cpu_branch(self, node: ast.AST) -> bool:
        """Under `if device_type == 'cuda': ... else:` (or `if device == 'cpu':`): not the CUDA path."""
        child, n = node, self.mi.parent.get(node)
        while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if isinstance(n, ast.If) and child is not n.test:
                test = ast.unparse(n.test)
                if "cuda" in test and child in n.orelse and "!=" not in test and "not " not in test:
                    return True
                if re.search(r"['\"](cpu|mps)['\"]", test) and child in n.body and "!=" not in test:
                    return True
            child, n = n, self.mi.parent.get(n)
        return False

    def _drop_kw(self, c: ast.Call, name: str) -> Edit | None:
        if c.lineno != c.end_lineno or len(c.args) + len(c.keywords) != 1:
            return None  # only the lone keyword on one line is a mechanical fix
        return Edit(c.lineno, c.func.end_col_offset or 0, c.end_lineno or c.lineno, c.end_col_offset or 0, "()")

    def _per_step_list(self, c: ast.Call) -> bool:
        """The list is made anew inside the step (KGReasoning's `all_center_embeddings = []`): no graph outlives it."""
        lst, fn = c.func.value, self.mi.enclosing_function(c)  # type: ignore[attr-defined]
        pairs = [(t, n.value) for n in walk_local(fn) if isinstance(n, ast.Assign) for t in n.targets]
        pairs += [p for t, v in pairs if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple)
                  and len(t.elts) == len(v.elts) for p in zip(t.elts, v.elts, strict=True)]  # fmt: skip
        made = [v for t, v in pairs if isinstance(v, (ast.List, ast.ListComp)) and dotted(t) == dotted(lst) != ""]
        loops = [x for x in self.mi.enclosing_loops(c) if x in self.mi.hot_loops]
        inside = all(not loops or n in set(ast.walk(loops[0])) for n in made)  # (or one update's rollout: A3C)
        return bool(made) and (inside or rollout_list(self.mi, c, made))

    def _defined_in_loop(self, arg: ast.expr, at: ast.AST) -> bool:
        if isinstance(arg, ast.Lambda):
            return True
        loop = self.mi.enclosing_loop(at)
        if isinstance(arg, ast.Name) and loop is not None:
            return any(
                isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == arg.id
                or isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda)
                and any(isinstance(t, ast.Name) and t.id == arg.id for t in n.targets)
                for n in walk_local(loop)
            )  # fmt: skip
        return False

    def _float32_guard(self, c: ast.Call) -> bool:
        if re.search(r"\.float\(\)|float32", ast.unparse(c.args[0])):
            return True
        n = self.mi.parent.get(c)
        while n is not None and not isinstance(n, ast.Module):
            if isinstance(n, (ast.If, ast.Assert)) and "float32" in ast.unparse(n.test):
                return True
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return any(
                    isinstance(s, (ast.If, ast.Assert)) and "float32" in ast.unparse(s.test) for s in walk_local(n)
                )
            n = self.mi.parent.get(n)
        return False

    def _comp_bound(self, e: ast.expr) -> bool:
        """Uses a comprehension's variable (`math.ceil(x * sf) for x in imgs.shape[2:]`): its kind is the
        iterable's, not its name's."""
        used = {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}
        n = self.mi.parent.get(e)
        while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            if isinstance(n, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
                if used & {x for g in n.generators for x in target_names(g.target)}:
                    return True
            n = self.mi.parent.get(n)
        return False

    def closure(self, fn: ast.AST) -> None:
        if isinstance(fn, ast.Lambda) and isinstance(self.mi.parent.get(fn), ast.Call):
            return  # `map(lambda t: ..., batch)`: consumed on the spot, nothing kept or re-created to speak of
        loop = self.mi.enclosing_loop(fn)
        if loop is None or loop not in self.mi.hot_loops or not self.mi.in_hot(fn):
            return
        assigned = set()
        for n in walk_local(loop):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                assigned.add(n.id)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assigned.discard(fn.name)
        params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}  # type: ignore[attr-defined]
        used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - params
        if not (used & assigned):
            what = f"`{_src(fn)}`" if isinstance(fn, ast.Lambda) else f"function `{fn.name}`"  # type: ignore[attr-defined]
            self.add("HL008", fn, f"{what} is re-created every iteration but captures nothing that changes")

    def inference_mode(self, node: ast.With) -> None:
        if not any(self.mi.call_name(i.context_expr) == "torch.inference_mode" for i in node.items
                   if isinstance(i.context_expr, ast.Call)):  # fmt: skip
            return
        produced = {t.id for n in node.body for n2 in ast.walk(n) if isinstance(n2, ast.Assign)
                    for t in n2.targets if isinstance(t, ast.Name)}  # fmt: skip
        fn = self.mi.enclosing_function(node)
        for n in walk_local(fn):
            if not hasattr(n, "lineno") or n.lineno <= (node.end_lineno or node.lineno):
                continue
            if isinstance(n, ast.BinOp):
                names = {x.id for x in (n.left, n.right) if isinstance(x, ast.Name)}
                other = [x for x in (n.left, n.right) if not (isinstance(x, ast.Name) and x.id in produced)]
                if names & produced and any(
                    isinstance(o, ast.Attribute) or isinstance(o, ast.Name) and re.search(r"temp|tau|^t$|^T$", o.id)
                    for o in other
                ):  # fmt: skip
                    self.add("HL010", node, f"`{_src(node)}`: inference_mode output meets a parameter; use no_grad")
                    return


# PyTorch code: an import of it, or (through a star import of a project module, as DeepLab's `from modeling.deeplab
# import *` brings `torch`) calls of its optimizers, modules and CUDA API and `.backward()`.
TORCH_CODE = re.compile(r"^\s*(import|from)\s+(torch|lightning|pytorch_lightning|accelerate|transformers)\b|"
                        r"\btorch\.(optim|nn|cuda|utils)\.|\.backward\(\)", re.M)  # fmt: skip


def check(mi: ModuleInfo) -> Iterator[Hit]:
    """All rules, for modules that use PyTorch (the rules mean nothing elsewhere: a `test_*` function
    looping over strings is not an evaluation loop)."""
    torch_code = bool(TORCH_CODE.search(mi.source))
    if not torch_code and not any(isinstance(n, (ast.For, ast.While)) for n in mi.nodes):
        return
    driver = (mark_remote(mi) or bool(mi.hot_loops)) and not torch_code  # SPADE's, DeepCAD's train.py: steps elsewhere
    mark_called(mi)
    if not (torch_code or driver):
        return
    hits = Checker(mi).run()
    cross = [h for h in cross_file_hits(mi, {(h.node.lineno, h.code) for h in hits})  # (a driver: no tensors)
             if not (driver and h[0] not in ("HL011", "HL015", "HL021") or never_runs(mi, h[1]))]  # fmt: skip
    read = {id(call) for code, call, _ in cross if code in ("HL001", "HL007")}  # a meter that reads what it is handed:
    yield from (h for h in hits if not (h.code == "HL002" and id(h.node) in read))  # one read, not also a format
    yield from (Hit(code, call, message) for code, call, message in cross)
    for code, call, message in eval_hits(mi):
        if (call.lineno, code) not in {(h.node.lineno, h.code) for h in hits}:
            yield Hit(code, call, message)
