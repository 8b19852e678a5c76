"""Effects across files: what a helper of the script's own project does when the hot loop calls it.

When a hot region calls a project function, or an instance of a project class (its `__call__` or
`forward`), the helper's module is analysed again with that function made hot, and each host read (or device
synchronisation) it makes is reported at the call site, naming the file and line inside. Two levels deep: a
hot helper's own calls into a third file of the project are followed once more (a loss's `forward` calling
`box_ops.generalized_iou(...)`, a model's step calling its loss module), and what they add is reported at the
script's call site, the chain named in the message. Deeper chains are not. A read the helper's file makes
hot in its own loops is reported by that file's own lint when both are linted in one run (`linting`), and at
the call site when the script is linted alone. Training-loop calls are checked for in-place saves (HL021)
and loaders (HL011) built inside the helper.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hotloop.lint.analysis import ModuleInfo, assigned_values, call_name, dotted, method_name, target_names, walk_local
from hotloop.lint.branches import built_once
from hotloop.lint.callers import LINTED, called_hot, linting  # noqa: F401 (linting re-exported)
from hotloop.lint.classes import guess
from hotloop.lint.drivers import feeds_env
from hotloop.lint.gates import TARGETS, is_gate
from hotloop.lint.imports import Project, defining, find_def, instance_target, load_module, not_a_step
from hotloop.lint.kinds import MODEL_NAME
from hotloop.lint.loaders import loaders_built
from hotloop.lint.modes import Mode, mode_of, passes_other
from hotloop.lint.moved import fills
from hotloop.lint.saves import ancestors, path_params, then_leaves, varying_args
from hotloop.lint.syntax import binding_before, data0, empty_copy, param_defaults

EFFECT_CODES = {"HL001", "HL002", "HL004", "HL005", "HL013", "HL006", "HL007", "HL012", "HL020", "HL022", "HL023",
                "HL024"}  # fmt: skip
MOVER = re.compile(r"device|move|cuda|transfer|prefetch|input|feed|batch", re.I)  # HL012 only from a batch mover
NOT_A_SAVE = re.compile(r"export", re.I)  # `model_export(model, "model.bin")`: an artefact, not the run's checkpoint
ACTS = re.compile(r"^act$|action", re.I)  # run every environment step: a copy of host-made data in one counts
DEPTH = 2  # files followed from the linted script: its helpers, and theirs
_EFFECTS: dict[tuple[str, float, str, bool, int], list[tuple]] = {}  # effects: 7-tuples; saves_in: 6-tuples


def _inside(mi: ModuleInfo, node: ast.AST, fns: set[ast.AST]) -> bool:
    n = mi.parent.get(node)
    while n is not None and n not in fns:
        n = mi.parent.get(n)
    return n is not None


def _if_tests(mi: ModuleInfo, node: ast.AST, both: tuple[ast.AST, ...] = ()) -> Iterator[ast.expr]:
    """The tests of the `if` statements `node` sits under, but those whose other branch holds one of `both`
    (`if self.continuous: s = torch.FloatTensor(s).to(d) ... else: s = torch.FloatTensor(s).to(d)`: one of
    the two runs whichever way the option is set)."""
    child, n = node, mi.parent.get(node)
    while n is not None and not isinstance(n, ast.Module):
        if isinstance(n, ast.If) and child is not n.test:
            other = n.orelse if child in n.body else n.body
            if not any(_inside_block(mi, b, other) for b in both):
                yield n.test
        child, n = n, mi.parent.get(n)


def _inside_block(mi: ModuleInfo, node: ast.AST, block: list[ast.stmt]) -> bool:
    n = mi.parent.get(node)
    while n is not None and not isinstance(n, ast.Module):
        if n in block:
            return True
        n = mi.parent.get(n)
    return False


def _tensor_test(test: ast.expr) -> bool:
    """`isinstance(v, torch.Tensor)`, `torch.is_tensor(v)`, `hasattr(v, "item")`."""
    if not isinstance(test, ast.Call):
        return False
    name, args = call_name(test), test.args
    if name.endswith("is_tensor") or name == "isinstance" and len(args) == 2 and "Tensor" in dotted(args[1]):
        return True
    return name == "hasattr" and len(args) == 2 and isinstance(args[1], ast.Constant) and args[1].value == "item"


def _if_tensor(mi: ModuleInfo, node: ast.AST) -> bool:
    """Under `if isinstance(v, torch.Tensor):`: a read that only happens when the caller passes a tensor (a
    metric logger's `update(loss=loss_value)` given a float reads nothing)."""
    return any(_tensor_test(t) for t in _if_tests(mi, node))


def _switched(mi: ModuleInfo, node: ast.AST, both: tuple[ast.AST, ...] = (), entry: ast.AST | None = None) -> bool:
    """Under `if self.autobalance:` / `if not self.flag:` / `if self._sync_stats():` / `if self.world_size > 1:`:
    an option of the helper whose value is set elsewhere (often off by default): not known to run every step.
    An option whose other branch does the same (one of `both`) runs it either way; an early `if self.sched is
    None: return` before it switches it too (pixel-nerf's `sched_step`). A test of an optional parameter of the
    called function itself (`entry`) is left to the call site (`modes.GIVEN`: AdaBins' `mask=mask`)."""
    fn = mi.enclosing_function(node)
    guards = [s.test for s in getattr(fn, "body", []) if isinstance(s, ast.If) and s.lineno < node.lineno  # type: ignore[attr-defined]
              and len(s.body) == 1 and isinstance(s.body[0], ast.Return) and not s.orelse]  # fmt: skip
    if _chosen_by_caller(mi, node, fn):
        return True
    for t in [*_if_tests(mi, node, both), *guards]:
        t = t.operand if isinstance(t, ast.UnaryOp) else t
        if isinstance(t, ast.Compare) and all(isinstance(c, ast.Constant) for c in t.comparators):
            t = t.left
        if isinstance(t, ast.Call) and not t.args and not t.keywords:
            t = t.func
        if isinstance(t, ast.Attribute) and dotted(t).startswith("self."):
            return True
        if isinstance(t, ast.Name) and _optional(mi, t, node):
            if fn is entry and isinstance(param_defaults(fn).get(t.id), ast.Constant):
                continue  # `if mask is not None:` in the forward the loop calls: runs when the call passes a mask
            return True
    return False


def _chosen_by_caller(mi: ModuleInfo, node: ast.AST, fn: ast.AST) -> bool:
    """`node` is in the body of `if norm_type == inf:` with `norm_type=2` a parameter: a choice the callers must
    make (a clipping helper's infinity-norm branch), not the default path (its `else:` is)."""
    child, n = node, mi.parent.get(node)
    while n is not None and n is not fn:
        t = n.test if isinstance(n, ast.If) and child in n.body else None
        if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq) and isinstance(
                t.left, ast.Name):  # fmt: skip
            default, other = param_defaults(fn).get(t.left.id), t.comparators[0]
            if (
                isinstance(default, ast.Constant)
                and default.value is not None
                and (isinstance(other, ast.Name) or isinstance(other, ast.Constant) and other.value != default.value)
            ):
                return True  # fmt: skip
        child, n = n, mi.parent.get(n)
    return False


def _optional(mi: ModuleInfo, name: ast.Name, node: ast.AST) -> bool:
    """`if imgs is not None:` with `imgs=None` a parameter, or `imgs = kwargs.get("imgs", None)`: a debug or
    optional path the caller may never take (EfficientDet's loss draws its boxes only when given images)."""
    if TARGETS.fullmatch(name.id):  # `if targets is not None:` in a forward: the training path, every step
        return False
    fn = mi.enclosing_function(node)
    if isinstance(d := param_defaults(fn).get(name.id), ast.Constant) and d.value is None:
        return True
    return any(isinstance(v, ast.Call) and call_name(v).rpartition(".")[2] == "get" for v in
               assigned_values(name.id, walk_local(fn)))  # fmt: skip


REDUCTIONS = {"sum", "max", "min", "any", "all", "mean", "amax", "amin", "isfinite", "isnan", "isinf", "equal"}


def _reduces(node: ast.AST, mi: ModuleInfo | None = None) -> bool:
    """A branch in another file's code whose test computes on a tensor (`if torch.min(y) < -1.`, `assert
    labels.max() < n`, `if (matching > 1).sum() > 0`), or on a name the function bound to such a reduction
    (CenterNet's `num_pos = pos.float().sum()` then `if num_pos == 0`, edge-connect's `mse = torch.mean(...)`
    then `if mse == 0`): the kind of another bare name or attribute there (`if self.norm:`, `if t == 0:`) is a
    guess, mostly a module's option."""
    test = getattr(node, "test", node)
    if any(isinstance(n, ast.Call) and call_name(n).rpartition(".")[2] in REDUCTIONS for n in ast.walk(test)):
        return True
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    if mi is None or not names:
        return False
    local = list(walk_local(mi.enclosing_function(node)))
    # (a tensor's own reduction: not Python's `max(size_list)` of numbers read back, detectron2's `gather`)
    return any(_reduces(v) and not (isinstance(v, ast.Call) and isinstance(v.func, ast.Name))
               for name in names for v in assigned_values(name, local))  # fmt: skip


def _assigned_to(mi: ModuleInfo, node: ast.AST) -> set[str]:
    """The names `node`'s value is assigned to (`x_reduce = torch.tensor(x).cuda()`)."""
    parent = mi.parent.get(node)
    return {x for t in parent.targets for x in target_names(t)} if isinstance(parent, ast.Assign) else set()


def _base(e: ast.AST) -> str:
    """The name a chain of methods, attributes and indexes starts from: `x_reduce` of `x_reduce.sum().item()`
    (not `state` of `self.actor(state).cpu()`: that reads the actor's output)."""
    while isinstance(e, (ast.Call, ast.Attribute, ast.Subscript)):
        e = e.func if isinstance(e, ast.Call) else e.value
    return e.id if isinstance(e, ast.Name) else ""


def _moves_param(mi: ModuleInfo, c: ast.AST, entry: ast.AST | None) -> bool:
    """`x.cuda()` / `x.to(device)` of a parameter `x` of the called helper `entry` itself (Self-Attention-GAN's
    `tensor2var(x)`), or of an entry of one (SRN's `input["pose"].cuda()` in `forward`, `trgt_imgs =
    ground_truth["rgb"]` then `trgt_imgs.cuda()`): a mover whatever its name, copying what the call passes (a
    parameter of a function it calls in turn, such as a timestep `t`, may well be on the device already)."""
    recv = c.func.value if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) else None
    fn = mi.enclosing_function(c)
    args = getattr(fn, "args", None)
    if recv is None or args is None or fn is not entry:
        return False
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]} - {"self", "cls"}
    base = _base(recv)
    s = binding_before(mi.parent, c, base)
    return base in params or s is not None and _base(s.value) in params


READS_GIVEN = re.compile(r"\.(cpu|item|numpy|tolist)\(\)")


@contextmanager
def _called(file: Path, name: str, every_step: bool, device_code: bool = False) -> Iterator[tuple[ModuleInfo, list]]:
    """The helper `name` of `file` (followed through re-exports) as a call from the linted script makes it:
    hot (`every_step`) or training code, with what it reaches in its own file. Yields the module and the rule
    hits inside what the call made so (its own rules only: one level deep); empty when there is no such
    function or no PyTorch in the file. The module's own state comes back afterwards."""
    from hotloop.lint.checks import TORCH_CODE, Checker

    file, name = defining(file, name)
    mi = load_module(file, file.stat().st_mtime)
    fn = find_def(mi.tree, name) if mi is not None else None
    # A file without PyTorch is no PyTorch code, except a helper called every step that reads what it is given
    # (DBNet's `cal_text_score(preds, ...)` in a NumPy-only utils module: `texts.data.cpu().numpy()`).
    if fn is not None and not TORCH_CODE.search(mi.source):
        fn = fn if every_step and READS_GIVEN.search(ast.get_source_segment(mi.source, fn) or "") else None
    if mi is None or fn is None:
        yield mi, []  # type: ignore[misc]
        return
    saved = (mi.device_code, set(mi.hot_functions), set(mi.train_functions), mi.hot_loops)
    mi.device_code = mi.device_code or device_code  # the caller moves data to the device: so does this
    if every_step:  # what the call runs, even where the file's own loops run it too (the script may be linted alone)
        mi.hot_functions, mi.hot_loops = set(), set()
        mi.propagate(fn)
        made = set(mi.hot_functions)
    else:
        mi.train_functions.add(fn)
        mi.propagate()
        made = (mi.train_functions - saved[2]) | {fn}  # (an epoch function is training code on its own already)
    # What the file's own lint reports: its hot code, if it reads as device code on its own.
    mi.made, mi.own_hot = made, (saved[1] | saved[3]) if saved[0] else set()  # type: ignore[attr-defined]
    try:
        yield mi, [h for h in Checker(mi).run() if _inside(mi, h.node, made)]
    finally:
        mi.device_code, mi.hot_functions, mi.train_functions, mi.hot_loops = saved
        mi.made = mi.own_hot = set()  # type: ignore[attr-defined]  # the next name starts from the file as is


SHOWN = re.compile(r"`print`|f-string|`str\.format`|`%`|add_scalar|wandb\.log")


def _shown_every_time(mi: ModuleInfo, h: Any) -> bool:
    """A helper's print or library-logger call of a tensor (EAST's loss printing its terms), not a warning
    printed under a value test (`if torch.min(y) < -1.: print(...)`, HiFi-GAN's mel_spectrogram) nor a project
    logger whose values may already be numbers (`logger.logkv_mean("grad_norm", grad_norm)`)."""
    # (`if writer is not None:` around it is the caller's choice to log, not a warning)
    return bool(SHOWN.search(h.message)) and not any(
        isinstance(n, ast.If) and not (isinstance(n.test, ast.Compare)
                                       and all(isinstance(op, (ast.Is, ast.IsNot)) for op in n.test.ops))
        for n in ancestors(mi, h.node))  # fmt: skip


def _carried(mi: ModuleInfo, h: Any, hits: list[Any], entry: ast.AST | None = None) -> bool:
    """A hit inside a helper that its hot call site reports: one of EFFECT_CODES (HL024 both for `torch.tensor(
    shape, device=d)` built in a loss and for a host-made index, Fast AutoAugment's `mixup`); not opted out
    (`noqa`), switched off, once, or empty; a branch (HL005) only on a reduced tensor."""
    if h.code not in EFFECT_CODES or h.code == "HL002" and not _shown_every_time(mi, h):
        return False
    both = tuple(o.node for o in hits if o.code == h.code and o is not h)
    return ("noqa" not in mi.lines[h.node.lineno - 1] and not _switched(mi, h.node, both, entry)
            and not built_once(mi, h.node) and not empty_copy(h.node)
            and (h.code != "HL005" or _reduces(h.node, mi)))  # fmt: skip


def effects(
    file: Path, name: str, device_code: bool, depth: int = DEPTH
) -> list[tuple[str, int, str, bool, str, bool, Mode | None]]:
    """(code, line, message, only if given a tensor, copies host-made data, hot in the file's own loops, the
    parameter test it sits under) of
    each read that calling `name` every step adds inside `file` (and, with `depth` left, in the project
    files its hot code calls). A read the file's own loops make hot is reported when that file is linted."""
    from hotloop.lint.checks import Checker

    key = (str(file), file.stat().st_mtime, name, device_code, depth)
    if key not in _EFFECTS:
        with _called(file, name, every_step=True, device_code=device_code) as (mi, hits):
            entry = find_def(mi.tree, defining(file, name)[1]) if mi is not None else None
            kept = [h for h in hits if _carried(mi, h, hits, entry)]
            checker = Checker(mi)
            made = {id(h): h.code == "HL012" and isinstance(h.node, ast.Call) and checker.host_built(h.node)
                    for h in kept}  # fmt: skip
            moves = {id(h): h.code == "HL012" and _moves_param(mi, h.node, entry) for h in kept}
            # A helper that reads back what it copied (`r = torch.tensor(x).cuda()`, all_reduce, `r.item()`)
            # waits for the device anyway: its read is the finding, not the copy.
            read = {_base(h.node) for h in kept if h.code in ("HL001", "HL007")}
            own = getattr(mi, "own_hot", set())
            _EFFECTS[key] = [(h.code, h.node.lineno, h.message, _if_tensor(mi, h.node),
                              "host" if made[id(h)] else "param" if moves[id(h)] else "", _inside(mi, h.node, own),
                              mode_of(mi, entry, h.node)) for h in kept
                             if not (made[id(h)] and _assigned_to(mi, h.node) & read)]  # fmt: skip
            if depth > 1 and mi is not None:
                seen = {(line, code) for code, line, *_ in _EFFECTS[key]}
                _EFFECTS[key] += [(code, c.lineno, message, False, "", _inside(mi, c, own), None) for code, c, message
                                  in hot_call_hits(mi, Project.of(mi), seen, depth - 1, getattr(mi, "made", set()))
                                  if not _switched(mi, c) and not built_once(mi, c)]  # fmt: skip
    return _EFFECTS[key]


HOST_READ = re.compile(r"\.item\(|\bfloat\(|\bint\(|\.cpu\(|\.tolist\(|\.numpy\(|\bnp\.|format|print")


def keeps_tensors(mi: ModuleInfo, c: ast.Call) -> bool:
    """`self.meter.update(**outputs)` running the project's meter, which stores what it is given (detached)
    and reads nothing (YOLOX's `MeterBuffer`), or timm's `AverageMeter`: the tensors stay on the device until a
    log boundary."""
    recv = dotted(c.func.value) if isinstance(c.func, ast.Attribute) else ""
    made = [mi.aliases.get(call_name(v).partition(".")[0], "") for v in assigned_values(recv, mi.nodes)
            if isinstance(v, ast.Call)]  # fmt: skip
    if made and all(m.startswith("timm.") and m.endswith("AverageMeter") for m in made):
        return True  # timm's `AverageMeter`: `sum += val * n`, `avg = sum / count`, all on the device
    local = mi.targets_of(c)
    if local:  # the meter class is in this file
        texts = [ast.get_source_segment(mi.source, fn) or "" for fn in local]
        return all(t and not HOST_READ.search(t) for t in texts)
    _, helper, fn = _helper_def(Project.of(mi).callee(c))
    text = ast.get_source_segment(helper.source, fn) or "" if helper is not None and fn is not None else ""
    return bool(text) and not HOST_READ.search(text)


def _helper_def(target: tuple[Path, str] | None) -> tuple[Path | None, ModuleInfo | None, ast.AST | None]:
    """The file, module and definition that a call resolved into another project file runs (through re-exports)."""
    if target is None:
        return None, None, None
    file, name = defining(*target)
    helper = load_module(file, file.stat().st_mtime)
    return file, helper, find_def(helper.tree, name) if helper is not None else None


def quiet_logger(mi: ModuleInfo, c: ast.Call) -> bool:
    """A project meter that keeps what it is given (`keeps_tensors`), or a project logger whose method writes
    only under its own period (dc-tts' `Logger.log_step`: `if step % 1000 == 0: writer.add_image(...)`): the
    call itself reads nothing every step."""
    if method_name(c) == "update" and keeps_tensors(mi, c) or isinstance(c.func, ast.Name) and any(
            isinstance(v, ast.Call) and call_name(v).rpartition(".")[2][:1].isupper()
            and not re.search(r"Logger|Writer|Meter|Tracker|Recorder|Visualizer", call_name(v))
            for v in fills(mi).get(c.func.id, [])):  # fmt: skip
        return True  # (or `log = LogReg(hid, n)`, mvgrl's classifier: a module called, not a logger)
    _, helper, fn = _helper_def(Project.of(mi).callee(c))
    calls = [n for n in walk_local(fn) if isinstance(n, ast.Call)] if fn is not None else []
    writes = [
        n for n in calls if HOST_READ.search(ast.unparse(n.func) + "(") or re.search(r"add_\w+|log", call_name(n))
    ]
    return bool(writes) and all(any(isinstance(a, ast.If) and is_gate(a.test) for a in ancestors(helper, w))
                                for w in writes)  # fmt: skip


def logger_reads(mi: ModuleInfo, c: ast.Call) -> str:
    """`logger.log("train/loss", loss, step)` whose project logger (by the receiver's name, when the object is
    a parameter: pytorch-sac's and DrQ's `Logger.log`) converts what it is given with `.item()`/`float()`: the
    call reads the tensor (HL001), it does not format one. Where the read is (`logger.py:167`), or ''."""
    project = Project.of(mi)
    target = project.callee(c)
    if target is None and isinstance(c.func, ast.Attribute) and project.file is not None:
        target = guess(project.file, project._root(), dotted(c.func.value), c.func.attr, common=True)
    file, _, fn = _helper_def(target)
    read = next((n for n in walk_local(fn) if isinstance(n, ast.Call) and (method_name(n) == "item" or call_name(n)
                 == "float" and n.args) or data0(n)), None) if fn is not None else None  # fmt: skip
    return f"{relative(project, file)}:{read.lineno}" if read is not None and file is not None else ""


def saves_in(file: Path, name: str) -> list[tuple[int, str, tuple[tuple[int, str], ...]]]:
    """(line, message, the helper's parameters the path depends on) of each in-place `torch.save`
    (HL021) that calling `name` from a training loop makes: `utils.save_checkpoint(state, is_best)` writing
    `checkpoint.pth.tar`, `policy.save(path)`."""
    key = (str(file), file.stat().st_mtime, name, "saves")
    if key not in _EFFECTS:
        with _called(file, name, every_step=False) as (mi, hits):
            # a save in a same-file helper of `name` (lora's `save_all` -> `save_lora_weight(unet, save_path)`) names
            # that helper's parameters, not the call's: then any argument of the call may name the file
            own = find_def(mi.tree, name, ("__init__",)) if mi is not None else None
            _EFFECTS[key] = [("HL021", h.node.lineno, h.message, False, False, params)
                             for h in hits if h.code == "HL021" for params in path_params(mi, h.node, own)]  # fmt: skip
    return [(line, message, params) for _, line, message, _, _, params in _EFFECTS[key]]


def _own_training(file: Path, name: str) -> bool:
    """`name` is training code in its own file (an epoch function) and that file is linted in this run."""
    file, name = defining(file, name)
    helper = load_module(file, file.stat().st_mtime) if str(file.resolve()) in LINTED else None
    fn = find_def(helper.tree, name) if helper is not None else None
    return fn is not None and fn in helper.train_functions  # type: ignore[union-attr]


def _given_data(mi: ModuleInfo, c: ast.Call) -> bool:
    """The call passes a tensor, or a value of unknown kind not named a model (`tensor2var(real_images)`)."""
    info = mi.function_info(c)
    return any(
        (kind := mi.kind(a, info)) == "tensor"
        or kind is None
        and isinstance(a, (ast.Name, ast.Attribute, ast.Subscript))
        and not MODEL_NAME.search(dotted(a))
        for a in [*c.args, *(k.value for k in c.keywords)]
    )


def _shown(c: ast.Call) -> str:
    """The call's name in a message: `save_model`, or `Checkpoint(...).save` for a method of a fresh object."""
    made = c.func.value if isinstance(c.func, ast.Attribute) else None
    if not call_name(c) and isinstance(made, ast.Call):
        return f"{call_name(made)}(...).{c.func.attr}"  # type: ignore[union-attr]
    return call_name(c)


def relative(project: Project, file: Path) -> str:
    """The helper's path as the linted script sees it (`../src/utils/logging.py`)."""
    return os.path.relpath(file, project.file.parent) if project.file else str(file)


def loader_hits(mi: ModuleInfo, project: Project) -> list[tuple[str, ast.Call, str]]:
    """HL011 at each call of a project helper that builds a DataLoader lacking options this caller needs
    (`train_loader = build_loader(cfg)` iterated every epoch, a loader made in a class's `__init__`)."""
    from hotloop.lint.checks import Checker

    caller, out = None, []
    for c in mi.nodes:
        if not isinstance(c, ast.Call) or mi.in_hot(c) or (target := project.callee(c)) is None:
            continue
        if "." in target[1]:  # a method of an instance (`trainer.run()`): its loaders' lifetime is not seen here
            continue
        caller = caller or Checker(mi)
        if caller._never_read(c):  # (DCdetector's `self.vali_loader = get_loader_segment(...)`, never iterated)
            continue
        for file, line, missing in loaders_built(target[0], target[1], caller, c)[:1]:
            where = relative(project, file)
            out.append(("HL011", c, f"`{_shown(c)}(...)` builds a `DataLoader` ({where}:{line}) with workers but "
                                    f"without {' and '.join(missing)}"))  # fmt: skip
    return out


def cross_file_hits(mi: ModuleInfo, seen: set[tuple[int, str]]) -> list[tuple[str, ast.Call, str]]:
    """(code, call, message) for each hot call whose helper in another file reads on the host."""
    project = Project.of(mi)  # (a file importing nothing of the project may still be handed its classes)
    out = [h for h in loader_hits(mi, project) if (h[1].lineno, h[0]) not in seen]
    for c in mi.nodes:  # in-place saves inside a project helper the training loop calls
        if (isinstance(c, ast.Call) and mi.in_training_loop(c) and (c.lineno, "HL021") not in seen
                and (target := project.callee(c)) is not None and not NOT_A_SAVE.search(target[1])):  # fmt: skip
            # An epoch or step in the call may name the file inside the helper (through its parameters): no
            # claim then; a path the helper builds without them is in place whatever the call passes.
            leaves = then_leaves(mi, c)
            target = instance_target(project, c, target)
            if _own_training(*target):
                continue  # an epoch function whose file is linted in this run: its own lint reports the save
            for line, message, _ in [
                h for h in saves_in(*target) if not (h[2] and varying_args(mi, c, h[2]) or leaves)
            ][:1]:
                seen.add((c.lineno, "HL021"))
                where = relative(project, defining(*target)[0])
                out.append(("HL021", c, f"`{_shown(c)}(...)` runs in the training loop, and in it ({where}:{line}): "
                                        f"{message}"))  # fmt: skip
    return out + hot_call_hits(mi, project, seen)


def hot_call_hits(mi: ModuleInfo, project: Project, seen: set[tuple[int, str]], depth: int = DEPTH,
                  within: set[ast.AST] | None = None) -> list[tuple[str, ast.Call, str]]:  # fmt: skip
    """(code, call, message) for each hot call (in `within`, if given) whose other-file helper reads on the host."""
    out = []
    for c in mi.nodes:
        if not isinstance(c, ast.Call) or not mi.in_hot(c) or mi.has_sync_marker(c.lineno):
            continue
        if within is not None and not _inside(mi, c, within):
            continue
        target = project.callee(c)
        if target is None:
            continue
        file, name = target
        if "." not in name and call_name(c).rpartition(".")[2] == name and name[:1].isupper():
            name = f"{name}.__init__"  # `NTXentLoss_poly(device, ...)` built in the loop runs `__init__`, not `forward`
        acts = not_a_step(name)
        if acts and not ACTS.search(name.rpartition(".")[2]):
            continue
        defined, own_name = defining(file, name)
        where = relative(project, defined)
        linted = str(defined.resolve()) in LINTED
        if linted and called_hot(defined, own_name):
            continue  # the helper's file is linted too, with this function made hot there: it reports its reads
        given: bool | None = None  # whether the call passes a tensor, looked up once when it matters
        for code, line, message, if_tensor, host_made, own, mode in effects(file, name, mi.device_code, depth):
            if (c.lineno, code) in seen or code == "HL012" and not (MOVER.search(name) or host_made):
                continue
            if passes_other(c, mode):  # `model(..., mode="train_cf")`: the read is in the `update_att` branch
                continue
            if own and linted:  # the helper's file is linted too, and reports this read itself
                continue
            if acts and not host_made:  # an agent's `select_action`: its reads are its job, its copies are not
                continue
            if code in ("HL001", "HL007") and feeds_env(mi, c):
                continue  # `return utils.to_np(action[0])` from an agent's `act` (DrQ): the environment's input
            if host_made == "param" and not MOVER.search(name) and not _given_data(mi, c):
                continue  # a helper moving its parameter, not named a mover: a batch only when given data
            if if_tensor and code != "HL012":  # a mover's `isinstance` test walks a batch's containers instead
                if given is None:
                    info = mi.function_info(c)
                    args = [*c.args, *(k.value for k in c.keywords)]
                    given = any(mi.kind(a, info) == "tensor" for a in args)
                if not given:
                    continue
            seen.add((c.lineno, code))
            out.append((code, c, f"`{_shown(c)}(...)` runs every step, and in it ({where}:{line}): {message}"))
    return out
