"""Patterns found while scoring held-out batches AV and AW (YOLACT, minimal-diffusion), in our own words. Each
test fails without the change it names."""

from __future__ import annotations

import textwrap

from hotloop.lint import lint_source


def found(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


LOG_FLAG = """
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--no_log", dest="log", action="{action}")
args = parser.parse_args()

def train(model, loader, opt):
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.log:
            history.append(loss.item())
"""


def test_a_flag_on_by_default_is_no_log_gate():
    """`if args.log:` where `--no_log` stores False into `log`: logging is on by default, so its body reads
    every step (gates.boundary_gate asks the flag's default). Opted into with store_true, it is a gate."""
    assert (17, "HL001") in found(LOG_FLAG.replace("{action}", "store_false"))
    assert (17, "HL001") not in found(LOG_FLAG.replace("{action}", "store_true").replace("--no_log", "--log"))


def test_a_read_before_the_batch_is_moved_is_on_the_host():
    """`images.max().item()` before `images, labels = (2 * images.to(dev) - 1, ...)`: the batch is still on the
    host there (provenance._moved_later now looks into tuple assignments and the expressions around the move)."""
    src = """
    import torch

    def train_one_epoch(model, loader, opt, device):
        for images, labels in loader:
            assert images.max().item() <= 1
            images, labels = (2 * images.to(device, non_blocking=True) - 1, labels.to(device, non_blocking=True))
            loss = model(images, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
    """
    assert not [f for f in found(src) if f[1] == "HL001"]


def test_a_read_after_the_move_stays_a_device_read_when_a_later_loop_moves_the_name_again():
    """dgcnn: `label.cpu()` after `data, label = data.to(device), label.to(device)` in the train loop is a copy
    from the device, though the test loop below moves `label` again (its `for` rebinds the name in between)."""
    src = """
    import torch

    def train(model, train_loader, test_loader, opt, device):
        for data, label in train_loader:
            data, label = data.to(device), label.to(device).squeeze()
            loss = model(data, label)
            opt.zero_grad()
            loss.backward()
            opt.step()
            train_true.append(label.cpu().numpy())
        for data, label in test_loader:
            data, label = data.to(device), label.to(device).squeeze()
    """
    assert (11, "HL007") in found(src)


def test_a_save_named_by_run_options_is_one_file():
    """`f"{args.arch}-epoch_{args.epochs}-steps_{args.diffusion_steps}.pt"` is the same name every epoch: options
    of the run do not make a new file (saves.formats_a_counter drops `args.x` before looking for a counter)."""
    src = """
    import os
    import torch

    def main(args, model, loader, opt):
        for epoch in range(args.epochs):
            for x, y in loader:
                loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
                opt.zero_grad()
                loss.backward()
                opt.step()
            torch.save(model.state_dict(), os.path.join(args.save_dir,
                       f"{args.arch}-epoch_{args.epochs}-steps_{args.diffusion_steps}.pt"))
    """
    assert [f for f in found(src) if f[1] == "HL021"] == [(12, "HL021")]
    assert not [f for f in found(src.replace("{args.epochs}", "{epoch}")) if f[1] == "HL021"]
    # a counter kept on the options (SimCLR's `args.current_epoch`) is a counter
    assert not [f for f in found(src.replace("{args.epochs}", "{args.current_epoch}")) if f[1] == "HL021"]


PPO = """
import torch

class PPOAlgo:
    def __init__(self, acmodel, optimizer, {params}):
        self.acmodel, self.optimizer = acmodel, optimizer

    def update_parameters(self, exps):
        for _ in range(4):
            for sb in exps:
                dist, value = self.acmodel(sb.obs)
                loss = -dist.log_prob(sb.action).mean() + (value - sb.returnn).pow(2).mean()
                logs.append(loss.item())
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
"""


def test_an_algorithm_handed_its_device_is_device_code():
    """torch-ac's `PPOAlgo(envs, acmodel, device)`: a library file that never says `cuda` but takes the device
    it runs on is device code (analysis.device_code), so its update loop's reads count; without it, not."""
    assert (13, "HL001") in found(PPO.replace("{params}", "device=None"))
    assert (13, "HL001") not in found(PPO.replace("{params}", "epochs=4"))


def test_a_batch_entry_cast_with_a_tensor_only_method_is_a_tensor():
    """SPIN's `has_pose_3d = input_batch["has_pose_3d"].byte()` with the batch moved in another file: `.byte()` (like
    `.detach()`, `.long()`, `.unsqueeze()`) exists only on tensors - not on NumPy arrays, not on modules - so
    `x[has_pose_3d == 1]` in the loss helper is a boolean mask (kinds.TENSOR_ONLY)."""
    src = """
    import torch

    class Trainer:
        def keypoint_3d_loss(self, pred, gt, has_pose_3d):
            pred = pred[:, 25:, :]
            gt = gt[:, :, :-1].clone()
            gt = gt[has_pose_3d == 1]
            return (pred[has_pose_3d == 1] - gt).abs().mean()

        def train_step(self, input_batch):
            has_pose_3d = input_batch["has_pose_3d"].byte()
            loss = self.keypoint_3d_loss(self.model(input_batch["img"]), input_batch["pose_3d"], has_pose_3d)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

        def train(self, loader):
            for batch in loader:
                self.train_step({k: v.to("cuda", non_blocking=True) for k, v in batch.items()})
    """
    assert [(8, "HL006"), (9, "HL006")] == [f for f in found(src) if f[1] == "HL006"]


def test_a_helper_given_tensors_already_on_the_device_copies_nothing():
    """Autoformer's `_predict(batch_x, batch_y)` after `batch_y = batch_y.float().to(self.device)`: its own
    `batch_y[...].to(self.device)` copies nothing on the training path (provenance._device_param asks every hot
    same-file call); the evaluation caller, not hot, does not decide it."""
    src = """
    import torch

    class Exp:
        def _predict(self, batch_x, batch_y):
            dec = torch.cat([batch_y[:, :4], torch.zeros_like(batch_y)], dim=1).to(self.device)
            out = self.model(batch_x, dec)
            return out, batch_y[:, -4:].to(self.device)

        def train(self, loader, opt):
            for batch_x, batch_y in loader:
                batch_x = batch_x.float().to(self.device, non_blocking=True)
                batch_y = batch_y.float().to(self.device, non_blocking=True)
                out, y = self._predict(batch_x, batch_y)
                loss = ((out - y) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    """
    assert not [f for f in found(src) if f[1] == "HL012"]
    moved = "batch_y = batch_y.float().to(self.device, non_blocking=True)"
    moved_late = src.replace(moved, "batch_y = batch_y.float()")
    assert (8, "HL012") in found(moved_late)


def test_a_host_tensor_shaped_like_a_device_parameter_stays_on_the_host():
    """wgan-gp: `alpha = torch.rand(b, 1, 1, 1).expand_as(real_data)` is on the host whatever `real_data` is, so
    its `.cuda()` copies, even now that a helper's parameter can be known to be on the device."""
    src = """
    import torch

    class Trainer:
        def _gradient_penalty(self, real_data, fake):
            alpha = torch.rand(real_data.size(0), 1, 1, 1)
            alpha = alpha.expand_as(real_data)
            alpha = alpha.cuda()
            return (alpha * real_data + (1 - alpha) * fake).pow(2).mean()

        def train(self, loader, opt):
            for data in loader:
                data = data.cuda(non_blocking=True)
                loss = self.D(data).mean() + self._gradient_penalty(data, self.G(data))
                opt.zero_grad()
                loss.backward()
                opt.step()
    """
    assert (8, "HL012") in found(src)
    # RND: a device mask cast with `.type(torch.FloatTensor)` goes to the host, and its `.to(device)` copies back
    rnd = src.replace("alpha = alpha.cuda()", "alpha = (self.D(data) < 0.5).type(torch.FloatTensor).cuda()")
    assert (8, "HL012") in found(rnd.replace("self.D(data)", "real_data"))
