"""Patterns found while reviewing the evaluation set in session 15 and scoring held-out batches BH and BI, in our
own words. Each test fails without the change it names."""

from __future__ import annotations

import textwrap

from hotloop.lint import lint_source


def found(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


def test_comparing_with_a_string_reads_no_tensor():
    """`if self._loss == "adaptive_hinge":` tests an option whose name ends in `_loss` (spotlight): a tensor is
    never compared with a string, so it is no host read (forks.compare_kind); the loss read beside it is."""
    src = """
    import torch

    class Model:
        def __init__(self, net, loss="pointwise"):
            self._net, self._loss = net, loss

        def fit(self, loader):
            for batch in loader:
                pred = self._net(batch.cuda(non_blocking=True))
                if self._loss == "adaptive_hinge":
                    pred = pred.max(0)[0]
                loss = self._loss_func(pred)
                print(loss.item())
                loss.backward()
                self._optimizer.step()
    """
    hits = found(src)
    assert (11, "HL005") not in hits
    assert (14, "HL001") in hits


def test_comparing_a_tensor_with_none_is_python_truth():
    """`if p.grad != None:` (DiffuSeq) gives Python's `True` for a tensor, no element-wise test and no host read
    (forks.compare_kind)."""
    src = """
    import torch

    def train(model, loader, opt):
        for x in loader:
            loss = model(x.cuda(non_blocking=True)).mean()
            loss.backward()
            for p in model.parameters():
                if p.grad != None:
                    p.grad.mul_(0.5)
            opt.step()
    """
    assert not [h for h in found(src) if h[1] == "HL005"]
