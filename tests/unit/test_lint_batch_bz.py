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


def test_to_cpu_is_a_host_copy_like_cpu():
    """`vb_decoder.decode(crf_scores.to("cpu"), lengths.to("cpu"))` every step (sgrvinod's sequence labelling):
    `.to("cpu")` is `.cpu()` spelled differently (HL007; the transfer check used to skip it as no upload); with
    `non_blocking=True` the copy does not wait and is not reported."""
    src = """
    import torch

    def train(model, loader, optimizer, decoder):
        for x, y in loader:
            scores = model(x.cuda(non_blocking=True))
            loss = scores.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            decoded = decoder.decode(scores.to("cpu"))
    """
    assert (11, "HL007") in found(src)
    assert (11, "HL007") not in found(src.replace('.to("cpu")', '.to("cpu", non_blocking=True)'))


def test_a_loader_iterated_by_a_nested_epoch_function_is_re_forked():
    """`trainloader = DataLoader(..., num_workers=args.workers, pin_memory=True)` and `def training(epoch):`
    nested in the same function, iterating it, called in the epoch loop (PyTorch-Encoding's train_dist.py):
    the closure re-iterates the loader every epoch, so `persistent_workers` is missing (HL011)."""
    src = """
    import torch
    from torch.utils.data import DataLoader

    def main_worker(args, model, optimizer, trainset):
        trainloader = DataLoader(trainset, batch_size=8, num_workers=args.workers, pin_memory=True)

        def training(epoch):
            for i, (image, target) in enumerate(trainloader):
                loss = model(image.cuda(non_blocking=True), target.cuda(non_blocking=True))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        for epoch in range(args.epochs):
            training(epoch)
    """
    assert (6, "HL011") in found(src)
    assert (6, "HL011") not in found(
        src.replace("    for epoch in range(args.epochs):\n            training(epoch)", "    training(0)")
    )


def test_a_running_total_of_a_scaled_loss_keeps_the_graphs():
    """`trans_loss += kg_batch_loss / len(kgloader)` (KGCL): the added term is the stepped loss divided by a
    number, still a graph-holding tensor (HL019); `+= kg_batch_loss.item() / n` is a number."""
    src = """
    import torch

    def train_kg(model, kgloader, opt):
        trans_loss = 0.
        for data in kgloader:
            kg_batch_loss = model(data[0].cuda(non_blocking=True))
            trans_loss += kg_batch_loss / len(kgloader)
            opt.zero_grad()
            kg_batch_loss.backward()
            opt.step()
        return trans_loss.cpu().item()
    """
    assert (8, "HL019") in found(src)
    assert (8, "HL019") not in found(src.replace("+= kg_batch_loss /", "+= kg_batch_loss.item() /"))


def test_a_function_passed_as_an_argument_runs_where_the_parameter_is_called():
    """`train(..., eval_score=accuracy)` and `scores.update(eval_score(output, target), n)` in the step loop
    (drn's segment.py): the callers pass the same-file `accuracy`, so its boolean-mask index runs every step
    (calls._chosen reads what the callers and the default give the parameter)."""
    src = """
    import torch

    def accuracy(output, target):
        correct = output.argmax(1).eq(target)
        correct = correct[target != 255]
        return correct.float().mean()

    def train(loader, model, criterion, optimizer, eval_score=None):
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            output = model(x)
            loss = criterion(output, y)
            if eval_score is not None:
                score = eval_score(output, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    def main(loader, model, criterion, optimizer):
        for epoch in range(10):
            train(loader, model, criterion, optimizer, eval_score=accuracy)
    """
    assert (6, "HL006") in found(src)
    assert (6, "HL006") not in found(src.replace("eval_score=accuracy)", "eval_score=None)"))


def test_host_made_tensors_are_copied_even_where_a_prepared_loader_yields_device_batches():
    """With `accelerator.prepare(...)` in the file, `.to(accelerator.device)` of a batch copies nothing (skipped);
    `torch.tensor([...])` made in the step and token ids from `tokenizer(..., return_tensors="pt")` are host
    tensors all the same, copied blocking every step (T2I-Adapter's `compute_embeddings`)."""
    src = """
    import torch

    def main(accelerator, unet, loader, optimizer, tokenizer, text_encoder):
        unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
        for step, batch in enumerate(loader):
            pixels = batch["jpg"].to(accelerator.device)
            ids = tokenizer(batch["txt"], padding="max_length", return_tensors="pt").input_ids
            emb = text_encoder(ids.to(accelerator.device))
            time_ids = torch.tensor([[512, 512, 0, 0]])
            time_ids = time_ids.repeat(len(batch["txt"]), 1)
            time_ids = time_ids.to(accelerator.device, dtype=emb.dtype)
            loss = unet(pixels, emb, time_ids).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    """
    hits = found(src)
    assert (7, "HL012") not in hits  # the prepared loader's batch is already on the device
    assert (9, "HL012") in hits and (12, "HL012") in hits


def test_casting_a_device_tensor_to_a_cpu_tensor_type_is_a_host_copy():
    """`torch.mean((pred == label).type(torch.FloatTensor))` (FewRel's accuracy): `torch.FloatTensor` is a CPU
    type, so `.type()` copies the device comparison to the host every step (HL007). A CUDA type, or a host
    tensor cast to a CPU type, copies nothing to the host."""
    src = """
    import torch

    def train(model, loader, optimizer):
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            logits = model(x)
            loss = logits.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            acc = torch.mean((logits.argmax(1) == y).type(torch.FloatTensor))
            z = x.type(torch.cuda.FloatTensor)
            w = torch.randn(3).type(torch.FloatTensor)
    """
    hits = found(src)
    assert (12, "HL007") in hits
    assert not any(line in (13, 14) for line, _ in hits)


def test_a_backward_stepped_at_once_is_not_accumulated():
    """FewRel: the encoder accumulates (`if it % grad_iter == 0: optimizer.step()`), but the adversary's
    `loss_dis.backward(); optimizer_dis.step()` steps at once in the same block: nothing to divide (no HL016
    there); the encoder's own undivided backward still is one."""
    src = """
    import torch

    def train(model, disc, loader, optimizer, optimizer_dis, grad_iter):
        for it, (x, y) in enumerate(loader):
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            loss = model(x, y)
            loss.backward()
            if it % grad_iter == 0:
                optimizer.step()
                optimizer.zero_grad()
            loss_dis = disc(model.encode(x).detach())
            loss_dis.backward()
            optimizer_dis.step()
            optimizer_dis.zero_grad()
    """
    hits = found(src)
    assert (8, "HL016") in hits
    assert (13, "HL016") not in hits


def test_an_epoch_function_given_the_optimizer_and_a_loss_is_no_step():
    """`torch_single_train(model, opt, criterion, loader, meta_loss)` in the epoch loop (flow-forecast): a
    same-file function looping over the data itself, so the epoch loop is not a step loop and the validation
    called beside it reads its results once per epoch (no HL007 there)."""
    src = """
    import torch

    def torch_single_train(model, opt, criterion, loader, meta_loss=None):
        for x, y in loader:
            loss = criterion(model(x.cuda(non_blocking=True)), y.cuda(non_blocking=True))
            opt.zero_grad()
            loss.backward()
            opt.step()

    def compute_validation(model, loader):
        outs = [model(x.cuda(non_blocking=True)) for x, _ in loader]
        return torch.cat(outs).cpu()

    def train(model, opt, criterion, loader, val_loader, meta_loss):
        for epoch in range(10):
            torch_single_train(model, opt, criterion, loader, meta_loss)
            compute_validation(model, val_loader)
    """
    assert (13, "HL007") not in found(src)


def test_truth_testing_an_option_that_defaults_to_none_reads_no_tensor():
    """`def torch_single_train(..., meta_loss=None)` then `if meta_loss:` (flow-forecast): the test asks whether
    the option (a criterion module) was given; its name says loss, but it is no tensor read (no HL005)."""
    src = """
    import torch

    def torch_single_train(model, opt, criterion, loader, meta_loss=None):
        for x, y in loader:
            out = model(x.cuda(non_blocking=True))
            loss = criterion(out, y.cuda(non_blocking=True))
            if meta_loss:
                loss = loss + meta_loss(out, y.cuda(non_blocking=True))
            opt.zero_grad()
            loss.backward()
            opt.step()

    def train(model, opt, criterion, loader, params):
        meta_loss = make_criterion(params)
        for epoch in range(10):
            torch_single_train(model, opt, criterion, loader, meta_loss)
    """
    assert (8, "HL005") not in found(src)


def test_a_deepspeed_style_engine_step_makes_the_loop_a_step_loop():
    """cramming's `loss = model_engine.step(device_batch)` (DeepSpeed's `model_engine.step()` is the optimizer
    step): the loop is a training loop, so `if not loss.detach().isfinite():` reads the loss every step
    (HL005), and the troubleshooting helper it calls on a bad step is not hot (a method `.isfinite()` is an
    anomaly test like `torch.isfinite`)."""
    src = """
    import torch

    def troubleshoot(model_engine):
        bad = torch.stack([torch.isfinite(p.grad).all() for p in model_engine.model.parameters()]).all()
        if not bad:
            print("non-finite gradients")

    def train(model_engine, loader):
        for step, batch in enumerate(loader):
            loss = model_engine.step(batch.cuda(non_blocking=True))
            if not loss.detach().isfinite():
                troubleshoot(model_engine)
    """
    hits = found(src)
    assert (12, "HL005") in hits
    assert (6, "HL005") not in hits


def test_a_format_string_kept_in_a_name_formats_its_tensors():
    """`message = '{:d} {:.3f}\\n'` then `file.write(message.format(step, loss))` every step (KPConv's training
    log): `.format` of a string held in a name formats the loss tensor like a literal's would (HL002)."""
    src = """
    import torch

    def train(net, loader, optimizer, log):
        for step, batch in enumerate(loader):
            loss = net(batch.cuda(non_blocking=True)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            message = '{:d} {:.3f}'
            log.write(message.format(step, loss))
    """
    assert (11, "HL002") in found(src)


def test_a_flag_named_for_a_loss_is_not_a_tensor():
    """`if self.symmetry.use_mirror_loss:` (rsl_rl's PPO update): `use_*`, `is_*`, `with_*` names are options,
    whatever loss they name, so testing one reads no tensor (no HL005); `if self.mirror_loss:` still might."""
    src = """
    import torch

    class PPO:
        def update(self, batches):
            for obs, actions in batches:
                loss = self.policy(obs.cuda(non_blocking=True), actions.cuda(non_blocking=True))
                if self.symmetry.use_mirror_loss:
                    loss = loss + self.mirror(obs)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
    """
    assert (8, "HL005") not in found(src)
    assert (8, "HL005") in found(src.replace("self.symmetry.use_mirror_loss", "self.symmetry.mirror_loss"))


def test_a_name_backpropagated_is_a_tensor_whatever_its_value_looked_like():
    """compound-word-transformer: `losses = net.train_step(...)` (a tuple the type model cannot see into), then
    `loss = (losses[0] + losses[1]) / 2` and `loss.backward()`: the value `.backward()` is called on is a
    tensor, so `acc_loss += loss.item()` reads the device every step (HL001) and formatting it is HL002."""
    src = """
    import sys
    import torch

    def train(net, loader, optimizer):
        acc_loss = 0
        for batch_x, batch_y in loader:
            losses = net.train_step(batch_x.cuda(non_blocking=True), batch_y.cuda(non_blocking=True))
            loss = (losses[0] + losses[1]) / 2
            net.zero_grad()
            loss.backward()
            optimizer.step()
            sys.stdout.write('Loss: {:06f}'.format(loss))
            acc_loss += loss.item()
    """
    hits = found(src)
    assert (13, "HL002") in hits and (14, "HL001") in hits


def test_tolist_of_a_numpy_array_copies_nothing_from_the_device():
    """`x = np.array(x, dtype=np.float64).tolist()` inside a helper called every update (pytorch-DRL's
    `to_tensor_var`): a NumPy array on the host, so `.tolist()` is no device read (no HL007); `.tolist()` of the
    model's output still is."""
    src = """
    import numpy as np
    import torch

    def train(model, memory, optimizer):
        for step in range(1000):
            states = np.array(memory.sample(32), dtype=np.float64).tolist()
            out = model(torch.tensor(states, device="cuda"))
            loss = out.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            picked = out.argmax(1).tolist()
    """
    hits = found(src)
    assert (7, "HL007") not in hits
    assert (13, "HL007") in hits


def test_what_follows_a_training_branch_ending_in_continue_is_evaluation():
    """NeuralClassifier's `run(data_loader, mode)`: `if mode == TRAIN: ...; optimizer.step(); continue`, then
    `total_loss += loss.item()` and `.cpu().tolist()` for the predictions: those lines never run on a training
    step (no HL001/HL007), while the training branch's own read would."""
    src = """
    import torch

    def run(model, data_loader, optimizer, mode):
        total_loss = 0.0
        for x, y in data_loader:
            logits = model(x.cuda(non_blocking=True))
            loss = torch.nn.functional.cross_entropy(logits, y.cuda(non_blocking=True))
            if mode == "train":
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                continue
            total_loss += loss.item()
            probs = torch.softmax(logits, dim=1).cpu().tolist()
    """
    hits = found(src)
    assert not any(line in (14, 15) for line, _ in hits)


def test_a_step_function_called_for_its_validation_stage_takes_no_step():
    """SAITS: `model_processing(data, model, stage, optimizer=None)` steps when `stage == "train"`; `validate()`
    calls it as `model_processing(data, model, "val")` under `no_grad`: that loop is evaluation, so its
    `.cpu().numpy()` reads are not per-step (no HL007)."""
    src = """
    import torch

    def model_processing(data, model, stage, optimizer=None):
        results = model(data.cuda(non_blocking=True))
        if stage == "train":
            optimizer.zero_grad()
            results["loss"].backward()
            optimizer.step()
        return results

    def validate(model, val_iter):
        losses = []
        with torch.no_grad():
            for data in val_iter:
                results = model_processing(data, model, "val")
                losses.append(results["loss"].cpu().numpy())
        return losses
    """
    assert (17, "HL007") not in found(src)


def test_a_number_returned_by_an_instance_method_stays_a_number_in_a_dict():
    """EMANet: `loss = sess.train_batch(image, label)` (a same-file `Session` method returning `loss.item()`),
    `out = {'loss': loss}`, then `write(out)` formats each value: numbers, not tensors (no HL002)."""
    src = """
    import torch

    class Session:
        def train_batch(self, image, label):
            loss = self.net(image.cuda(non_blocking=True), label.cuda(non_blocking=True))
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            return loss.item()

        def write(self, out):
            for k, v in out.items():
                print('{}: {:.4g}'.format(k, v))

    def main(loader):
        sess = Session()
        for image, label in loader:
            loss = sess.train_batch(image, label)
            out = {'loss': loss}
            sess.write(out)
    """
    assert (14, "HL002") not in found(src)


def test_indexing_an_accuracy_in_pytorch_0_3_code_reads_it():
    """bearpaw's cifar.py (PyTorch 0.3: `loss.data[0]`): `prec1, prec5 = accuracy(outputs.data, targets.data,
    topk=(1, 5))` then `top1.update(prec1[0], n)`: in 0.3 indexing a one-element tensor returned a Python
    number, a host read every step (HL001). In code without 0.3 markers `prec1[0]` is a 0-dim tensor: no read."""
    src = """
    import torch

    def train(trainloader, model, criterion, optimizer, losses, top1):
        for inputs, targets in trainloader:
            inputs, targets = inputs.cuda(non_blocking=True), targets.cuda(non_blocking=True)
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            prec1, prec5 = accuracy(outputs.data, targets.data, topk=(1, 5))
            losses.update(loss.data[0], inputs.size(0))
            top1.update(prec1[0], inputs.size(0))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert (11, "HL001") in found(src)
    assert (11, "HL001") not in found(src.replace("loss.data[0]", "loss.item()"))


def test_the_object_whose_backward_takes_the_loss_is_not_the_tensor():
    """`accelerator.backward(loss)` under `if (step + 1) % accum == 0: optimizer.step()` with `loss = loss /
    accum` (Accelerate's nlp_example): the loss, not the accelerator, is what `.backward(...)` makes a tensor,
    so nothing is reported as accumulated undivided (no HL016 naming the accelerator)."""
    src = """
    import torch

    def train(model, loader, optimizer, accum):
        accelerator = Accelerator(cpu=False)
        for step, batch in enumerate(loader):
            outputs = model(**batch)
            loss = outputs.loss
            loss = loss / accum
            accelerator.backward(loss)
            if step % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
    """
    assert not any(code == "HL016" for _, code in found(src))


def test_a_loader_wrapped_in_one_enumerate_iterator_is_one_pass():
    """AdaptSegNet: `trainloader_iter = enumerate(trainloader)` once, then `trainloader_iter.__next__()` every
    iteration over a dataset sized to the run: the workers are forked once, so `persistent_workers` buys nothing
    (no HL011); iterating the loader itself every epoch still re-forks them."""
    src = """
    import torch
    from torch.utils import data

    def main(dataset, model, optimizer, max_iters):
        trainloader = data.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=4, pin_memory=True)
        trainloader_iter = enumerate(trainloader)
        for i_iter in range(max_iters):
            _, batch = trainloader_iter.__next__()
            loss = model(batch[0].cuda(non_blocking=True)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    assert (6, "HL011") not in found(src)


def test_an_eval_period_read_from_a_config_dict_is_a_boundary_even_times_the_accumulation():
    """BLINK: `if (step + 1) % (params["eval_interval"] * grad_acc_steps) == 0: evaluate(...)`: the period is the
    evaluation's (its key says so), not the optimizer update's, so the evaluation's reads are not per step."""
    src = """
    import torch

    def evaluate(model, loader):
        for x in loader:
            with torch.no_grad():
                logits = model(x.cuda(non_blocking=True))
            logits = logits.detach().cpu().numpy()

    def train(model, loader, valid_loader, optimizer, params, grad_acc_steps):
        for step, x in enumerate(loader):
            loss = model(x.cuda(non_blocking=True)).mean() / grad_acc_steps
            loss.backward()
            if (step + 1) % grad_acc_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
            if (step + 1) % (params["eval_interval"] * grad_acc_steps) == 0:
                evaluate(model, valid_loader)
    """
    assert (8, "HL007") not in found(src)


def test_a_read_on_the_last_pass_only_is_not_per_step():
    """`if it == (max_model_iter - 1): losses.append(loss.cpu().detach().numpy())` inside the minibatch loop
    (andri27-ts' model-based RL): statistics of the last pass only, not every step's copy."""
    src = """
    import torch

    def train_env_model(env_model, batches, optimizer, max_model_iter):
        losses = []
        for it in range(max_model_iter):
            for x, y in batches:
                loss = ((env_model(x.cuda(non_blocking=True)) - y.cuda(non_blocking=True)) ** 2).mean()
                if it == (max_model_iter - 1):
                    losses.append(loss.cpu().detach().numpy())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        return losses
    """
    assert (10, "HL007") not in found(src)


def test_an_option_read_from_a_config_dict_is_a_number_whatever_its_name():
    """pytorch-superpoint: `lambda_loss = self.config["model"]["lambda_loss"]` then `if lambda_loss > 0:` every
    step: an entry of the run's config is an option, not a tensor, though its name ends in `_loss` (no HL005)."""
    src = """
    import torch

    class Trainer:
        def train_val_sample(self, img, labels):
            semi = self.net(img.cuda(non_blocking=True))
            loss = self.detector_loss(semi, labels.cuda(non_blocking=True))
            lambda_loss = self.config["model"]["lambda_loss"]
            if lambda_loss > 0:
                loss = loss + lambda_loss * semi.mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
    """
    assert (9, "HL005") not in found(src)


def test_a_tensor_moved_out_of_a_checkpoint_dict_is_indexed_on_the_device():
    """krrish94's NeRF: `ray_bundle = cache_dict["ray_bundle"].to(device)` (what `torch.load` returned holds
    Python data for the type model, but only a tensor is moved), then `ray_bundle[0][select_inds]` with
    `select_inds = np.random.choice(...)`, the assignment just above (another branch reuses the name for a
    device tensor): the NumPy indices are copied to the device every step (HL024)."""
    src = """
    import numpy as np
    import torch

    def train(model, train_paths, optimizer, device, n, cached):
        for i in range(1000):
            if cached:
                cache_dict = torch.load(np.random.choice(train_paths))
                ray_bundle = cache_dict["ray_bundle"].to(device)
                select_inds = np.random.choice(ray_bundle.shape[1], size=n, replace=False)
                rays = ray_bundle[0][select_inds]
            else:
                select_inds = torch.randint(100, (n,), device=device)
                rays = model.rays[select_inds]
            loss = model(rays).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    hits = found(src)
    assert (11, "HL024") in hits
    assert (14, "HL024") not in hits


def test_a_step_function_that_loops_over_data_is_an_epoch_function():
    """TranAD's `backprop(epoch, model, data, ..., scheduler)`: `for d in data: ... optimizer.step()` then
    `scheduler.step()` once after the loop, called once per epoch (a full-batch branch also steps at function
    level): the scheduler after the data loop steps once per epoch (no HL014)."""
    src = """
    import torch

    def backprop(epoch, model, data, optimizer, scheduler, full_batch=False):
        if not full_batch:
            for d in data:
                loss = model(d.cuda(non_blocking=True)).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            scheduler.step()
            return loss
        loss = model(data.cuda(non_blocking=True)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        return loss

    def main(model, data, optimizer):
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 5, 0.9)
        for e in range(10):
            backprop(e, model, data, optimizer, scheduler)
    """
    assert (11, "HL014") not in found(src)


def test_an_empty_or_like_tensor_moved_to_the_device_copies_nothing_and_a_per_call_list_holds_no_graph():
    """KGReasoning's forward: `torch.Tensor([]).to(dev)` placeholder logits and `torch.zeros_like(embedding)
    .cuda()` move nothing from the host (no HL012); `all_embeddings, all_idxs = [], []` made in the forward and
    concatenated into that step's loss are dropped with the step (no HL019)."""
    src = """
    import torch

    class Model(torch.nn.Module):
        def forward(self, batch, dev):
            all_embeddings, all_idxs = [], []
            for q in batch:
                embedding = self.embed(q)
                all_embeddings.append(embedding)
            logits = torch.cat(all_embeddings) if all_embeddings else torch.Tensor([]).to(dev)
            offset = torch.zeros_like(logits).cuda()
            return logits + offset

    def train(loader, optimizer, dev):
        model = Model().cuda()
        for batch in loader:
            loss = model(batch, dev).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """
    hits = found(src)
    assert not any(code in ("HL012", "HL019") for _, code in hits)
    before = found(src.replace("torch.Tensor([]).to(dev)", "torch.Tensor([1.0]).to(dev)"))
    assert any(code == "HL012" for _, code in before)  # (a non-empty host tensor is copied)


def test_an_epoch_loop_with_a_leftover_flush_step_is_not_a_step_loop():
    """MMSA's SELF_MM: `while True:` (epochs) around `with tqdm(dataloader['train']) as td: for batch in td:`
    (the steps, accumulating), then `if not left_epochs: optimizer.step()` after the batches flushes the
    remainder once per epoch: the epoch loop is no step loop, so the validation it calls reads once per epoch
    (no HL007 in `do_test`)."""
    src = """
    import torch
    from tqdm import tqdm

    def do_test(model, loader):
        with torch.no_grad():
            for batch in loader:
                out = model(batch.cuda(non_blocking=True))
                preds = out.cpu()

    def do_train(model, dataloader, optimizer, update_epochs):
        while True:
            left = update_epochs
            with tqdm(dataloader['train']) as td:
                for batch in td:
                    left -= 1
                    loss = model(batch.cuda(non_blocking=True)).mean() / update_epochs
                    loss.backward()
                    if not left:
                        optimizer.step()
                        optimizer.zero_grad()
                        left = update_epochs
                if not left:
                    optimizer.step()
            do_test(model, dataloader['valid'])
    """
    assert (9, "HL007") not in found(src)


def test_an_update_loop_around_backward_only_micro_batches_stays_a_step_loop():
    """HALOs' PPO: `for batch in accumulated_batches: ...; accelerator.backward(loss)` then the clip, the
    grad-norm read and `optimizer.step()` in the loop around it: the outer loop is the update loop (its read is
    per update, HL007), not an epoch loop with a leftover step (that needs the inner loop to step itself)."""
    src = """
    import torch

    def train(self, batches, accelerator, optimizer):
        for ppo_epoch in range(4):
            accumulated_batches = batches.split()
            for batch in accumulated_batches:
                loss = self.policy(batch.cuda(non_blocking=True)).mean()
                accelerator.backward(loss)
            norm = accelerator.clip_grad_norm_(self.policy.parameters(), 1.0)
            metrics = norm.float().cpu().numpy().tolist()
            optimizer.step()
            optimizer.zero_grad()
    """
    assert (11, "HL007") in found(src)


def test_a_per_epoch_schedule_in_a_full_batch_epoch_loop_or_with_a_config_period_is_not_misplaced():
    """HGCN (full-batch): `for epoch in range(args.epochs): ... optimizer.step(); lr_scheduler.step()`: the step
    loop is the epoch loop, so a StepLR stepped there steps once per epoch (no HL014). ZeroSpeech:
    `MultiStepLR(optimizer, milestones=cfg.training.scheduler.milestones)` stepped every batch: the milestones
    live in a yaml this file does not declare (300000 steps there), so the cadence is not judged. A literal
    `StepLR(optimizer, 30)` stepped every batch of a loader loop still is."""
    src = """
    import torch

    def train(model, data, optimizer, args):
        lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.5)
        for epoch in range(args.epochs):
            optimizer.zero_grad()
            loss = model(data.cuda(non_blocking=True)).mean()
            loss.backward()
            optimizer.step()
            lr_scheduler.step()

    def train_zs(model, loader, optimizer, cfg):
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=cfg.training.scheduler.milestones)
        for epoch in range(10):
            for x in loader:
                loss = model(x.cuda(non_blocking=True)).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                scheduler.step()
    """
    hits = found(src)
    assert (11, "HL014") not in hits and (21, "HL014") not in hits
    literal = src.replace("milestones=cfg.training.scheduler.milestones", "milestones=[30, 60]")
    assert (21, "HL014") in found(literal)
