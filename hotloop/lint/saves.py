"""HL021's judgement of a save: is it training state, written in place, or to a fresh path each time?

`torch.save(state, "ckpt.pt")` in the training loop (or a helper it calls) overwrites the last good
checkpoint; `torch.save(state, f"ckpt_{step}.pt")`, a temp file renamed into place, a BytesIO, or evaluation
statistics do not. Save helpers from another file (`save_on_master`, `save_model(epoch="best")`,
`save_state`) are judged by the names they are given. Mixed into `checks.Checker`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

from hotloop.lint.analysis import ModuleInfo, assigned_values, call_name, dotted, method_name, target_names, walk_local
from hotloop.lint.drivers import repeats_runs
from hotloop.lint.gates import anomaly_branch, terminal
from hotloop.lint.structure import kw
from hotloop.lint.syntax import block_of, passed_for

LATEST = re.compile(r"latest|last|best", re.I)  # a checkpoint's fixed name given to a save helper
SAVER = re.compile(r"save(_(model|models|checkpoint|state|ckpt|pretrained|network|networks))?")  # not images
PAYLOAD = re.compile(r"state_dict|model|optim|ckpt|checkpoint|snapshot|state|weights|net|params|ema|actor|critic|"
                     r"policy|agent|encoder|decoder|generator|discriminator|vae", re.I)  # fmt: skip
RESULTS = re.compile(r"(results?|preds?|predictions|outputs?|features|feats|embeddings|detections|dets)([-_.{]|$)",
                     re.I)  # fmt: skip
# a counter, or a metric value (`model_accu_{accu:3.3f}.chkpt`, `best_{val_loss:.4f}.pt`): a new name each save
ITER = r"(?<![a-z])iter|iter(?![a-z])|iteration"  # `n_iter`, `niter`, `iteration`: not `criterion`
VARYING = re.compile(r"\b(ep|it|i|e|t|n_iter|batch_idx)\b|epoch(?!s)|episode|step|" + ITER + r"|kimg|nimg|tick|acc|"
                     r"score|loss|psnr|bleu|fid\b|time|counter", re.I)  # fmt: skip


STAMP = re.compile(r"strftime\(|datetime\.now\(|time\.time\(\)")  # the time of day, in a path
RUN_OPTION = re.compile(r"\b(args|opts?|cfg|config|hparams|FLAGS)\.(\w*s|(max|num|n|total)_\w+)\b")
"""`{args.epochs}`, `{args.diffusion_steps}`: a total the run was given, the same at every save (minimal-diffusion's
`epoch_{args.epochs}` file is one file, overwritten each epoch). Not a counter kept on the options
(`args.current_epoch`, SimCLR's), nor a run's time stamp."""


def formats_a_counter(text: str) -> bool:
    """`f"model_{epoch}.pt"`, `'model_%d.pt' % it`, `"ckpt{}.pth".format(step)`, `'ssd_' + repr(iteration)`: the
    name changes each save."""
    text = re.sub(r"(['\"])([^'\"{}%]*)\1\.format\([^)]*\)", r"\1\2\1", text)  # `'epoch_last.pt'.format(e)`: no field
    formatted = re.findall(r"\{([^{}]*)\}|%\s*\(?([^)]*)\)?|format\(([^)]*)\)|(?:str|repr)\(([^)]*)\)", text)
    # a path builder given the counter (LeRobot's `get_step_checkpoint_dir(cfg.output_dir, cfg.steps, step)`; not
    # a run's time stamp, Pointnet2's `exp_dir.joinpath(timestr)`, one directory for the whole run)
    built = re.findall(r"(?:dir|path|name|file)\(([^)]*)\)", text)
    return any(VARYING.search(RUN_OPTION.sub("", " ".join(g))) for g in formatted) or any(
        re.search(r"epoch(?!s)|step|counter|" + ITER, RUN_OPTION.sub("", b), re.I) for b in built
    )


def _fixed_file(v: ast.expr) -> bool:
    """`"checkpoint.pth.tar"` or `os.path.join(root, "last.pt")`: a file name with nothing in it that varies."""
    if isinstance(v, ast.Call) and dotted(v.func).endswith("path.join") and v.args:
        v = v.args[-1]
    return isinstance(v, ast.Constant) and isinstance(v.value, str) and bool(re.search(r"\.\w+$", v.value))


BACKUPS = {"shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.move", "os.rename", "os.replace"}


def _fixed_file_arg(v: ast.expr) -> bool:
    """A name with nothing in it that varies: `"latest"`, `ckpt_dir / 'latest_model.pt'`, `f'best_model.pt'`."""
    consts = [c.value for c in ast.walk(v) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    fields = any(isinstance(x, ast.FormattedValue) for x in ast.walk(v))
    return bool(consts) and not fields and not formats_a_counter(ast.unparse(v)) and (
        isinstance(v, ast.Constant) or any(re.search(r"\.\w+$", c) for c in consts))  # fmt: skip


class SaveChecks:
    mi: ModuleInfo
    value_before: Callable[[str, ast.AST], ast.expr | None]
    """HostProvenance's (both are mixed into `checks.Checker`)."""

    def _save_helper_in_place(self, c: ast.Call) -> bool:
        """A save helper from another file writes the same file every time when it is given the literal
        `"latest"`/`"last"`/`"best"` (`model.save("latest")`, `save_model(..., epoch=epoch, epoch_name="last")`:
        the epoch goes into the state), or only fixed names, no epoch or step in a positional or path-like
        argument."""
        base = self.mi.call_name(c).split(".")[-1]
        local = bool(self.mi.targets_of(c))
        # `model.save("latest")`, `model.save_networks("latest")`, `save_model(..., epoch=epoch, epoch_name="last")`:
        # the name is the literal, whatever else goes into the state (CycleGAN/SPADE/pix2pixHD, MAE-style)
        literal = any(isinstance(a, ast.Constant) and isinstance(a.value, str) and LATEST.fullmatch(a.value)
                      for a in [*c.args, *(k.value for k in c.keywords)])  # fmt: skip
        if literal and SAVER.fullmatch(base) and not local:  # (a same-file helper is judged inside)
            return True
        if not SAVER.fullmatch(base) or base == "save" and not local:
            return False
        body = "".join(ast.unparse(f) for f in self.mi.targets_of(c))
        if local and (not re.search(r"save_state|save_pretrained|save_on_master", body) or "torch.save" in body):
            return False  # a same-file helper with torch.save is checked inside; one that saves nothing is no save
        # what names the file: positional arguments and path-like keywords (not `max_shard_size="100GB"`)
        args = [*c.args, *(k.value for k in c.keywords if re.search(r"path|dir|name|file|tag|epoch|step|prefix|which",
                                                                     k.arg or "path"))]  # fmt: skip
        fixed = [x for a in args for x in ast.walk(a) if isinstance(x, ast.Constant) and isinstance(x.value, str)]
        # `current_model_directory = f"{save_dir}/model_{update_step}"` just before: a new directory each save
        texts = [ast.unparse(a) + (" " + ast.unparse(v) if isinstance(a, ast.Name) and (v := self.value_before(a.id, c))
                                   is not None else "") for a in args if not isinstance(a, ast.Constant)]  # fmt: skip
        # (`save_ckpt('{:s}/ckpt/{:d}.pth'.format(args.save_dir, i + 1), ...)`: a file per save, partialconv)
        varying = any(re.search(r"epoch|step|" + ITER, t, re.I) or formats_a_counter(t) for t in texts)
        return bool(fixed) and not varying

    def _checkpoint_payload(self, c: ast.Call) -> bool:
        """What is saved looks like training state (weights, optimizer, a checkpoint dict), not evaluation
        statistics or a tensor of results, and not a dump of a diverged model or the run's last act: only losing a
        checkpoint costs a run."""
        if not c.args:
            return True
        if self._results_file(c):  # (also when read back: SSD's cached `predictions.pth`, recomputed if torn)
            return False  # `torch.save(output_state_dict, join(out, 'results-{}.pkl'.format(rank)))`: a dump
        if self._reloaded(c):
            return True  # the file the run reads back on restart: losing it costs the run, whatever it holds
        child, n = c, self.mi.parent.get(c)
        while n is not None and not isinstance(n, ast.Module):
            if isinstance(n, ast.If) and child in anomaly_branch(n):
                return False  # `if torch.isnan(out).any(): save(state, "NaN.pth")`: a dump of a diverged model
            child, n = n, self.mi.parent.get(n)
        if self._last_save(c):
            return False
        text = ast.unparse(c.args[0])
        if isinstance(c.args[0], ast.Name):
            fn = self.mi.enclosing_function(c)
            values = assigned_values(c.args[0].id, walk_local(fn))
            text += " ".join(ast.unparse(v) for v in values)
            for v in values:  # `save_dict = self.__get_save_dict()`: what the same-file helper returns
                if isinstance(v, ast.Call):
                    for f in self.mi.targets_of(v):
                        text += " ".join(ast.unparse(r) for r in walk_local(f) if isinstance(r, ast.Return))
                        text += " ".join(ast.unparse(r) for r in walk_local(f) if isinstance(r, ast.Assign))
        path = c.args[1] if len(c.args) > 1 else ast.Constant("")
        files = [x.value for x in ast.walk(path) if isinstance(x, ast.Constant) and isinstance(x.value, str)]
        named = " ".join([ast.unparse(c.args[0]), *files])  # (the file's name, not its folder's)
        if re.search(r"\.(pth|ckpt)(\.tar)?\b", named) and not re.search(r"eval|stat|log|result|score|hist", named):
            return True  # SinGAN's `torch.save(z_opt, '%s/z_opt.pth' % opt.outf)`: saved as a checkpoint file
        # `torch.save(self.args, join(model_dir, "training_args.bin"))` beside `model.save_pretrained(model_dir)`
        # (R-BERT, JointBERT): a file of the checkpoint directory the run saves its weights into
        return bool(PAYLOAD.search(text)) or any(isinstance(x, ast.Call) and method_name(x) == "save_pretrained"
                                                 for x in walk_local(self.mi.enclosing_function(c)))  # fmt: skip

    def _last_save(self, c: ast.AST, depth: int = 0) -> bool:
        """`if solved: agent.save_param(); break` (sweetice's PPO): the branch ends the training loop, so the save
        runs once, at the end, and overwrites nothing good; a same-file helper is judged at each of its calls."""
        fn, child, n = self.mi.enclosing_function(c), c, self.mi.parent.get(c)
        while n is not None and n is not fn:
            if isinstance(n, ast.If) and child is not n.test:
                branch = n.body if child in n.body else n.orelse
                ends = branch[-1] if branch else None  # (a break or return ends the run only out of its loop)
                out_of_loop = self.mi.enclosing_loop(n) in self.mi.train_loops
                if ends is not None and terminal(ends, loop=True) and (
                        out_of_loop or not isinstance(ends, (ast.Break, ast.Return))):  # fmt: skip
                    return True
            child, n = n, self.mi.parent.get(n)
        calls = self.mi.calls_to.get(getattr(fn, "name", ""), []) if depth < 2 else []
        return bool(calls) and all(self._last_save(k, depth + 1) for k in calls)

    def _results_file(self, c: ast.Call) -> bool:
        """The file's own name (its string literals, here or where the path variable is set) says results,
        predictions or features: evaluation output, whatever the saved dict is called."""
        path = c.args[1] if len(c.args) > 1 else getattr(kw(c, "f"), "value", None)
        if path is None:
            return False
        exprs = [path]
        if isinstance(path, ast.Name):
            exprs += assigned_values(path.id, walk_local(self.mi.enclosing_function(c)))
        names = [
            x.value for e in exprs for x in ast.walk(e) if isinstance(x, ast.Constant) and isinstance(x.value, str)
        ]
        return any(RESULTS.match(n.lstrip("/\\")) for n in names)

    def _reloaded(self, c: ast.Call) -> bool:
        """`torch.save({"queue": q}, queue_path)` where the same file also `torch.load(queue_path)`s it."""
        path = c.args[1] if len(c.args) > 1 else getattr(kw(c, "f"), "value", None)
        if not isinstance(path, (ast.Name, ast.Attribute)):
            return False
        text = ast.unparse(path)
        return any(isinstance(n, ast.Call) and self.mi.call_name(n).startswith("torch.load") and n.args
                   and ast.unparse(n.args[0]) == text for n in self.mi.nodes)  # fmt: skip

    def _replaced_atomically(self, c: ast.Call) -> bool:
        fn = self.mi.enclosing_function(c)
        target = ast.unparse(c.args[1]) if len(c.args) > 1 else ""
        if re.search(r"tmp|temp|partial", target, re.I):
            return True
        return any(
            isinstance(n, ast.Call) and call_name(n).split(".")[-1] in ("replace", "rename") and "os" in call_name(n)
            for n in walk_local(fn)
        ) or any(  # (or the last good file copied aside first: transformer-lm's `shutil.copy(path, ...-prev...)`)
            isinstance(n, ast.Call) and n.lineno < c.lineno and call_name(n) in BACKUPS and len(n.args) > 1
            and re.search(r"prev|bak|backup|old", ast.unparse(n.args[1]), re.I) for n in walk_local(fn)
        )  # fmt: skip

    def _caller_paths(self, fn: ast.AST, names: list[str], own: str = "") -> str | None:
        """The text of what same-file callers pass for the parameters in `names` (and how they built it); None
        when one passes a fixed name that the path `own` varies by nothing else (SAM-Med3D's `describe="latest"`
        into `f"sam_model_{describe}.pth"`, beside a caller naming it by the epoch: sometimes fixed is real)."""
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return ""
        text = ""
        params = [a.arg for a in fn.args.args]
        params = params[1:] if params[:1] == ["self"] else params
        for call in self.mi.calls_to.get(fn.name, []):
            for i, p in enumerate(params):
                arg = call.args[i] if i < len(call.args) else next((k.value for k in call.keywords if k.arg == p), None)
                if arg is None or p not in names:
                    continue
                if (_fixed_file_arg(arg) and own and not formats_a_counter(re.sub(rf"\b{p}\b", "", own))
                        and self.mi.in_training_loop(call)):  # fmt: skip  # (Group-Free-3D's final `'last'`: no)
                    return None  # (also DeepPhonemizer's `path=self.checkpoint_dir / 'latest_model.pt'`)
                text += " " + ast.unparse(arg)
                used = {x.id for x in ast.walk(arg) if isinstance(x, ast.Name)}
                text += "".join(
                    " " + ast.unparse(n.value)
                    for n in walk_local(self.mi.enclosing_function(call))
                    if isinstance(n, ast.Assign) and used & {t for x in n.targets for t in target_names(x)}
                )
        return text  # fmt: skip

    def _fresh_path(self, c: ast.Call) -> bool:
        """Saving to a buffer, or to a path named by the epoch/step (a new file each time) overwrites nothing."""
        if len(c.args) < 2:
            target = getattr(kw(c, "f"), "value", None)
        else:
            target = c.args[1]
        if target is None:
            return False
        text = ast.unparse(target)
        if re.search(r"BytesIO|buffer|buf\b|\bio\b", text):
            return True
        fn = self.mi.enclosing_function(c)
        seen: set[str] = set()
        todo = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
        if (callers := self._caller_paths(fn, todo, text)) is None:
            return False
        text += callers
        for w in walk_local(fn):  # `with open(path, "wb") as f: torch.save(state, f)`: the path is the target
            if isinstance(w, ast.With):
                for item in w.items:
                    if isinstance(item.optional_vars, ast.Name) and item.optional_vars.id in todo:
                        text += " " + ast.unparse(item.context_expr)
                        todo += [n.id for n in ast.walk(item.context_expr) if isinstance(n, ast.Name)]
        once: set[str] = set()
        for depth in range(3):  # `iterstring = str(iteration)`; `d = join(out, iterstring)`; `path = join(d, name)`
            found = []
            for name in set(todo) - seen:
                seen.add(name)
                # Of `if mode == "all": name = f"model_{acc}.pt" ... elif mode == "best": name = "model.pt"; save(name)`
                # only the assignment just before the save names what it writes; further back, any of them may.
                last = self.value_before(name, c) if depth == 0 else None
                values = [last] if last is not None else assigned_values(name, walk_local(fn))
                if depth == 0 and last is None and len(values) > 1 and any(_fixed_file(v) for v in values):
                    return False  # `if cur_iter is None: f = join(p, "checkpoint.pth.tar") else: f = ...%d...`
                for v in values[:3]:  # `if ema: path = f"ema_{step}.pt" else: path = f"model_{step}.pt"`
                    if isinstance(v, ast.IfExp) and any(isinstance(b, ast.Constant) and isinstance(b.value, str)
                                                        for b in (v.body, v.orelse)):  # fmt: skip
                        return False  # `"best.pt" if is_best else f"iter_{step}.pt"`: one branch is a fixed name
                    if any(
                        isinstance(x, ast.IfExp)
                        and any(isinstance(b, ast.Constant) and isinstance(b.value, str) for b in (x.body, x.orelse))
                        for x in ast.walk(v)
                    ):
                        return False  # `"checkpoint_{}.pth".format("best" if is_best else epoch)` (MiniGPT-4)
                    if STAMP.search(ast.unparse(v)) and not self._in_loop_of(v, c):
                        once.add(name)  # a run's directory stamped once before the loop (GemNet's, doctr's
                        continue  # `current_time`): one path, rewritten
                    text += " " + ast.unparse(v)
                    if isinstance(v, ast.Call):  # `filename = self.ckpt_file_name()`: what the same-file helper returns
                        text += " ".join(ast.unparse(r.value) for f in self.mi.targets_of(v) for r in walk_local(f)
                                         if isinstance(r, ast.Return) and r.value is not None)  # fmt: skip
                    found += [n.id for n in ast.walk(v) if isinstance(n, ast.Name)]
                    for a in {dotted(a) for a in ast.walk(v) if isinstance(a, ast.Attribute)
                              and dotted(a).startswith("self.")} - seen:  # fmt: skip
                        seen.add(a)  # `path = self._path` with `self._path = join(root, date_time)` set just above
                        for n in walk_local(fn):
                            if isinstance(n, ast.Assign) and any(dotted(t) == a for t in n.targets):
                                text += " " + ast.unparse(n.value)
                                found += [x.id for x in ast.walk(n.value) if isinstance(x, ast.Name)]
            todo = found
        if re.search(r"BytesIO\(", text):
            return True
        for name in once:
            text = re.sub(rf"\b{re.escape(name)}\b", "run_name", text)
        # a directory named by the time of the save (pytorch-seq2seq's `Checkpoint.save`): a new one each time
        return formats_a_counter(text) or bool(STAMP.search(text))

    def _in_loop_of(self, v: ast.AST, c: ast.Call) -> bool:
        """`v` runs with each save: inside the save's loop, or in another function (a helper saving)."""
        loop = self.mi.enclosing_loop(c)
        if loop is None or self.mi.enclosing_function(v) is not self.mi.enclosing_function(c):
            return True
        n = self.mi.parent.get(v)
        while n is not None and n is not loop:
            n = self.mi.parent.get(n)
        return n is loop


def _earlier(exprs: list[ast.expr], fn: ast.AST, rounds: int, bound: bool = False) -> Iterator[list[ast.expr]]:
    """`exprs`, then the values their names were assigned in `fn` (with `bound`, also the iterable or context
    a `for` or `with` bound them to: `for path in paths`, `with open(p) as f`), `rounds` times back."""
    binds = [(f.iter, set(target_names(f.target))) for f in walk_local(fn) if isinstance(f, ast.For)] if bound else []
    binds += [(w.context_expr, set(target_names(w.optional_vars))) for w in walk_local(fn)
              if bound and isinstance(w, ast.withitem) and w.optional_vars is not None]  # fmt: skip
    for i in range(rounds + 1):
        yield exprs
        if i == rounds:
            return
        names = {n.id for e in exprs for n in ast.walk(e) if isinstance(n, ast.Name)}
        exprs = [v for n in names for v in assigned_values(n, walk_local(fn))]
        exprs += [it for it, targets in binds if targets & names]


ANY_ARG = ((-1, ""),)  # the path depends on parameters the call site cannot be matched with: every argument


def path_params(mi: ModuleInfo, save: ast.AST, own: ast.AST | None) -> list[tuple[tuple[int, str], ...]]:
    """The (position, name) of the parameters of `own` (the called helper) the save path depends on:
    `torch.save(state, os.path.join(d, f"{epoch}_net.pth"))` with `epoch` a parameter (two assignments back):
    the caller's arguments name the file. `torch.save(state, "latest.pth")` beside an `epoch` parameter that
    only goes into the state: none. Names are followed four assignments (or loop targets) back; a position is
    -1 for keyword-only and star parameters. A save in a function nested in `own` gives one answer per call of
    it there: ForwardTacotron's `save_checkpoint(..., name=f"step{k}K")` calls its inner `helper` once with the
    fixed "latest" paths, whatever the name, and once with the named ones."""
    fn = mi.enclosing_function(save)
    if not isinstance(save, ast.Call) or getattr(fn, "args", None) is None or own is None:
        return [ANY_ARG]
    path = save.args[1] if len(save.args) > 1 else next((k.value for k in save.keywords if k.arg == "f"), None)
    exprs = [path] if path is not None else [*save.args, *(k.value for k in save.keywords)]
    if fn is own:
        return [_depends_on(fn, exprs)]
    if not isinstance(fn, ast.FunctionDef):
        return [ANY_ARG]
    # a helper nested in `own` or beside it (TTS' `save_best_model` -> `save_model(..., checkpoint_path)`): what
    # `own`'s calls of it pass; called only further down, any argument of the call may name the file
    inner = {p for _, p in _depends_on(fn, exprs)}
    calls = [c for c in walk_local(own) if isinstance(c, ast.Call) and dotted(c.func) == fn.name]
    out = [_depends_on(own, [e for p in sorted(inner) if (e := passed_for(fn, c, p)) is not None]) for c in calls]
    return out or [ANY_ARG]


def _depends_on(fn: ast.AST, exprs: list[ast.expr]) -> tuple[tuple[int, str], ...]:
    """The parameters of `fn` that `exprs` are made from (four assignments back)."""
    args = fn.args  # type: ignore[attr-defined]
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    positional = positional[1:] if positional[:1] in (["self"], ["cls"]) else positional
    params = dict.fromkeys(positional) | dict.fromkeys(a.arg for a in args.kwonlyargs)
    params |= dict.fromkeys(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    used: set[str] = set()  # (every layer: TTS' `join(output_folder, file_name)`, `file_name` from `current_step`)
    for layer in _earlier(exprs, fn, 4, bound=True):
        used |= {n.id for e in layer for n in ast.walk(e) if isinstance(n, ast.Name)} & set(params)
    return tuple((positional.index(p) if p in positional else -1, p) for p in sorted(used))


def varying_args(mi: ModuleInfo, c: ast.Call, params: tuple[tuple[int, str], ...] = ANY_ARG) -> bool:
    """An argument naming the epoch or step (`save(f"ckpt_{epoch}.pt")`, `save(epoch=epoch)`, a local
    `checkpoint_dir = f"step{step}"`): the helper may write a new file each time, which only the call shows.
    Only the arguments given for `params` (those the helper's path depends on) count, where they can be
    matched: `save_model(join(d, "model_last.pth"), epoch, model)` passes the epoch into the state only."""
    fn = mi.enclosing_function(c)
    exprs: list[ast.expr] = [*c.args, *(k.value for k in c.keywords)]
    if params and all(i >= 0 or any(k.arg == name for k in c.keywords) for i, name in params):
        given = [c.args[i] for i, _ in params if 0 <= i < len(c.args)]
        given += [k.value for k in c.keywords if any(k.arg == name for _, name in params)]
        exprs = given if given and not any(isinstance(a, ast.Starred) for a in c.args) else exprs
    exprs = [a for a in exprs if not isinstance(a, ast.Dict)]  # `{"epoch": epoch + 1, ...}`: the state, not a path
    # `backup = f"synthesizer_{k:06d}.pt"` with `k = step // 1000`: two assignments back
    layers = list(_earlier(exprs, fn, 2))
    if any(isinstance(v, ast.IfExp) and any(isinstance(b, ast.Constant) and isinstance(b.value, str) for b in (
            v.body, v.orelse)) for layer in layers for v in layer):  # fmt: skip
        return False  # `mark = epoch if opt.save_all else "last"` (not TTS' `scaler=... if amp else None`)
    first, *earlier = layers
    # a value set before the loop (FlowNet's `save_path = join(timestamp, ...)`) is the same at every save
    loops = [n for n in ancestors(mi, c) if isinstance(n, (ast.For, ast.While, ast.AsyncFor))]
    while len(loops) > 1 and repeats_runs(loops[-1]):
        loops.pop()  # `for ii in range(args.itr)` around the epochs: its path is fixed within each run
    inside = set(walk_local(loops[-1])) if loops else None
    earlier = [[v for v in layer if inside is None or mi.parent.get(v) in inside] for layer in earlier]
    texts = [ast.unparse(a) for a in first if not isinstance(a, ast.Constant)]
    texts += [ast.unparse(v) for layer in earlier for v in layer]
    return any(re.search(r"epoch(?!s)|step|" + ITER, t, re.I) or formats_a_counter(t) for t in texts)  # not `epochs`


def ancestors(mi: ModuleInfo, node: ast.AST) -> Iterator[ast.AST]:
    """`node`'s enclosing nodes up to its function, innermost first."""
    n = mi.parent.get(node)
    while n is not None and not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        yield n
        n = mi.parent.get(n)


def then_leaves(mi: ModuleInfo, c: ast.Call) -> bool:
    """`model.save(path); break` (or `return`): the final save on the way out of the loop, made once."""
    stmt: ast.AST | None = c
    while stmt is not None and not isinstance(stmt, ast.stmt):
        stmt = mi.parent.get(stmt)
    block = block_of(mi.parent, stmt)  # type: ignore[arg-type]
    after = block[block.index(stmt) + 1 :] if block else []
    return bool(after) and isinstance(after[0], (ast.Break, ast.Return))
