"""Which calls construct a DataLoader, and with which keywords: a project class derived from `DataLoader` (its
`__init__` handing options to `super().__init__`), a library's `*DataLoader`, or the file's own class of that name
that only wraps one. Split out of `loaders.py`, which judges the options."""

from __future__ import annotations

import ast

from hotloop.lint.analysis import ModuleInfo, call_name, dotted
from hotloop.lint.imports import Project, find_def, load_module
from hotloop.lint.syntax import param_defaults


def loader_class(mi: ModuleInfo, c: ast.Call) -> bool:
    """`AudioDataLoader(...)` constructs a project class derived from `DataLoader` (Speech-Transformer,
    Conv-TasNet, pretrain-gnns): its keywords are DataLoader's. So does a library's `*DataLoader` given
    `num_workers` (torchmeta's `BatchMetaDataLoader`, a DataLoader subclass)."""
    name = call_name(c).rpartition(".")[2]
    library = (
        name.endswith("DataLoader")
        and any(k.arg == "num_workers" for k in c.keywords)
        and not any(isinstance(n, ast.ClassDef) and n.name == name for n in mi.tree.body)
    )  # (not the file's own class)
    return library or loader_class_def(mi, c) is not None


def through_super(cls: ast.ClassDef, c: ast.Call) -> dict[str, ast.expr] | None:
    """The keywords the class's `__init__` hands to `super().__init__(...)`, its own parameters replaced by what
    the call passes or else their defaults; None when there is no such call (the class takes DataLoader's own)."""
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    sup = [n for n in ast.walk(init) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
           and n.func.attr == "__init__" and isinstance(n.func.value, ast.Call)] if init else []  # fmt: skip
    if not sup or any(k.arg is None for n in sup for k in n.keywords):
        return None
    params = [a.arg for a in init.args.args[1:]]  # type: ignore[union-attr]
    given = {**dict(zip(params, c.args, strict=False)), **{k.arg: k.value for k in c.keywords if k.arg}}
    defaults = param_defaults(init)  # type: ignore[arg-type]
    out = {}
    for k in sup[0].keywords:  # (with several calls, as SSRNDataLoader's per-mode ones, the first)
        v = k.value
        if isinstance(v, ast.Name) and v.id in params:
            v = given.get(v.id, defaults.get(v.id))  # type: ignore[assignment]
        if v is not None:
            out[k.arg] = v  # type: ignore[index]
    return out


def own_loader(mi: ModuleInfo, c: ast.Call) -> bool:
    """`DataLoader(...)` constructs the file's own class of that name, not derived from PyTorch's (conv-tasnet's
    chunk-level `class DataLoader(object)`, which builds a torch loader inside, judged there)."""
    local = next((n for n in mi.tree.body if isinstance(n, ast.ClassDef) and n.name == call_name(c)), None)
    return local is not None and not any(dotted(b).endswith("DataLoader") for b in local.bases)


def loader_class_def(mi: ModuleInfo, c: ast.Call) -> ast.ClassDef | None:
    """The project class derived from `DataLoader` that `c` constructs, if it is one."""
    name = call_name(c)
    local = find_def(mi.tree, name, ()) if "." not in name else None
    if isinstance(local, ast.ClassDef):
        cls = local
    else:
        target = Project.of(mi)._class_of(c)
        other = load_module(target[0], target[0].stat().st_mtime) if target is not None else None
        cls = next((n for n in other.tree.body if isinstance(n, ast.ClassDef) and n.name == target[1]), None) \
            if other is not None else None  # type: ignore[index]  # fmt: skip
    return cls if cls is not None and any(dotted(b).rpartition(".")[2] == "DataLoader" for b in cls.bases) else None


def as_dict(e: ast.expr) -> ast.expr:
    """`dict(batch_size=b, num_workers=n)` as the literal `{"batch_size": b, "num_workers": n}` (Pytorch-UNet's
    `loader_args`); anything else as it is."""
    if isinstance(e, ast.Call) and call_name(e) == "dict" and not e.args and all(k.arg for k in e.keywords):
        return ast.Dict(keys=[ast.Constant(k.arg) for k in e.keywords], values=[k.value for k in e.keywords])
    return e
