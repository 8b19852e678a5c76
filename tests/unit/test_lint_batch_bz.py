"""Patterns found while scoring held-out batches BZ and CA (session 17), in our own words. Each test fails without
the change it names."""

from __future__ import annotations

import textwrap

from hotloop.lint import lint_source


def found(src: str, path: str = "<string>") -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src), path)]


def test_a_log_period_copied_out_of_a_flag_that_defaults_to_one_is_every_step():
    """`log_step = args.log_step` with `--log_step` defaulting to 1, then `if (step + 1) % log_step == 0:`
    (GPT2-Chinese): the gate opens every step by default, so its `.item()` is a per-step read
    (gates._one_by_default follows the local name to the flag). With a default of 100 it is a log gate."""
    src = """
    import argparse
    import torch

    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument('--log_step', default=1, type=int)
        args = parser.parse_args()
        log_step = args.log_step
        for step, (x, y) in enumerate(loader):
            loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (step + 1) % log_step == 0:
                print(loss.item())
    """
    assert (16, "HL001") in found(src)
    assert (16, "HL001") not in found(src.replace("default=1,", "default=100,"))


def test_clipping_inside_apex_scale_loss_clips_scaled_gradients():
    """`with amp.scale_loss(loss, optimizer) as scaled: scaled.backward(); clip_grad_norm_(...)` (GPT2-Chinese's
    `--fp16`): apex unscales when the block exits, so the clip inside sees scaled gradients (HL017). Clipping
    after the block is the fix and is not reported."""
    src = """
    import torch
    from apex import amp

    def train(model, loader, optimizer):
        for x, y in loader:
            loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
                torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    """
    assert (10, "HL017") in found(src)
    after = src.replace("                torch.nn.utils.clip_grad_norm_", "            torch.nn.utils.clip_grad_norm_")
    assert not any(code == "HL017" for _, code in found(after))


def test_a_loss_rebound_to_its_data0_is_a_python_number():
    """`loss = loss.data[0]` (PyTorch 0.3's `.item()`, awni/speech): the read is HL001 once; showing `loss`
    in a progress bar two lines later formats a number, not a tensor (no HL002)."""
    src = """
    import torch

    def run_epoch(model, optimizer, loader, tq):
        for batch in loader:
            optimizer.zero_grad()
            loss = model.loss(batch.cuda(non_blocking=True))
            loss.backward()
            loss = loss.data[0]
            optimizer.step()
            tq.set_postfix(loss=loss)
    """
    hits = found(src)
    assert (9, "HL001") in hits
    assert (11, "HL002") not in hits


def test_running_totals_in_a_while_step_loop_and_terms_returned_beside_the_loss():
    """KGIN: `while s + batch_size <= n:` is the step loop, `batch_loss, _, _, batch_cor = model(batch)` and
    `loss += batch_loss; cor_loss += batch_cor`. A `while` loop was never checked for running totals (it took
    the branch checks' path); `batch_cor`, returned beside the stepped loss and summed into a `*_loss` total,
    holds the graph too (HL019 twice)."""
    src = """
    import torch

    def main(model, optimizer, data, batch_size):
        for epoch in range(10):
            loss, s, cor_loss = 0, 0, 0
            while s + batch_size <= len(data):
                batch_loss, _, _, batch_cor = model(data[s:s + batch_size])
                optimizer.zero_grad()
                batch_loss.backward()
                optimizer.step()
                loss += batch_loss
                cor_loss += batch_cor
                s += batch_size
            print(loss.item(), cor_loss.item())
    """
    hits = found(src)
    assert (12, "HL019") in hits and (13, "HL019") in hits
    assert (14, "HL019") not in hits  # the offset is a number


def test_loader_workers_copied_from_the_callers_args_whose_flag_defaults_to_zero(tmp_path):
    """`num_workers = cfg.num_workers` in the project's loader builder, `cfg` the script's `args` with
    `--num_workers` defaulting to 0 (e3_diffusion): no workers, so no HL011 at the call; with a default of 4
    the loader is unpinned and re-forked every epoch."""
    helper = """
        from torch.utils.data import DataLoader

        def retrieve_dataloaders(cfg):
            num_workers = cfg.num_workers
            return {s: DataLoader(d, batch_size=cfg.batch_size, num_workers=num_workers) for s, d in DATA.items()}
    """
    script = """
    import argparse
    import torch
    import data

    parser = argparse.ArgumentParser()
    parser.add_argument('--num_workers', type=int, default=0)
    args = parser.parse_args()
    loaders = data.retrieve_dataloaders(args)
    model = Net().cuda()
    for epoch in range(10):
        for x, y in loaders['train']:
            loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
    """
    hits = {}
    for default in (0, 4):  # (one project folder each: lint caches what a helper file builds)
        (tmp_path / str(default)).mkdir()
        (tmp_path / str(default) / "data.py").write_text(textwrap.dedent(helper))
        path = tmp_path / str(default) / "train.py"
        path.write_text(textwrap.dedent(script.replace("default=0)", f"default={default})")))
        hits[default] = found(path.read_text(), str(path))
    assert (9, "HL011") not in hits[0]
    assert (9, "HL011") in hits[4]
