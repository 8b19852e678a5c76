"""The class of an object the script did not construct: `model.set_input(data)` with `model = create_model(opt)`.

Research code builds its models, losses and trainers through factories (`create_model(opt)`, `build_model(args)`,
`construct_class_by_name(**cfg)`) or receives them as parameters (`train_one_epoch(model, criterion, ...)`), so
the cross-file pass cannot see which class a hot call runs. The receiver's name usually says it: `criterion`
is the project's `SetCriterion`, `mp_trainer` its `MixedPrecisionTrainer`, `nets.fan` its `FAN`. `guess`
takes, among the project's classes that define the method called, the first (in path order) whose name or a
base class's name contains a word of the receiver's name, and whose method does something (not `pass` or
`raise NotImplementedError`: the abstract base). Subclasses of one base mostly share their data handling, so
one stands for the others. The project is the folder holding the script and every project module it imports
(or, when higher, the nearest folder above the script with a `.git`, `pyproject.toml`, `setup.py`,
`requirements.txt` or README, at most four levels up; with none, the highest folder from which one of the
script's own imports resolves to a project module, `_unmarked_root`).

Methods every framework object has (`train`, `step`, `to`, `state_dict`, `forward`, ...) are never guessed:
the receiver is as likely PyTorch's own object as the project's.

The same project files answer three other questions the script alone cannot: whether the project runs on a GPU
at all (`project_on_device`: a trainer module that never says `cuda` itself), a `--flag` default declared in
another options module (`project_flag_zero`: SPADE's `--nThreads 0`), and which file a bare import means when
it only works with the project's folders on `sys.path` (`unique_module`: Speech-Transformer's `from loss import`).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from hotloop.lint.syntax import parse_source

ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "README.md", "README.rst",
                "README", "LICENSE")  # fmt: skip
SKIP_DIRS = {"test", "tests", "docs", "doc", "build", "dist", "node_modules", "site-packages", "venv", "__pycache__"}
MAX_FILES = 4000
LEVELS_UP = 4
# Methods of PyTorch's modules, optimizers, tensors and of Python's containers, loggers and files.
COMMON = set(
    """train eval zero_grad step to cuda cpu parameters named_parameters buffers named_buffers state_dict
load_state_dict modules named_modules children apply float half double bfloat16 backward item append extend add
get items keys values pop format join split mean sum size view reshape detach clone numpy tolist copy_ set_epoch
log info debug warning write flush close print reset register_buffer register_parameter requires_grad_ add_scalar
add_scalars add_image scale unscale_ set_description set_postfix sample_batch __call__ forward update""".split()
)
GENERIC = {"self", "module", "modules", "the", "obj", "cur", "new", "old", "main", "base", "args", "opt", "cfg",
           "config", "model_without_ddp", "ddp", "unwrap"}  # fmt: skip

_FILES: dict[Path, list[tuple[Path, str]]] = {}
_TREES: dict[Path, ast.Module | None] = {}
_DEFS: dict[tuple[Path, str], list[tuple[Path, str, list[str]]]] = {}


def project_root(file: Path, imported: list[Path]) -> Path | None:
    """The folder that holds `file` and the project modules it imports, or the marked root above it."""
    if not imported:
        return None
    common = Path(os.path.commonpath([file.parent, *(f.parent for f in imported)]))
    for d in [file.parent, *list(file.parent.parents)[:LEVELS_UP]]:
        if any((d / m).exists() for m in ROOT_MARKERS):
            return common if common in d.parents else d  # the higher of the two
    return common


_ON_DEVICE: dict[Path, bool] = {}
CUDA = re.compile(r"\.cuda\(|[\"']cuda(:[^\"']*)?[\"']|cuda\.is_available\(")  # (also `"cuda:{}".format(gpu)`, DICE)


def project_on_device(file: Path) -> bool:
    """Some file of the project (`_root`: the marked root above `file`, or where its imports resolve) moves tensors
    to a GPU: a trainer module that never says `cuda` itself (decision-transformer's `SequenceTrainer`, handed its
    batches by `experiment.py`) still runs its steps on the device."""
    root = _root(file)
    if root not in _ON_DEVICE:
        _ON_DEVICE[root] = any(CUDA.search(text) for _, text in _files(root))
    return _ON_DEVICE[root]


def _root(file: Path) -> Path:
    ups = [file.parent, *list(file.parent.parents)[:LEVELS_UP]]
    marked = next((d for d in ups if any((d / m).exists() for m in ROOT_MARKERS)), None)
    return marked if marked is not None else _unmarked_root(file, ups)


_UNMARKED: dict[Path, Path] = {}
TOP_IMPORT = re.compile(r"^(?:from|import)\s+([A-Za-z_]\w*)([.\s])", re.M)


def _unmarked_root(file: Path, ups: list[Path]) -> Path:
    """No marker above the file (files copied out of a checkout, a folder never put under git): the highest
    folder from which one of the file's own absolute imports resolves to a project module (`from utils.utils
    import get_lr` in `utils/utils_fit.py` runs with the folder above `utils/` on `sys.path`, where `train.py`,
    its caller, lives), or the file's own folder."""
    if file not in _UNMARKED:
        try:
            found_imports = TOP_IMPORT.findall(file.read_text(encoding="utf-8-sig", errors="replace"))
        except OSError:
            found_imports = []
        heads = {h for h, _ in found_imports}
        dotted_heads = {h for h, sep in found_imports if sep == "."}  # (`from utils.utils import`: a package)
        # (two folders up at most, and only a package with an `__init__.py` or a module beside other Python files:
        # `import main` must not take `/work/main/` for a module when linting files copied under `/work/lint_corpus`)
        own = {h for h in heads if (file.parent / h).is_dir()
               or h not in dotted_heads and (file.parent / f"{h}.py").is_file()}  # fmt: skip
        found = [d for d in ups[1:3] for h in heads - own
                 if (d / h / "__init__.py").is_file() or h not in dotted_heads and (d / f"{h}.py").is_file()
                 or (d / h).is_dir() and any(next((d / h).glob(g), None) is not None for g in ("*.py", "*/*.py"))
                 and next(d.glob("*.py"), None) is not None]  # fmt: skip
        _UNMARKED[file] = min(found, key=lambda d: len(d.parts)) if found else file.parent
    return _UNMARKED[file]


def project_flag_zero(file: Path, flag: str) -> bool:
    """Some options module of the project declares `--<flag>` with `default=0` (SPADE's `--nThreads` in
    `options/base_options.py`) and none declares it otherwise."""
    named = re.compile(r"add_argument\(\s*['\"]--" + re.escape(flag) + r"['\"][^)]*?default\s*=\s*(\w+)")
    # (or under another name, `add_argument("--numWorkers", dest="num_workers", default=0)`: LXMERT)
    dest = re.compile(r"add_argument\((?=[^)]*?dest\s*=\s*['\"]" + re.escape(flag) + r"['\"])[^)]*?default\s*=\s*(\w+)")
    defaults = {m.group(1) for _, text in _files(_root(file)) for p in (named, dest) for m in p.finditer(text)}
    return defaults == {"0"}


_NAMED: dict[Path, dict[str, list[Path]]] = {}


def unique_module(file: Path, module: str) -> Path | None:
    """The one `<module>.py` in the project (or `<module>/__init__.py`), for a bare import that works only with the
    project's folders on `sys.path` (Speech-Transformer's `from loss import ...` of `src/transformer/loss.py`,
    set by its run script). Two files of that name: no guess. Only within a project root above the file's folder
    (marked, or where its own imports resolve: `_unmarked_root`)."""
    root = _root(file)
    if root == file.parent and not any((root / m).exists() for m in ROOT_MARKERS):
        return None
    if root not in _NAMED:
        named: dict[str, list[Path]] = {}
        for d, dirs, names in os.walk(root):
            dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in SKIP_DIRS)
            for n in names:
                if n.endswith(".py"):
                    stem = Path(d).name if n == "__init__.py" else n[:-3]
                    named.setdefault(stem, []).append(Path(d) / n)
        _NAMED[root] = named
    found = _NAMED[root].get(module, [])
    if len(found) > 1:  # `src/data/__init__.py` (empty) beside `src/data/data.py`: the module is the one with code
        found = [f for f in found if f.name != "__init__.py" or re.search(r"^(def|class|from|import) ", f.read_text(
            encoding="utf-8-sig", errors="replace"), re.M)]  # fmt: skip
    return found[0] if len(found) == 1 else None


def project_files(file: Path) -> list[tuple[Path, str]]:
    """(path, text) of each Python file of the project `file` belongs to."""
    return _files(_root(file))


def _files(root: Path) -> list[tuple[Path, str]]:
    if root not in _FILES:
        out: list[tuple[Path, str]] = []
        for d, dirs, names in os.walk(root):
            dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in SKIP_DIRS)
            for n in sorted(names):
                if n.endswith(".py") and len(out) < MAX_FILES:
                    try:
                        out.append((Path(d) / n, (Path(d) / n).read_text(encoding="utf-8-sig", errors="replace")))
                    except OSError:
                        continue
        _FILES[root] = out
    return _FILES[root]


def _tree(file: Path, text: str) -> ast.Module | None:
    if file not in _TREES:
        try:
            _TREES[file] = parse_source(text)[0]
        except (SyntaxError, ValueError):
            _TREES[file] = None
    return _TREES[file]


def _trivial(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """`pass`, `...`, a docstring or `raise NotImplementedError`: an abstract method."""
    return all(isinstance(s, (ast.Pass, ast.Raise)) or isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
               for s in fn.body)  # fmt: skip


METHOD_DEF = re.compile(r"^\s+(?:async\s+)?def\s+(\w+)\s*\(", re.M)
_METHODS: dict[Path, dict[str, list[tuple[Path, str]]]] = {}


def _methods(root: Path) -> dict[str, list[tuple[Path, str]]]:
    """Method name -> the project files (with their text) that define a method of that name: one pass."""
    if root not in _METHODS:
        index: dict[str, list[tuple[Path, str]]] = {}
        for file, text in _files(root):
            for name in set(METHOD_DEF.findall(text)):
                index.setdefault(name, []).append((file, text))
        _METHODS[root] = index
    return _METHODS[root]


def in_folder(folder: Path, name: str) -> Path | None:
    """The one module of the package folder that defines `name` at its top level, when the folder's
    `__init__.py` (which would re-export it: S3FD's `from layers.modules import MultiBoxLoss`) is not there: a
    checkout of only the files a script needs, or a package whose `__init__.py` is generated at build time."""
    if not folder.is_dir() or (folder / "__init__.py").exists():
        return None
    defines = re.compile(rf"^(class|def)\s+{re.escape(name)}\b", re.M)
    hits = [
        f for f in sorted(folder.glob("*.py")) if defines.search(f.read_text(encoding="utf-8-sig", errors="replace"))
    ]
    return hits[0] if len(hits) == 1 else None


_CALLED: dict[Path, dict[str, list[Path]]] = {}


def callers_of(file: Path, name: str) -> list[Path]:
    """The project's other files whose text calls `name(...)` (one pass over the project builds the index)."""
    root = _root(file)
    if root not in _CALLED:
        index: dict[str, list[Path]] = {}
        for f, text in _files(root):
            for called in set(re.findall(r"\b(\w+)\s*\(", text)):
                index.setdefault(called, []).append(f)
        _CALLED[root] = index
    return [f for f in _CALLED[root].get(name, []) if f.resolve() != file.resolve()]


def definitions(root: Path, meth: str) -> list[tuple[Path, str, list[str]]]:
    """(file, class, names of the class and its bases) of each project class whose own `meth` does something."""
    key = (root, meth)
    if key not in _DEFS:
        out = []
        for file, text in _methods(root).get(meth, []):
            if (tree := _tree(file, text)) is None:
                continue
            for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
                fn = next((m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and m.name == meth), None)  # fmt: skip
                if fn is not None and not _trivial(fn):
                    bases = [ast.unparse(b).rpartition(".")[2] for b in cls.bases]
                    out.append((file, cls.name, [cls.name, *bases]))
        _DEFS[key] = out
    return _DEFS[key]


def words(receiver: str) -> list[str]:
    """`self.mp_trainer` -> ['trainer'] (and 'mp' is too short); `nets.fan` -> ['fan']; `criterion` -> ['criterion']."""
    last = receiver.rpartition(".")[2]
    if last.lower() in GENERIC:
        return []
    parts = re.split(r"_|(?<=[a-z])(?=[A-Z])", last)
    return [p.lower() for p in parts if len(p) >= 3 and p.lower() not in GENERIC]


def guess(file: Path, root: Path | None, receiver: str, meth: str, common: bool = False) -> tuple[Path, str] | None:
    """(file, 'Class.meth') the call `receiver.meth(...)` most likely runs, by the receiver's name, among the
    classes under `root` (`project_root`). A method name common to many classes (`log`, `update`) only when
    asked (`common`: a logging call whose logger class is wanted)."""
    if root is None or meth in COMMON and not common or meth.startswith("_") or not (ws := words(receiver)):
        return None
    for path, cls, names in definitions(root, meth):
        if path != file and any(w in n.lower() for w in ws for n in names):
            return path, f"{cls}.{meth}"
    return None
