"""On-policy reinforcement learning (cleanrl's PPO, in our own words): the rollout loop inside the training
loop steps the environment once per iteration, as often as the updates it feeds, so its host-made tensors
copied to the device blocking are per-step HL012 - but the action's trip to the host for `envs.step(...)` is
the environment's input, not an accident (no HL007)."""

from __future__ import annotations

import textwrap

from hotloop.lint import lint_source

PPO = """
import numpy as np
import torch

device = torch.device("cuda")
envs = make_envs()
agent = Agent(envs).to(device)
optimizer = torch.optim.Adam(agent.parameters(), lr=3e-4)
rewards = torch.zeros((128, 4)).to(device)
next_obs = torch.Tensor(envs.reset()).to(device)
for iteration in range(1, 1000):
    for step in range(0, 128):
        with torch.no_grad():
            action, value = agent.get_action_and_value(next_obs)
        next_obs, reward, done, info = {step_call}
        rewards[step] = torch.tensor(reward).to(device).view(-1)
    b_inds = torch.randperm(512, device=device)
    for epoch in range(4):
        for start in range(0, 512, 128):
            loss = agent.loss(rewards.view(-1)[b_inds[start:start + 128]])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def found(src: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]


def test_a_rollout_loop_inside_the_training_loop_runs_every_environment_step():
    hits = found(PPO.format(step_call="envs.step(action.cpu().numpy())"))
    assert (16, "HL012") in hits  # the reward, made on the host, copied blocking every environment step
    assert all(code != "HL007" for _, code in hits), hits  # the action must reach the host-side environment


def test_a_read_outside_the_environment_call_is_still_a_read():
    hits = found(PPO.format(step_call="envs.step(action.numpy()); v = value.cpu()"))
    assert any(code == "HL007" for _, code in hits), hits


def test_a_loop_without_an_environment_step_is_not_made_hot():
    """The same loop feeding a replay of stored data (no `envs.step`) stays an epoch-level loop."""
    hits = found(PPO.format(step_call="buffer.sample(step)"))
    assert (16, "HL012") not in hits, hits


def test_a_batch_moved_to_a_gpu_id_is_a_device_copy():
    src = """
    import torch
    class Trainer:
        def __init__(self, gpu_id):
            self.gpu_id = gpu_id
        def train_step(self, batch):
            clean = batch[0].to(self.gpu_id)
            loss = self.model(clean).mean()
            loss.backward()
            self.optimizer.step()
    """
    assert (7, "HL012") in found(src)


def test_an_off_policy_loop_stepping_the_environment_around_its_updates_is_hot(tmp_path):
    """SAC-style: `while not done:` picks an action (a method of the agent, in another file), runs the updates in
    an inner loop, then steps the environment: the agent's per-action host copy runs every environment step."""
    from hotloop.lint import lint_paths

    (tmp_path / "README.md").write_text("x\n")
    (tmp_path / "sac.py").write_text(
        textwrap.dedent("""
        import torch

        class SAC:
            def select_action(self, state):
                state = torch.FloatTensor(state).to(self.device).unsqueeze(0)
                return self.policy.sample(state)

            def update_parameters(self, memory, batch_size):
                loss = self.critic(memory.sample(batch_size)).mean()
                self.critic_optim.zero_grad()
                loss.backward()
                self.critic_optim.step()
        """)
    )
    script = tmp_path / "main.py"
    script.write_text(
        textwrap.dedent("""
        import itertools
        import torch
        from sac import SAC

        agent = SAC(torch.device("cuda"))
        for i_episode in itertools.count(1):
            done = False
            state = env.reset()
            while not done:
                action = agent.select_action(state)
                if len(memory) > 256:
                    for i in range(1):
                        agent.update_parameters(memory, 256)
                state, reward, done, _ = env.step(action)
        """)
    )
    assert (11, "HL012") in [(f.line, f.code) for f in lint_paths([script])]


def test_an_action_read_into_a_name_the_environment_step_takes_is_its_input():
    """cleanrl's DQN: `actions = torch.argmax(q_values, dim=1).cpu().numpy()` then `envs.step(actions)`."""
    src = PPO.format(step_call="envs.step(actions)").replace(
        "            action, value = agent.get_action_and_value(next_obs)",
        "            action, value = agent.get_action_and_value(next_obs)\n"
        "        actions = torch.argmax(value, dim=1).cpu().numpy()\n"
        "        other = value.cpu()",
    )
    hits = found(src)
    assert (15, "HL007") not in hits and (16, "HL007") in hits, hits


def test_a_sibling_validation_loop_fetching_with_next_does_not_make_the_epoch_loop_a_step():
    """nnU-Net: `for epoch: for i in range(n): train_step(next(train_it))`, then under no_grad `for i in
    range(m): validation_step(next(val_it))` - the epoch loop is no step loop, its validation reads are per epoch."""
    src = """
    import torch

    class Trainer:
        def train_step(self, batch):
            loss = self.network(batch["data"].cuda(non_blocking=True)).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            return {"loss": loss.detach()}

        def validation_step(self, batch):
            out = self.network(batch["data"].cuda(non_blocking=True))
            return {"dice": out.detach().cpu().numpy()}

        def run_training(self):
            for epoch in range(self.num_epochs):
                for batch_id in range(self.num_iterations_per_epoch):
                    self.train_step(next(self.dataloader_train))
                with torch.no_grad():
                    for batch_id in range(self.num_val_iterations_per_epoch):
                        self.validation_step(next(self.dataloader_val))
    """
    assert all(code != "HL007" for _, code in found(src)), found(src)
