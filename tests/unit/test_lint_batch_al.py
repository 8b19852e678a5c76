"""Patterns found while scoring held-out batches AL and AM and the misses left from earlier batches
(PPO-PyTorch, Self-Attention-GAN, lucidrains' StyleGAN2), in our own words."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hotloop.lint import lint_paths, lint_source


def found(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


def _project(tmp_path: Path, files: dict[str, str], script: str) -> list[tuple[int, str]]:
    (tmp_path / "README.md").write_text("x\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    return [(f.line, f.code) for f in lint_paths([tmp_path / "train.py"])]


AGENT = """
import torch
device = torch.device("cuda")

class PPO:
    def __init__(self, continuous):
        self.continuous = continuous

    def select_action(self, state):
        if self.continuous:
            with torch.no_grad():
                state = torch.FloatTensor(state).to(device)
            return self.policy.act(state)
        else:
            with torch.no_grad():
                state = torch.FloatTensor(state).{second}
            return self.policy.act(state)

    def update(self):
        loss = self.policy.loss()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
"""

RL_TRAIN = """
import torch
from ppo import PPO

agent = PPO(True)
for episode in range(1000):
    state = env.reset()
    for t in range(500):
        action = agent.select_action(state)
        state, reward, done, _ = env.step(action)
        agent.update()
"""


def test_an_option_whose_branches_both_copy_copies_either_way(tmp_path: Path):
    """PPO-PyTorch: `select_action` copies the host-made state blocking in both branches of
    `if self.has_continuous_action_space:`. The option is set elsewhere, but whichever way it is set, one
    branch runs every environment step. With only one branch copying, the option may be off: no claim."""
    both = _project(tmp_path, {"ppo.py": AGENT.format(second="to(device)")}, RL_TRAIN)
    assert (9, "HL012") in both
    one = _project(tmp_path, {"ppo.py": AGENT.format(second="to(device, non_blocking=True)")}, RL_TRAIN)
    assert (9, "HL012") not in one


UTILS = """
import torch
from torch.autograd import Variable

def tensor2var(x, grad=False):
    if torch.cuda.is_available():
        x = x.cuda()
    return Variable(x, requires_grad=grad)

def as_float(t):
    return t.to(torch.float32)
"""

GAN_TRAIN = """
import torch
from utils import *

def train(G, D, loader, opt_d, model):
    data_iter = iter(loader)
    for step in range(100000):
        real_images, _ = next(data_iter)
        real_images = tensor2var(real_images)
        z = tensor2var(torch.randn(real_images.size(0), 128))
        net = tensor2var(model)
        half = as_float(real_images)
        d_loss = D(real_images).mean() - D(G(z)).mean()
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
"""


def test_a_helper_that_moves_its_parameter_is_a_mover_whatever_its_name(tmp_path: Path):
    """Self-Attention-GAN: `tensor2var(x)` (star-imported from utils.py) does `x.cuda()` on its parameter:
    the batch and the host-drawn `z` it is given are copied blocking every step. Given a model it moves the
    model (once-per-run work, not a batch copy); a dtype cast moves nothing."""
    hits = _project(tmp_path, {"utils.py": UTILS}, GAN_TRAIN)
    assert (9, "HL012") in hits and (10, "HL012") in hits
    assert (11, "HL012") not in hits and (12, "HL012") not in hits


def test_a_local_name_bound_to_one_of_two_functions_calls_both():
    """lucidrains' StyleGAN2: `get_latents_fn = mixed_list if random() < p else noise_list`, then
    `get_latents_fn(...)` every step: both run (and `noise()` under them copies a host-drawn latent)."""
    src = """
    import torch
    from random import random

    def noise(n, dim):
        return torch.randn(n, dim).cuda()

    def noise_list(n, dim):
        return [noise(n, dim)]

    def mixed_list(n, dim):
        return noise_list(n, dim) + noise_list(n, dim)

    def train(G, D, opt, steps, p):
        for i in range(steps):
            get_latents_fn = mixed_list if random() < p else noise_list
            style = get_latents_fn(8, 512)
            loss = D(G(style)).mean()
            loss.backward()
            opt.step()
    """
    assert (6, "HL012") in found(src)
    assert (6, "HL012") not in found(src.replace("style = get_latents_fn(8, 512)", "style = None"))


def test_a_call_through_a_dict_of_methods_calls_each_of_them():
    """KnowledgeGraphEmbedding: `model_func = {'TransE': self.TransE, 'RotatE': self.RotatE}` then
    `model_func[self.model_name](head, relation, tail)` in the forward: each method may run every step, and
    `self.gamma.item()` in them reads a parameter on the host."""
    src = """
    import torch
    from torch import nn

    class KGE(nn.Module):
        def TransE(self, h, r, t):
            return self.gamma.item() - torch.norm(h + r - t, p=1, dim=2)

        def DistMult(self, h, r, t):
            return (h * r * t).sum(dim=2)

        def forward(self, h, r, t):
            model_func = {"TransE": self.TransE, "DistMult": self.DistMult}
            return model_func[self.model_name](h, r, t)

    def train(loader, opt):
        model = KGE().cuda()
        for h, r, t in loader:
            loss = model(h, r, t).mean()
            loss.backward()
            opt.step()
    """
    assert (7, "HL001") in found(src)
    assert (7, "HL001") not in found(src.replace('"TransE": self.TransE, ', ""))
