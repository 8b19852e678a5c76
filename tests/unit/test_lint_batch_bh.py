"""Patterns found while reviewing the evaluation set in session 15 and scoring held-out batches BH and BI, in our
own words. Each test fails without the change it names."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_source
from tests.unit.helpers import lint_project


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


def test_a_model_output_set_inside_a_with_block_is_on_the_device():
    """`with autocast(): out = self.model(batch)`, then `out["loss"].detach().to(self.rank)` (VoiceCraft): a
    module's outputs live on its device, and a `with` body always runs, so the `.to()` copies nothing
    (provenance.MODULE_CALL, syntax._last_binding). A host-made tensor's copy beside it is still found."""
    src = """
    import torch

    class Trainer:
        def train(self):
            for batch in self.loader:
                with torch.autocast("cuda"):
                    out = self.model(batch)
                loss = out["loss"].detach().to(self.rank)
                ones = torch.ones(4).to(self.rank)
                out["loss"].backward()
                self.optimizer.step()
    """
    hits = found(src)
    assert (9, "HL012") not in hits
    assert (10, "HL012") in hits


def test_zeroing_an_attack_perturbation_gradient_is_not_zero_grad():
    """`delta = torch.zeros_like(X).cuda()` ... `delta.grad.zero_()` (a PGD attack in Bag-of-Tricks-for-AT)
    zeroes an input perturbation's gradient, not a parameter's (syntax.made_here); `p.grad.zero_()` over the
    model's parameters is still HL013."""
    src = """
    import torch

    def train(model, loader, opt):
        for X, y in loader:
            X = X.cuda(non_blocking=True)
            delta = torch.zeros_like(X).cuda()
            delta.requires_grad = True
            for _ in range(10):
                model(X + delta).sum().backward()
                delta.grad.zero_()
            loss = model(X + delta).sum()
            loss.backward()
            opt.step()
            for p in model.parameters():
                p.grad.zero_()
    """
    hits = [h for h in found(src) if h[1] == "HL013"]
    assert hits == [(16, "HL013")]


def test_a_class_of_the_file_shadows_one_a_star_import_brought(tmp_path: Path):
    """`from utils import *` brings `utils.Batches`, but the file's own `class Batches` below it is what
    `Batches(...)` runs (Bag-of-Tricks-for-AT): the helper's loader options are not this call's
    (imports.Project._read_imports)."""
    files = {
        "utils.py": """
        import torch

        class Batches:
            def __init__(self, dataset, batch_size, num_workers=4):
                self.loader = torch.utils.data.DataLoader(dataset, batch_size, num_workers=num_workers)
        """,
    }
    script = """
    import torch
    from utils import *

    class Batches:
        def __init__(self, dataset, batch_size, num_workers=0):
            self.dataset = dataset

    def main(model, opt, train_set):
        batches = Batches(train_set, 128, num_workers=4)
        for epoch in range(10):
            for x in batches.dataset:
                model(x.cuda(non_blocking=True)).sum().backward()
                opt.step()
    """
    assert not [h for h in lint_project(tmp_path, files, script) if h[1] == "HL011"]


def test_a_caller_turning_gradients_off_with_set_grad_enabled_covers_its_evaluation():
    """`with torch.set_grad_enabled(False): self.eval_epoch(loader)` (PointRCNN's trainer): the evaluation
    function needs no `no_grad` of its own (structure._caller_has)."""
    src = """
    import torch

    class Trainer:
        def eval_epoch(self, loader):
            self.model.eval()
            for x in loader:
                self.model(x.cuda(non_blocking=True))

        def train(self, loader, test_loader):
            for epoch in range(10):
                for x in loader:
                    self.model(x.cuda(non_blocking=True)).sum().backward()
                    self.optimizer.step()
                with torch.set_grad_enabled(False):
                    self.eval_epoch(test_loader)
    """
    assert not [h for h in found(src) if h[1] == "HL018"]


def test_an_element_of_a_host_tensor_zipped_in_a_loop_is_read_without_a_sync():
    """`for idx, (seq, seqlen) in enumerate(zip(words, lengths)): seqlen.item()` with `lengths =
    torch.LongTensor(...)` built on the host (NCRFpp's batchify): no device read (provenance._loop_source);
    the same loop over a device tensor is still HL001."""
    src = """
    import torch

    def train(model, batches, opt):
        for words in batches:
            lengths = torch.LongTensor([len(w) for w in words])
            on_gpu = lengths.cuda(non_blocking=True)
            for idx, (seq, seqlen) in enumerate(zip(words, lengths)):
                n = seqlen.item()
            for idx, (seq, on_gpu_len) in enumerate(zip(words, on_gpu)):
                m = on_gpu_len.item()
            model(on_gpu).sum().backward()
            opt.step()
    """
    hits = [h for h in found(src) if h[1] == "HL001"]
    assert hits == [(11, "HL001")]


def test_a_tuple_of_numbers_returned_by_a_same_file_step_is_no_tensor():
    """`outputs = train(epoch)` with `return (loss.item(), acc.item(), lr, t)`, then `"{:.4f}".format(outputs[0])`
    (DropEdge): a tuple of Python numbers is a number's container, whichever function's kinds were worked out
    first (kinds.return_kind is not kept when it read a provisional info)."""
    src = """
    import time
    import torch

    def train(epoch, feats):
        t = time.time()
        optimizer.zero_grad()
        outputs = model(feats.cuda(non_blocking=True))
        loss = outputs.sum()
        loss.backward()
        optimizer.step()
        return (loss.item(), outputs.mean().item(), time.time() - t)

    for epoch in range(100):
        outputs = train(epoch, feats)
        print("loss {:.4f} acc {:.4f} t {:.2f}".format(outputs[0], outputs[1], outputs[2]))
    """
    hits = found(src)
    assert not [h for h in hits if h[1] == "HL002"]
    assert (12, "HL001") in hits


def test_reads_on_the_validation_side_of_a_phase_test_are_not_per_step():
    """`for split in splits:` running a train and a valid pass over one loop body, and `if split == 'valid':`
    reading the batch for its sentences (Sentence-VAE): only evaluation takes that side (gates._phase_branch).
    The same read under `if split == 'train':` runs every training step."""
    src = """
    import torch

    def fit(model, loaders, opt):
        for epoch in range(10):
            for split in ("train", "valid"):
                for batch in loaders[split]:
                    loss = model(batch.cuda(non_blocking=True)).sum()
                    if split == "train":
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
                        a = loss.item()
                    if split == "valid":
                        b = loss.item()
                    if split != "train":
                        c = loss.item()
    """
    hits = [h for h in found(src) if h[1] == "HL001"]
    assert hits == [(13, "HL001")]


def test_a_loader_handed_once_to_an_evaluation_is_one_pass():
    """`test_loader` given to `utils.validate(...)` once, after the epochs (TLlib's DANN): one pass, so its
    workers are forked once and `persistent_workers` is not asked for (loaders.ONE_PASS); a loader handed to an
    unknown `trainer.fit(...)` may still run epochs."""
    src = """
    import torch
    from torch.utils.data import DataLoader
    import utils

    def main(model, test_set, train_set, trainer):
        test_loader = DataLoader(test_set, batch_size=64, num_workers=4, pin_memory=True)
        train_loader = DataLoader(train_set, batch_size=64, num_workers=4, pin_memory=True)
        trainer.fit(model.cuda(), train_loader)
        acc = utils.validate(test_loader, model)
    """
    hits = [h for h in found(src) if h[1] == "HL011"]
    assert hits == [(8, "HL011")]
