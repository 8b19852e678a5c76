"""A name an `if`/`else` binds to a tensor on one side and a Python number on the other.

    if hparams.syncnet_wt > 0.:
        sync_loss = get_sync_loss(mel, g)      # a tensor
    else:
        sync_loss = 0.                         # a float
    ...
    if hparams.syncnet_wt > 0.:
        running_sync_loss += sync_loss.item()  # the tensor side: a host read every step

The kind model's rule "the assignment just above the use decides" saw the `else` (the later line) and took
`sync_loss` for a float (Wav2Lip, batch Z). Under the same test again, the branch's own kind holds; anywhere
else the name is a tensor on one path, and a read there may sync.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from hotloop.lint.syntax import target_names


def _kind_at(info: Any, name: str, line: int, tensor_name: re.Pattern[str]) -> str | None:
    """The kind assigned at `line`; an unknown one for a loss-like name (`perceptual_forward(g)`) a tensor."""
    kind = next((k for at, k in info.history.get(name, ()) if at == line), None)
    return kind if kind is not None else ("tensor" if tensor_name.search(name) else None)


def branch_kind(
    model: Any, e: ast.Name, info: Any, first: int, second: int, tensor_name: re.Pattern[str]
) -> str | None:
    """The kind of `e` when its two latest assignments (lines `first`, `second`) are the two sides of one `if`;
    None when they are not (the caller's rule applies)."""
    made = {}
    for n in model.walk_local(info.node):
        if (
            isinstance(n, ast.Assign)
            and n.lineno in (first, second)
            and any(e.id in target_names(t) for t in n.targets)
        ):
            made[n.lineno] = n
    a, b = made.get(first), made.get(second)
    fork = model.parent.get(a) if a is not None else None
    if not (isinstance(fork, ast.If) and b is not None and model.parent.get(b) is fork):
        return None
    kinds = {id(x): _kind_at(info, e.id, line, tensor_name) for x, line in ((a, first), (b, second))}
    test = ast.unparse(fork.test)
    child, n = e, model.parent.get(e)
    while n is not None and n is not info.node:
        if isinstance(n, ast.If) and child is not n.test and ast.unparse(n.test) == test:
            side = fork.body if child in n.body else fork.orelse
            return next((kinds[id(x)] for x in (a, b) if x in side), None)
        child, n = n, model.parent.get(n)
    return "tensor"
