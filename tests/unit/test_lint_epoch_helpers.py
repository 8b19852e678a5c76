"""Epoch functions and loaders built once inside the epoch loop (held-out batch AA's detector trainer, in our
own words): `fit_one_epoch(model, yolo_loss, optimizer, ...)` is handed the loss *module* and the optimizer but
runs a whole epoch, so its caller's loop is an epoch loop (not a step); its training loop's `.item()` is per
step while its validation loop's is not; what it saves after its loop to a fixed name is overwritten every
epoch; a loader rebuilt once at the unfreeze epoch (guarded by a flag the branch sets) is iterated for every
epoch after, while one built under `step % 500 == 0` or `epoch > 0` is built again and again."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_source
from hotloop.lint.callers import linting

FIT = """
import os
import torch

def fit_one_epoch(model, yolo_loss, optimizer, epoch, gen, gen_val, save_dir):
    loss = 0
    model.train()
    for iteration, (images, targets) in enumerate(gen):
        images = images.cuda(non_blocking=True)
        optimizer.zero_grad()
        loss_value = yolo_loss(model(images), targets)
        loss_value.backward()
        optimizer.step()
        loss += loss_value.item()
    val_loss = 0
    model.eval()
    for iteration, (images, targets) in enumerate(gen_val):
        with torch.no_grad():
            loss_value = yolo_loss(model(images.cuda(non_blocking=True)), targets)
        val_loss += loss_value.item()
    if (epoch + 1) % 10 == 0:
        torch.save(model.state_dict(), os.path.join(save_dir, "ep%03d.pth" % (epoch + 1)))
    torch.save(model.state_dict(), os.path.join(save_dir, "last_epoch_weights.pth"))
"""

TRAIN = """
import torch
from torch.utils.data import DataLoader
from fit import fit_one_epoch

def main(model, train_set, val_set, optimizer, yolo_loss, epochs, freeze_epoch, save_dir):
    model.cuda()
    gen = DataLoader(train_set, batch_size=8, num_workers=4, pin_memory=True, persistent_workers=True)
    gen_val = DataLoader(val_set, batch_size=8, num_workers=4, pin_memory=True, persistent_workers=True)
    unfrozen = False
    for epoch in range(epochs):
        if epoch >= freeze_epoch and not unfrozen:
            gen = DataLoader(train_set, batch_size=4, num_workers=4, pin_memory=True)
            unfrozen = True
        if epoch == freeze_epoch + 10:
            gen_val = DataLoader(val_set, batch_size=4, num_workers=4, pin_memory=True)
        if epoch > 0:
            gen_val = DataLoader(val_set, batch_size=4, num_workers=4, pin_memory=True)
        fit_one_epoch(model, yolo_loss, optimizer, epoch, gen, gen_val, save_dir)
"""


def _at(src: str, text: str) -> int:
    return next(i + 1 for i, t in enumerate(textwrap.dedent(src).splitlines()) if text in t)


def test_an_epoch_function_reports_its_step_reads_and_its_per_epoch_fixed_name_save():
    found = {(f.line, f.code) for f in lint_source(textwrap.dedent(FIT))}
    assert found == {(_at(FIT, "loss += loss_value.item()"), "HL001"), (_at(FIT, '"last_epoch_weights'), "HL021")}


def test_a_call_handing_the_loss_module_to_an_epoch_function_is_no_step(tmp_path: Path):
    (tmp_path / "fit.py").write_text(textwrap.dedent(FIT))
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAIN))
    found = {(f.line, f.code): f.message for f in lint_source(script.read_text(), str(script))}
    call = _at(TRAIN, "fit_one_epoch(model")
    # once per epoch: the validation loop's read is not reported as a per-step read at the call ...
    assert (call, "HL001") not in found
    # ... while the fixed-name save it makes every epoch is, naming the line inside
    assert "fit.py:" in found[(call, "HL021")]
    # the loader rebuilt once at the unfreeze epoch, and the one built at one epoch, are re-iterated after
    assert (_at(TRAIN, "gen = DataLoader(train_set, batch_size=4"), "HL011") in found
    rebuilt = [line for line, code in found if code == "HL011"]
    assert _at(TRAIN, "if epoch == freeze_epoch") + 1 in rebuilt
    # built every epoch (`epoch > 0`): persistent workers would not outlive it
    assert _at(TRAIN, "if epoch > 0") + 1 not in rebuilt
    assert len(rebuilt) == 2
    # linted together with fit.py, the helper's own lint reports the per-step read and the save, once, inside it
    fit = tmp_path / "fit.py"
    with linting([script, fit]):
        both = {(f.line, f.code) for f in lint_source(script.read_text(), str(script))}
        both |= {(-f.line, f.code) for f in lint_source(fit.read_text(), str(fit))}  # (fit.py's lines negative)
    assert both == {(line, "HL011") for line in rebuilt} | {
        (-_at(FIT, "loss += loss_value.item()"), "HL001"),
        (-_at(FIT, '"last_epoch_weights'), "HL021"),
    }


def test_a_save_given_the_optimizer_and_the_loss_is_no_step():
    """Batch AB's retrieval trainer: `save_model(epoch, args, model, optimizer, tr_loss)` in the epoch loop
    hands over a loss and the optimizer, but saves them; the epoch loop stays an epoch loop, so the
    evaluation after it and the `empty_cache()` at the top of the epoch function are not per step. A helper
    given both that does step (`train_batch(loss, optimizer)`) still makes its loop hot."""
    src = """
import torch

def save_model(epoch, args, model, optimizer, tr_loss):
    torch.save({"model": model.state_dict(), "opt": optimizer.state_dict()}, f"{args.out}/model_{epoch}.bin")

def train_epoch(model, loader, optimizer):
    torch.cuda.empty_cache()
    for batch in loader:
        loss = model(batch.cuda(non_blocking=True))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

def main(args, model, loader, test_loader, optimizer):
    for epoch in range(args.epochs):
        train_epoch(model, loader, optimizer)
        tr_loss = 0.0
        save_model(epoch, args, model, optimizer, tr_loss)
        model.eval()
        with torch.no_grad():
            for x in test_loader:
                print(model(x.cuda()).cpu().numpy())

def fit(model, xs, optimizer, step_fn):
    for x in xs:
        loss = model(x)
        step_fn(loss, optimizer)
        print(loss.item())
"""
    found = sorted((f.line, f.code) for f in lint_source(textwrap.dedent(src)))
    assert found == [(_at(src, "print(loss.item())"), "HL001")]


def test_loaders_handed_on_by_keyword_or_returned_in_a_tuple():
    """A loader given by keyword to a trainer (BERT-pytorch), or returned by a builder in a tuple and iterated
    every epoch by the caller (3D-ResNets), is re-iterated. Not when the builder runs inside the epoch loop
    (rebuilt each time), when the tuple holds `iter(loader)` over an infinite sampler (VAR), or when the
    caller only hands it to an unknown consumer once (an inference run)."""
    src = """
import torch
from torch.utils.data import DataLoader

def get_train_utils(opt, ds):
    train_loader = DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True)
    return train_loader, None

def get_infinite(opt, ds):
    ld = DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True)
    ld = iter(ld)
    return 10, ld

def get_inference_utils(opt, ds):
    inference_loader = DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True)
    return inference_loader, ds.names

def get_rebuilt(opt, ds):
    rebuilt = DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True)
    return rebuilt, None

def main(opt, ds, model, opt_, Trainer, inference):
    model.cuda()
    keyword = DataLoader(ds, batch_size=8, num_workers=4, pin_memory=True)
    trainer = Trainer(model, train_dataloader=keyword)
    loader, sampler = get_train_utils(opt, ds)
    n, it = get_infinite(opt, ds)
    inf_loader, names = get_inference_utils(opt, ds)
    inference.run(inf_loader, model)
    for epoch in range(opt.epochs):
        r, _ = get_rebuilt(opt, ds)
        for x in r:
            pass
        for x in loader:
            loss = model(x.cuda(non_blocking=True)).mean()
            loss.backward()
            opt_.step()
        for i in range(n):
            x = next(it)
"""
    lines = textwrap.dedent(src).splitlines()
    found = sorted(f.line for f in lint_source(textwrap.dedent(src)) if f.code == "HL011")
    expect = [
        next(i + 1 for i, t in enumerate(lines) if t.strip().startswith(s)) for s in ("train_loader =", "keyword =")
    ]
    assert found == sorted(expect)


def test_an_epoch_function_called_through_functools_partial(tmp_path: Path):
    """world-models (AE): `train = partial(data_pass, train=True)` at module level, `train(e)` in the epoch loop:
    the loop is a training loop, so the fixed-name save a project helper makes there every epoch is reported;
    the step read inside `data_pass` is reported there."""
    (tmp_path / "misc.py").write_text("import torch\n\ndef save_checkpoint(state, filename):\n"
                                      "    torch.save(state, filename)\n")  # fmt: skip
    src = """
import torch
from functools import partial
from misc import save_checkpoint

def data_pass(epoch, train, model, loader, optimizer):
    for x in loader:
        loss = model(x.cuda(non_blocking=True)).mean()
        if train:
            loss.backward()
            optimizer.step()
        print(loss.item())

train = partial(data_pass, train=True)

for e in range(10):
    train(e, model=None, loader=[], optimizer=None)
    save_checkpoint({"e": e}, "checkpoint.tar")
"""
    script = tmp_path / "trainmdrnn.py"
    script.write_text(src)
    found = {(f.line, f.code) for f in lint_source(src, str(script))}
    assert (_at(src, "save_checkpoint({"), "HL021") in found
    assert (_at(src, "print(loss.item())"), "HL001") in found
