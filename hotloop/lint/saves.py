"""HL021's judgement of a save: is it training state, written in place, or to a fresh path each time?

`torch.save(state, "ckpt.pt")` in the training loop (or a helper it calls) overwrites the last good
checkpoint; `torch.save(state, f"ckpt_{step}.pt")`, a temp file renamed into place, a BytesIO, or evaluation
statistics do not. Save helpers from another file (`save_on_master`, `save_model(epoch="best")`,
`save_state`) are judged by the names they are given. Mixed into `checks.Checker`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from hotloop.lint.analysis import ModuleInfo, assigned_values, call_name, dotted, target_names, walk_local
from hotloop.lint.gates import anomaly_branch
from hotloop.lint.structure import kw

LATEST = re.compile(r"latest|last|best", re.I)  # a checkpoint's fixed name given to a save helper
SAVER = re.compile(r"save(_(model|models|checkpoint|state|ckpt|pretrained|network|networks))?")  # not images
PAYLOAD = re.compile(r"state_dict|model|optim|ckpt|checkpoint|snapshot|state|weights|net|params|ema|actor|critic|"
                     r"policy|agent", re.I)  # fmt: skip
RESULTS = re.compile(r"(results?|preds?|predictions|outputs?|features|feats|embeddings|detections|dets)([-_.{]|$)",
                     re.I)  # fmt: skip
# a counter, or a metric value (`model_accu_{accu:3.3f}.chkpt`, `best_{val_loss:.4f}.pt`): a new name each save
ITER = r"(?<![a-z])iter|iter(?![a-z])|iteration"  # `n_iter`, `niter`, `iteration`: not `criterion`
VARYING = re.compile(r"\b(ep|it|i|e|t|n_iter|batch_idx)\b|epoch(?!s)|episode|step|" + ITER + r"|kimg|nimg|tick|acc|"
                     r"score|loss|psnr|bleu|fid\b|time", re.I)  # fmt: skip


def formats_a_counter(text: str) -> bool:
    """`f"model_{epoch}.pt"`, `'model_%d.pt' % it`, `"ckpt{}.pth".format(step)`, `'ssd_' + repr(iteration)`: the
    name changes each save."""
    formatted = re.findall(r"\{([^{}]*)\}|%\s*\(?([^)]*)\)?|format\(([^)]*)\)|(?:str|repr)\(([^)]*)\)", text)
    return any(VARYING.search(" ".join(g)) for g in formatted)


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
        varying = any(re.search(r"epoch|step|" + ITER, t, re.I) for t in texts)
        return bool(fixed) and not varying

    def _checkpoint_payload(self, c: ast.Call) -> bool:
        """What is saved looks like training state (weights, optimizer, a checkpoint dict), not evaluation
        statistics or a tensor of results: only losing a checkpoint costs a run."""
        if not c.args:
            return True
        if self._reloaded(c):
            return True  # the file the run reads back on restart: losing it costs the run, whatever it holds
        if self._results_file(c):
            return False  # `torch.save(output_state_dict, join(out, 'results-{}.pkl'.format(rank)))`: a dump
        child, n = c, self.mi.parent.get(c)
        while n is not None and not isinstance(n, ast.Module):
            if isinstance(n, ast.If) and child in anomaly_branch(n):
                return False  # `if torch.isnan(out).any(): save(state, "NaN.pth")`: a dump of a diverged model
            child, n = n, self.mi.parent.get(n)
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
        return bool(PAYLOAD.search(text))

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

    def _fresh_copy_beside(self, c: ast.Call) -> bool:
        """`save(state, f"model_{epoch}.pth")` then `save(state, "checkpoint.pth")`: the in-place file is only
        the latest alias of a per-epoch copy, so a torn write loses nothing."""
        parent = self.mi.parent.get(c)
        block = self.mi.parent.get(parent) if isinstance(parent, ast.Expr) else None
        body = getattr(block, "body", [])
        return any(isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and s.value is not c
                   and re.search(r"save", self.mi.call_name(s.value)) and self._fresh_path(s.value)
                   and not re.search(r"image|img|fig|plot|sample|grid|video|audio|wav", self.mi.call_name(s.value),
                                     re.I)
                   for s in body)  # fmt: skip

    def _replaced_atomically(self, c: ast.Call) -> bool:
        fn = self.mi.enclosing_function(c)
        target = ast.unparse(c.args[1]) if len(c.args) > 1 else ""
        if re.search(r"tmp|temp|partial", target, re.I):
            return True
        return any(
            isinstance(n, ast.Call) and call_name(n).split(".")[-1] in ("replace", "rename") and "os" in call_name(n)
            for n in walk_local(fn)
        )

    def _caller_paths(self, fn: ast.AST, names: list[str]) -> str:
        """The text of what same-file callers pass for the parameters in `names` (and how they built it)."""
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
        text += self._caller_paths(fn, todo)
        for w in walk_local(fn):  # `with open(path, "wb") as f: torch.save(state, f)`: the path is the target
            if isinstance(w, ast.With):
                for item in w.items:
                    if isinstance(item.optional_vars, ast.Name) and item.optional_vars.id in todo:
                        text += " " + ast.unparse(item.context_expr)
                        todo += [n.id for n in ast.walk(item.context_expr) if isinstance(n, ast.Name)]
        for depth in range(3):  # `iterstring = str(iteration)`; `d = join(out, iterstring)`; `path = join(d, name)`
            found = []
            for name in set(todo) - seen:
                seen.add(name)
                # Of `if mode == "all": name = f"model_{acc}.pt" ... elif mode == "best": name = "model.pt"; save(name)`
                # only the assignment just before the save names what it writes; further back, any of them may.
                last = self.value_before(name, c) if depth == 0 else None
                values = [last] if last is not None else assigned_values(name, walk_local(fn))
                for v in values[:3]:  # `if ema: path = f"ema_{step}.pt" else: path = f"model_{step}.pt"`
                    if isinstance(v, ast.IfExp) and any(isinstance(b, ast.Constant) for b in (v.body, v.orelse)):
                        return False  # `"best.pt" if is_best else f"iter_{step}.pt"`: one branch is a fixed name
                    if any(
                        isinstance(x, ast.IfExp)
                        and any(isinstance(b, ast.Constant) and isinstance(b.value, str) for b in (x.body, x.orelse))
                        for x in ast.walk(v)
                    ):
                        return False  # `"checkpoint_{}.pth".format("best" if is_best else epoch)` (MiniGPT-4)
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
        # a directory named by the time of the save (pytorch-seq2seq's `Checkpoint.save`): a new one each time
        return formats_a_counter(text) or bool(re.search(r"strftime\(|datetime\.now\(|time\.time\(\)", text))
