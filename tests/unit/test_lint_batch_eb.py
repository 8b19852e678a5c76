"""Patterns found while scoring the whole labelled set and held-out batches EB and EC (session 22), in our own
words. Each test that asks for a finding fails without the change it names; each one that asks for silence
guards that change against the false alarm it could raise."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_paths, lint_source


def found(src: str, path: str = "<string>") -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src), path)]


def _files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


YOLO = {
    "nets/__init__.py": "",
    "nets/yolo_training.py": """
        import torch.nn as nn

        class YOLOLoss(nn.Module):
            def forward(self, l, pred, targets):
                obj_mask = targets > 0
                n = obj_mask.sum()
                if n != 0:
                    return pred[obj_mask].mean()
                return pred.sum() * 0
    """,
    "utils/__init__.py": "",
    "utils/utils.py": """
        def get_lr(optimizer):
            return optimizer.param_groups[0]["lr"]
    """,
    "utils/utils_fit.py": """
        from utils.utils import get_lr

        def fit_one_epoch(model_train, yolo_loss, optimizer, gen):
            for iteration, (images, targets) in enumerate(gen):
                optimizer.zero_grad()
                outputs = model_train(images)
                loss = yolo_loss(0, outputs, targets)
                loss.backward()
                optimizer.step()
    """,
    "train.py": """
        import torch
        from nets.yolo_training import YOLOLoss
        from utils.utils_fit import fit_one_epoch

        if __name__ == "__main__":
            model = torch.nn.Linear(4, 4).cuda()
            yolo_loss = YOLOLoss()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                fit_one_epoch(model, yolo_loss, optimizer, [])
    """,
}


def test_a_project_without_a_root_marker_is_rooted_where_its_imports_resolve(tmp_path):
    """The bubbliiiing YOLO layout copied without its README or `.git`: `utils/utils_fit.py` takes `yolo_loss`
    as a parameter, and only `train.py` one folder up says it is a `YOLOLoss`. With no marker the project used
    to be `utils/` alone, so the caller was never read; `from utils.utils import get_lr` runs with the folder
    above `utils/` on `sys.path`, which is the project (classes._unmarked_root)."""
    _files(tmp_path, YOLO)
    codes = {(f.line, f.code) for f in lint_paths([tmp_path / "utils" / "utils_fit.py"])}
    assert {(8, "HL005"), (8, "HL006")} <= codes


def test_an_unmarked_file_importing_only_libraries_keeps_its_own_folder(tmp_path):
    """A lone script in a folder importing only `torch` and `os` is its own project: the folder above it (with
    an unrelated `train.py` calling a function of the same name) is not read for callers."""
    files = dict(YOLO)
    files["utils/utils_fit.py"] = files["utils/utils_fit.py"].replace("from utils.utils import get_lr", "import os")
    _files(tmp_path, files)
    codes = {f.code for f in lint_paths([tmp_path / "utils" / "utils_fit.py"])}
    assert "HL005" not in codes and "HL006" not in codes


def test_an_element_of_a_loss_narrowed_by_typing_tuple_is_still_a_tensor():
    """flair's trainer: `if isinstance(loss, Tuple): loss = loss[0]` (typing's `Tuple`), then `loss.item()` every
    micro-batch. `Tuple` narrowed `loss` to a Python value, so `.item()` looked like a read of a number
    (forks.CONTAINERS matched only lower-case `tuple`)."""
    src = """
    from typing import Tuple
    import torch

    def train(model, optimizer, loader):
        model.cuda()
        train_loss = 0.0
        for batch in loader:
            loss = model.forward_loss(batch)
            if isinstance(loss, Tuple):
                loss = loss[0]
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
    """
    assert (13, "HL001") in found(src)
    assert (13, "HL001") in found(src.replace("Tuple)", "tuple)"))
