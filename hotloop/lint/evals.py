"""HL018, evaluation without `torch.no_grad()`/`model.eval()`: in an evaluation function, an inline loop over
evaluation data, a test batch every N steps (`EvalChecks`, mixed into `checks.Checker`), and across files: the
script calls another project file's evaluation function (`evaluate(model, data)`), which runs the model in a loop
without turning gradients off, and the call site does not either (`eval_hits`).

Its own file's lint judges the function with its same-file callers only (`structure.evaluation`), so a
helper module never linted beside the script (SASRec's `utils.evaluate`) was never judged at all. A run
that lints the helper's file too reports it there instead (`effects.LINTED`).
"""

from __future__ import annotations

import ast
import re

from hotloop.lint.analysis import ModuleInfo, call_name, dotted, is_step_call, method_name, walk_local
from hotloop.lint.effects import LINTED, relative
from hotloop.lint.imports import Project, defining, find_def, load_module
from hotloop.lint.structure import (
    EVAL_DATA,
    EVAL_FLAG,
    EVAL_FUNCTION,
    FORWARD_CALL,
    GRAD_OFF,
    RUNS_MODEL,
    grad_off_at,
    is_false_node,
    is_true_node,
    kw,
    src,
)
from hotloop.lint.syntax import block_of, param_defaults

EVAL_CALL = re.compile(r"^(val|valid|validate|validation|eval|evaluate|evaluation|test)(_|$)", re.I)


def _runs_by_name(c: ast.Call) -> bool:
    """A call named for a network (`model(x)`, `self.generator(z)`), not a hand-off to an evaluation helper named
    for what it evaluates (contriever's `beir_utils.evaluate_model(query_encoder, ...)`: `eval_hits` judges it)."""
    last = call_name(c).split(".")[-1] or "-"
    return bool(RUNS_MODEL.search(last)) and not EVAL_CALL.match(last)


NOT_FORWARD = {"eval", "train", "parameters", "named_parameters", "state_dict", "load_state_dict", "to", "cuda",
               "cpu", "zero_grad", "modules", "named_modules", "children", "apply", "half", "float"}  # fmt: skip


ACCESSOR = re.compile(r"_|(get|set|reset|load|save|register|init|num|count)_")  # (flow_matching's `get_nfe()`)


def _model_method(c: ast.Call, parent: dict[ast.AST, ast.AST]) -> bool:
    """`model.rating(u_emb, i_emb)` in MixGCF's `test`: a method of the model that computes with it."""
    f = c.func  # (its result used: not flow_matching's `cfg_scaled_model.reset_nfe_counter()` statement)
    return (isinstance(f, ast.Attribute) and f.attr not in NOT_FORWARD and not ACCESSOR.match(f.attr)
            and bool(FORWARD_CALL.search(dotted(f.value).rpartition(".")[2] or "-"))
            and not isinstance(parent.get(c), ast.Expr))  # fmt: skip


def eval_hits(mi: ModuleInfo) -> list[tuple[str, ast.Call, str]]:
    """HL018 at a call of another file's evaluation function (`evaluate(model, dataset, args)`) that loops over
    the model's forward passes without turning gradients off, when the call site does not either. (In its own
    file's lint the function is judged with its same-file callers; a run linting both files reports it there.)"""
    out: list[tuple[str, ast.Call, str]] = []
    project = Project.of(mi)
    if not (project.names or project.modules):
        return out
    for c in mi.nodes:
        if not isinstance(c, ast.Call) or not EVAL_CALL.match(call_name(c).rpartition(".")[2]):
            continue
        if (target := project.callee(c)) is None or grad_off_at(mi, c):
            continue
        file, name = defining(*target)
        helper = load_module(file, file.stat().st_mtime)
        fn = find_def(helper.tree, name, ()) if helper is not None else None
        if helper is None or fn is None or str(file.resolve()) in LINTED:
            continue
        body = list(walk_local(fn))
        source = ast.unparse(fn) + "".join(ast.unparse(f) for n in body if isinstance(n, ast.Call)
                                           for f in helper.targets_of(n))  # fmt: skip
        loops = [n for n in body if isinstance(n, (ast.For, ast.While))]
        # (a full-batch evaluation function runs its one forward outside any loop: PairNorm's `val(net, criterion,
        # data)`; not a method such as SAC's `actor.evaluate(state)` or SB3's `policy.evaluate_actions(...)`, which
        # compute the training loss's log-probabilities and need their gradients)
        inside = [n for loop in loops for n in walk_local(loop)] if loops else body if "." not in name else []
        calls = [n for n in inside if isinstance(n, ast.Call)]
        evaled = {dotted(n.func.value) for n in body if isinstance(n, ast.Call) and method_name(n) == "eval"}
        forwards = [n for n in calls if FORWARD_CALL.search(call_name(n).rpartition(".")[2] or "-")
                    or call_name(n) in evaled or _model_method(n, helper.parent)]  # fmt: skip  # (`net_g.eval()` ...)
        forward = min(forwards, key=lambda n: n.lineno, default=None)
        if forward is None or GRAD_OFF.search(source):
            continue
        out.append(("HL018", c, f"`{call_name(c)}(...)` evaluates without `torch.no_grad()` "
                                f"({relative(project, file)}:{forward.lineno} `{call_name(forward)}(...)`): "
                                "every forward keeps its activations"))  # fmt: skip
    return out


class EvalChecks:
    mi: ModuleInfo

    def add(self, code: str, node: ast.AST, message: str, edit: object = None) -> None:  # pragma: no cover
        raise NotImplementedError

    def evaluation(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """An evaluation loop (a `val*`/`eval*`/`test*` function, or any function run with `train=False`)
        that misses no_grad or model.eval(), unless every same-file caller provides it. A unit test (`test_*`
        in a `test_*.py`/`*_test.py` file or a `TestCase`) checks outputs, gradients included: not evaluation."""
        if fn.name.startswith("test_") and (re.search(r"(^|/)(test_\w+|\w+_test)\.py$", self.mi.path or "") or any(
            isinstance(k, ast.ClassDef) and any("TestCase" in ast.unparse(b) for b in k.bases)
            for k in [self.mi.parent.get(fn)]
        )):  # fmt: skip
            return
        flag = next((a.arg for a in fn.args.args if a.arg in ("train", "training", "is_train", "is_training")),
                    None)  # fmt: skip
        # or the other way round: `train(..., is_validate=True)` (FlowNet2), `run_epoch(cross_valid=True)`
        evals = next((a.arg for a in fn.args.args if EVAL_FLAG.fullmatch(a.arg)), None) if flag is None else None
        loops = [n for n in walk_local(fn) if isinstance(n, (ast.For, ast.While))]
        # `def predict(self, X): self.network.eval(); for data in loader: self.network(data)` (any name): a
        # function that trains nothing, puts a model in eval mode itself and loops over data evaluates
        if not (EVAL_FUNCTION.match(fn.name) or self._own_eval(fn)) and flag is None and evals is None:
            return

        # (or what the function itself put in eval mode: `self.refiner.eval()` ... `self.refiner(lr, scale)`, CARN)
        evaled = {dotted(n.func.value) for n in walk_local(fn) if isinstance(n, ast.Call) and method_name(n) == "eval"
                  and isinstance(n.func, ast.Attribute)} - {""}  # fmt: skip

        def runs_model(node: ast.AST, depth: int = 0) -> bool:
            return any(isinstance(n, ast.Call) and (_runs_by_name(n) or dotted(n.func) in evaled
                       or depth < 2 and any(runs_model(f, depth + 1) for f in self.mi.targets_of(n) if f is not fn))
                       for n in walk_local(node))  # fmt: skip

        calls_model = any(runs_model(loop) for loop in loops)
        # pygcn's full-batch `def test(): model.eval(); output = model(features, adj)`: no loop, one forward
        whole = not loops and bool(re.fullmatch(r"(compute_|run_)?(test|val|valid|validate|validation|evaluate|eval)",
                                                fn.name, re.I)
                                   and re.search(r"\.eval\(\)", ast.unparse(fn)) and runs_model(fn))  # fmt: skip
        if not whole and (not loops or not calls_model):
            return
        calls = self.mi.calls_to.get(fn.name, [])
        if flag is not None or evals is not None:  # a shared train/eval loop: only its evaluating calls evaluate
            name = flag or evals
            idx = [a.arg for a in fn.args.args].index(name) - (1 if fn.args.args[0].arg in ("self", "cls") else 0)
            test = is_false_node if flag is not None else is_true_node
            default = param_defaults(fn).get(name)  # (DialogueGCN's `train=False`, left out by the evaluating calls)
            calls = [c for c in calls if test(getattr(kw(c, name), "value", None))
                     or len(c.args) > idx >= 0 and test(c.args[idx])
                     or kw(c, name) is None and len(c.args) <= idx and test(default)]  # fmt: skip
            if not calls:
                return
        elif any(is_step_call(n) for n in walk_local(fn)):
            return
        if any(isinstance(n, ast.Call) and re.search(r"(valid|val|eval|validation|test|predict)_step$", call_name(n))
               and not self.mi.targets_of(n) for n in walk_local(fn)):  # fmt: skip
            return  # a trainer's `valid_step` (another file) sets the mode and turns gradients off itself
        callees = self._callee_source(fn)
        src = ast.unparse(fn) + callees
        grad_off = bool(GRAD_OFF.search(src))
        if grad_off and not GRAD_OFF.search(callees) and not any(
            re.search(r"no_grad|inference_mode", ast.unparse(d)) for d in fn.decorator_list
        ):  # fmt: skip
            # `with torch.no_grad(): input = input.cuda()` then `output = self.predict(input)` outside it
            forwards = [
                n
                for loop in loops
                for n in walk_local(loop)
                if isinstance(n, ast.Call)
                and (
                    FORWARD_CALL.search(call_name(n).split(".")[-1] or "-")
                    or any(runs_model(f, 1) for f in self.mi.targets_of(n) if f is not fn)
                )
            ]
            grad_off = all(grad_off_at(self.mi, x) for x in forwards)
        grad_off = grad_off or bool(re.search(r"volatile\s*=\s*True", src))  # pre-0.4 `Variable(x, volatile=True)`
        if not grad_off and not (calls and all(self._caller_has(c, "grad") for c in calls)):
            what = f"`{fn.name}(..., {evals}=True)`" if evals else f"`{fn.name}`"
            self.add("HL018", fn, f"{what} runs the model without `torch.no_grad()`: activations are kept")
        # (`model.train(train)` in a shared loop: called with `train=False`, the mode is eval's; fsgan)
        own_mode = rf"|\.train\((mode=)?{flag}\)" if flag else ""
        if not re.search(r"\.eval\(\)|\.train\(False\)|\.train\(mode=False\)" + own_mode, src) and not (
            calls and all(self._caller_has(c, "eval") for c in calls)
        ):
            what = f"`{fn.name}(..., {flag}=False)`" if flag else f"`{fn.name}(..., {evals}=True)`" if evals else (
                f"`{fn.name}`")  # fmt: skip
            self.add("HL018", fn, f"{what} runs the model without `model.eval()`: dropout/batch norm train")

    def _callee_source(self, fn: ast.AST, depth: int = 2) -> str:
        """The source of the same-file functions `fn` calls (two levels): `eval()` -> `eval_step()` holding the
        `with torch.no_grad():` counts for `eval()`."""
        if depth == 0:
            return ""
        out = ""
        for n in walk_local(fn):
            if isinstance(n, ast.Call):
                for f in self.mi.targets_of(n):
                    if f is not fn:
                        out += "\n" + ast.unparse(f) + self._callee_source(f, depth - 1)
        return out

    def inline_evaluation(self, loop: ast.For | ast.ListComp | ast.GeneratorExp) -> None:
        """`for batch in eval_dataloader: outputs = model(**batch)` written inline (not in an `eval*` function):
        no_grad must come from a `with` around it (or the function's decorator), eval() from above it."""
        if not isinstance(loop, ast.For):
            return self._comprehension_evaluation(loop)
        it = loop.iter.args[0] if isinstance(loop.iter, ast.Call) and loop.iter.args else loop.iter
        name = dotted(it).split(".")[-1]
        name = dotted(it) or ast.unparse(loop.iter)
        if not re.search(r"(eval|val|valid|test)\w*(loader|data|dl)|(loader|data|dl)\w*(eval|val|test)", name, re.I) \
                and not self._after_eval(loop):  # fmt: skip
            return
        fn = self.mi.enclosing_function(loop)
        if re.match(r"^(val|eval|test)", getattr(fn, "name", ""), re.I) or self._own_eval(fn):
            return  # the function-level check covers it
        body = list(walk_local(loop))
        direct = any(isinstance(n, ast.Call) and RUNS_MODEL.search(call_name(n).split(".")[-1] or "-") for n in body)
        helper = None if direct else next((n for n in body if isinstance(n, ast.Call) and self._forwards_for(n)), None)
        if any(is_step_call(n) for n in body) or not direct and helper is None:
            return
        grad_off = any(re.search(r"no_grad|inference_mode", ast.unparse(d)) for d in getattr(fn, "decorator_list", []))
        grad_off = grad_off or grad_off_at(self.mi, loop)  # (TAPE's `torch.set_grad_enabled(False)` above the loop)
        n = self.mi.parent.get(loop)
        while n is not None and n is not fn and not grad_off:
            if isinstance(n, ast.With) and any(GRAD_OFF.search(ast.unparse(i.context_expr)) for i in n.items):
                grad_off = True
            n = self.mi.parent.get(n)
        inner = any(isinstance(w, ast.With) and re.search(r"no_grad|inference_mode", ast.unparse(w)) for w in body)
        text = ast.unparse(fn)
        forward = next((n for n in body if isinstance(n, ast.Call) and FORWARD_CALL.search(call_name(n) or "-")), None)
        if (forward is not None and re.search(r"\b(model|net)\w*\.train\(\)", text)
                and not re.search(r"\.eval\(\)|\.train\((mode=)?False\)", text)
                and not self._train_just_before(loop)):  # fmt: skip
            # DAIN: `model = model.train()` above the epochs, and the validation loop under no_grad never leaves it
            self.add("HL018", forward, f"`for ... in {src(loop.iter)}` runs the model in training mode (no "
                     "`model.eval()` in this function): dropout/batch norm train")  # fmt: skip
        if not grad_off and not inner:
            self.add("HL018", helper or loop, f"`for ... in {src(loop.iter)}` runs the model without `torch.no_grad()`"
                     + (f" (in `{call_name(helper)}(...)`)" if helper is not None else "") + ": "
                     "activations are kept")  # fmt: skip

    def _comprehension_evaluation(self, comp: ast.ListComp | ast.GeneratorExp) -> None:
        """torchMoji's `val_loss = np.mean([calc_loss(loss_op, model(Variable(xv)), ...) for xv, yv in val_gen])`:
        an evaluation written as a comprehension over validation batches, with no `no_grad` around it."""
        it = comp.generators[0].iter
        name = dotted(it.args[0] if isinstance(it, ast.Call) and it.args else it) or ast.unparse(it)
        fn = self.mi.enclosing_function(comp)
        if (not EVAL_DATA.search(name) or re.match(r"^(val|eval|test)", getattr(fn, "name", ""), re.I)
                or grad_off_at(self.mi, comp) or self._own_eval(fn)):  # fmt: skip
            return None
        calls = [n for n in ast.walk(comp.elt) if isinstance(n, ast.Call)]
        if any(is_step_call(n) for n in calls) or not any(RUNS_MODEL.search(call_name(n).split(".")[-1] or "-")
                                                          for n in calls):  # fmt: skip
            return None
        self.add("HL018", comp, f"`[... for ... in {src(it)}]` runs the model without `torch.no_grad()`: "
                 "activations are kept")  # fmt: skip
        return None

    def _own_eval(self, fn: ast.AST) -> bool:
        """A function that trains nothing, puts a model in eval mode itself and loops over data: it evaluates,
        and `evaluation` judges it whole (the inline check leaves its loops alone: one finding, not two)."""
        loops = [n for n in walk_local(fn) if isinstance(n, (ast.For, ast.While))]
        return (any(isinstance(n, ast.For) and self.mi._iterates_data(n.iter) for n in loops)
                and not any(loop in self.mi.train_loops for loop in loops)
                and not (fn in self.mi.train_functions and any(is_step_call(n) for n in walk_local(fn)))  # (pt-dec's
                # `predict`, called from the training loop, is hot, but trains nothing: still one finding, at its def)
                and any(isinstance(n, ast.Call) and method_name(n) == "eval" and not n.args
                        for n in walk_local(fn)))  # fmt: skip

    def _train_just_before(self, loop: ast.AST) -> bool:
        """`model.train()` as the statement right before the one holding the loop (maskrcnn-benchmark switches to
        training mode on purpose: its detectors return validation losses only there)."""
        n: ast.AST | None = loop
        while n is not None and (n is loop or isinstance(n, (ast.With, ast.If, ast.Try))):
            block = block_of(self.mi.parent, n)
            i = block.index(n) if n in block else 0  # type: ignore[arg-type]
            if i > 0 and re.search(r"\.train\(\)", ast.unparse(block[i - 1])):
                return True
            n = self.mi.parent.get(n)  # (up through `with torch.no_grad():`, not out of an enclosing loop)
        return False

    def _forwards_for(self, call: ast.Call) -> bool:
        """learn2learn's `fast_adapt(model, batch, ...)`: the model handed to a same-file helper that calls it and
        needs no gradients itself (a MAML helper adapting with `learner.adapt(loss)` does; so does a backward)."""
        if not any(isinstance(a, ast.Name) and FORWARD_CALL.search(a.id) for a in call.args):
            return False
        fns = self.mi.targets_of(call)
        return bool(fns) and all(
            any(isinstance(n, ast.Call) and FORWARD_CALL.search(call_name(n).split(".")[-1] or "-")
                for n in walk_local(f))
            and not re.search(r"\.backward\(|autograd\.grad\(|\.adapt\(|\.step\(", ast.unparse(f)) for f in fns
        )  # fmt: skip

    def _after_eval(self, loop: ast.For) -> bool:
        """SR-GNN's `model.eval()` then `for i in slices: forward(model, i, test_data)` after the training loop of
        the same function: the statements above the loop in its block switch to eval mode (after any `train()`)."""
        body = [n for stmt in loop.body for n in ast.walk(stmt)]
        if not any(isinstance(n, ast.Call) and FORWARD_CALL.search(call_name(n) or "-") for n in body):
            return False  # the network itself is not called here (`validate(infer_fn, ...)` may guard itself)
        block = block_of(self.mi.parent, loop)
        for stmt in reversed(block[: block.index(loop)] if block else []):
            calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call)]
            if any(method_name(n) == "train" for n in calls) or isinstance(stmt, (ast.For, ast.While)):
                return False
            if any(method_name(n) == "eval" and not n.args and not n.keywords for n in calls):
                return True
        return False

    def gated_evaluation(self, gate: ast.If) -> None:
        """`if i % 10 == 0: data = next(iter(testdataloader)); pred = classifier(points)` inside the training
        loop (PointNet): a test batch every N steps, run without no_grad."""
        if not (self.mi.in_training_loop(gate) and self.mi.boundary_gate(gate)):
            return
        body = [n for stmt in gate.body for n in ast.walk(stmt)]
        if not any(isinstance(n, ast.Call) and call_name(n) == "next" and n.args
                   and EVAL_DATA.search(ast.unparse(n.args[0])) for n in body):  # fmt: skip
            return
        fn = self.mi.enclosing_function(gate)
        if any(re.search(r"no_grad|inference_mode", ast.unparse(d)) for d in getattr(fn, "decorator_list", [])):
            return
        for n in body:
            if isinstance(n, ast.With) and GRAD_OFF.search(ast.unparse(n)):
                return
        forward = next((n for n in body if isinstance(n, ast.Call) and FORWARD_CALL.search(call_name(n) or "-")), None)
        if forward is not None:
            self.add("HL018", forward, f"`{src(forward)}` evaluates a test batch without `torch.no_grad()`: "
                     "activations are kept")  # fmt: skip

    def _caller_has(self, call: ast.Call, what: str) -> bool:
        """The caller switched to eval mode before the call, or runs it under no_grad."""
        caller = self.mi.enclosing_function(call)
        if what == "eval":
            return any(isinstance(n, ast.Call) and (method_name(n) == "eval" or method_name(n) == "train"
                                                    and n.args and is_false_node(n.args[0]))
                       and n.lineno <= call.lineno for n in walk_local(caller))  # fmt: skip
        if isinstance(caller, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            re.search(r"no_grad|inference_mode", ast.unparse(d)) for d in caller.decorator_list
        ):
            return True
        n = self.mi.parent.get(call)
        while n is not None and n is not caller:
            if isinstance(n, ast.With) and any(re.search(r"no_grad|inference_mode|set_grad_enabled\(False\)",
                                                         ast.unparse(i.context_expr)) for i in n.items):  # fmt: skip
                return True  # (PointRCNN's `with torch.set_grad_enabled(False): self.eval_epoch(test_loader)`)
            n = self.mi.parent.get(n)
        return False
