"""Distributed training on the CPU with gloo: real processes launched by torchrun, 2 ranks.

References: a one-process run with twice the per-rank batch (equivalence), the uninterrupted run
(exact resume), and counts of the collectives themselves (no_sync / set_requires_gradient_sync).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from hotloop import checkpoint as ckpt_io
from hotloop import load_checkpoint

# 1024 samples -> 921 training samples = 28 global batches of 32: the runs cross an epoch boundary.
BASE = ["recipe=classify", "classify.samples=1024", "schedule_steps=30", "log_every=5", "log_first_step=false",
        "eval_every=10", "ckpt_every=10", "keep_last=5", "progress=plain", "tensorboard=false"]  # fmt: skip


def env() -> dict[str, str]:
    e = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    e.pop("RANK", None)
    e.pop("WORLD_SIZE", None)
    return e


def fit(cwd: Path, *args: str, ranks: int = 1, timeout: int = 240) -> subprocess.CompletedProcess:
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    cmd = [*launch, "-m", "hotloop", "fit"] if ranks > 1 else [sys.executable, "-m", "hotloop", "fit"]
    res = subprocess.run([*cmd, *BASE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
    return res


def losses(run: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["model"]


def close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-5) -> float:
    assert a.keys() == b.keys()
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert worst <= atol, worst
    return worst


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("dist")
    fit(d, "max_steps=30", "batch_size=32", "run_dir=one")
    fit(d, "max_steps=30", "batch_size=16", "strategy=ddp", "run_dir=ddp", ranks=2)
    fit(d, "max_steps=30", "batch_size=16", "strategy=fsdp", "run_dir=fsdp", ranks=2)  # async (DCP) saves
    # activation checkpointing composed with each strategy; the FSDP one saves synchronously
    fit(d, "max_steps=30", "batch_size=16", "strategy=ddp", "activation_checkpointing=full", "run_dir=ddp_ac", ranks=2)
    fit(d, "max_steps=30", "batch_size=16", "strategy=fsdp", "activation_checkpointing=selective",
        "async_checkpoint=false", "run_dir=fsdp_ac", ranks=2)  # fmt: skip
    return d


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "ddp_ac", "fsdp_ac"])
def test_two_ranks_equal_one_process_with_twice_the_batch(runs, strategy):
    one, two = losses(runs / "one"), losses(runs / strategy)
    assert sorted(one) == sorted(two) == [5, 10, 15, 20, 25, 30]
    for step in one:
        assert math.isclose(one[step], two[step], rel_tol=1e-5), (step, one[step], two[step])
    close(weights(runs / "one"), weights(runs / strategy))
    # only rank 0 writes: one metrics row per boundary, not two
    assert len((runs / strategy / "metrics.jsonl").read_text().splitlines()) == len(
        (runs / "one" / "metrics.jsonl").read_text().splitlines()
    )


def test_async_sharded_checkpoints_equal_synchronous_ones(runs):
    """FSDP's background saves (DCP async_save) commit the same weights as synchronous ones, every boundary,
    and the step loop logs the time it spent on each."""
    for step in (10, 20, 30):
        path = f"checkpoints/step_{step:08d}"
        a, b = weights(runs / "fsdp" / path), weights(runs / "fsdp_ac" / path)
        close(a, b, atol=1e-6)  # activation checkpointing changes no gradient either
    assert ckpt_io.latest_valid(runs / "fsdp").name == "step_00000030"
    rows = [json.loads(x) for x in (runs / "fsdp" / "metrics.jsonl").read_text().splitlines()]
    # the save at step 10 (20) is paid in the interval after it: the rows of steps 15 and 25 carry it
    assert [r["step"] for r in rows if "ckpt_block_s" in r] == [15, 25]


def test_fsdp_checkpoint_is_sharded_and_reshards_both_ways(runs):
    ckpts = runs / "fsdp" / "checkpoints"
    sharded = ckpts / "step_00000020"
    assert (sharded / ".metadata").is_file() and len(list(sharded.glob("*.distcp"))) == 2  # one file per rank
    ref = weights(runs / "one")
    # saved by 2 ranks, resumed in one process
    fit(runs, "max_steps=30", "batch_size=32", "strategy=fsdp", f"resume={sharded}", "run_dir=two_to_one")
    close(weights(runs / "two_to_one"), ref)
    assert losses(runs / "two_to_one")[30] == pytest.approx(losses(runs / "one")[30], rel=1e-5)
    # saved by one process (a one-file checkpoint), resumed on 2 ranks with FSDP
    one_file = runs / "one" / "checkpoints" / "step_00000020.pt"
    fit(runs, "max_steps=30", "batch_size=16", "strategy=fsdp", f"resume={one_file}", "run_dir=one_to_two", ranks=2)
    close(weights(runs / "one_to_two"), ref)


def test_ddp_resume_is_exact(runs):
    fit(runs, "max_steps=20", "batch_size=16", "strategy=ddp", "run_dir=ddp_cut", ranks=2)
    fit(runs, "max_steps=30", "batch_size=16", "strategy=ddp", "run_dir=ddp_cut", "resume=auto", ranks=2)
    a, b = weights(runs / "ddp_cut"), weights(runs / "ddp")
    assert all(torch.equal(a[k], b[k]) for k in a)  # bit for bit
    assert losses(runs / "ddp_cut") == losses(runs / "ddp")


COUNT_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import torch.distributed as dist
    import torch.distributed.fsdp._fully_shard._fsdp_collectives as fsdp_collectives
    import hotloop
    from hotloop.recipes.classify import MLP, make_data
    from hotloop.config import ClassifyConfig

    strategy, out = sys.argv[1], sys.argv[2]
    calls = {"n": 0}
    c = ClassifyConfig(samples=512, hidden=32, n_layer=2)
    train, _ = make_data(c)
    cfg = hotloop.TrainConfig(max_steps=6, batch_size=8, grad_accum=4, strategy=strategy, run_dir="run_" + strategy,
                              log_every=3, ckpt_every=None, progress="off", tensorboard=False)
    trainer = hotloop.Trainer(MLP(c), cfg)
    if strategy == "ddp":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def counting(state, bucket):
            calls["n"] += 1
            return allreduce_hook(state, bucket)

        trainer.forward_model.register_comm_hook(dist.group.WORLD, counting)
    else:
        original = fsdp_collectives.foreach_reduce

        def counting(*args, **kwargs):
            calls["n"] += 1
            return original(*args, **kwargs)

        fsdp_collectives.foreach_reduce = counting
        import torch.distributed.fsdp._fully_shard._fsdp_param_group as group_mod
        group_mod.foreach_reduce = counting
    trainer.fit(train)
    if dist.get_rank() == 0:
        json.dump({"calls": calls["n"], "steps": trainer.state.step,
                   "groups": 1 + len(trainer.model.blocks)}, open(out, "w"))
    dist.barrier()
    dist.destroy_process_group()  # gloo's threads are joined before exit (else a rank can abort at teardown)
""")


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_gradient_sync_once_per_optimizer_step(tmp_path, strategy):
    script = tmp_path / "count.py"
    script.write_text(COUNT_SCRIPT)
    out = tmp_path / "calls.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
           strategy, str(out)]  # fmt: skip
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env())
    assert res.returncode == 0, res.stderr[-6000:]
    got = json.loads(out.read_text())
    assert got["steps"] == 6
    if strategy == "ddp":  # one bucket for this small model: one all-reduce per optimizer step, not 4
        assert got["calls"] == 6, got
    else:  # one reduce-scatter per FSDP unit (2 blocks + root) per optimizer step, not per micro-batch
        assert got["calls"] == 6 * got["groups"], got


FAIL_SCRIPT = textwrap.dedent("""
    import torch
    import torch.distributed as dist
    import hotloop
    from hotloop.recipes.classify import MLP, make_data
    from hotloop.config import ClassifyConfig

    c = ClassifyConfig(samples=512, hidden=32, n_layer=2)
    train, _ = make_data(c)
    cfg = hotloop.TrainConfig(max_steps=50, batch_size=8, strategy="ddp", run_dir="run", dist_timeout=30,
                              progress="off", tensorboard=False)
    trainer = hotloop.Trainer(MLP(c), cfg)

    def loss_fn(model, batch):
        if dist.get_rank() == 1 and trainer.state.step == 3:
            raise ValueError("planted failure on rank 1")
        return model(*batch)

    trainer.loss_fn = loss_fn
    trainer.fit(train)
""")


def test_a_failing_rank_stops_every_rank(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(FAIL_SCRIPT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    t0 = time.monotonic()
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env())
    assert res.returncode != 0
    assert time.monotonic() - t0 < 90  # no hang: well inside the 30 s collective timeout plus start-up
    out = res.stdout + res.stderr
    assert out.count("ValueError: planted failure on rank 1") == 1, out[-4000:]


def test_sigterm_under_torchrun_saves_once_at_an_agreed_boundary(tmp_path):
    import signal

    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "hotloop"]
    args = [*BASE, "max_steps=100000", "batch_size=16", "strategy=ddp", "ckpt_every=null", "eval_every=0"]
    args.append("run_dir=run")
    log = tmp_path / "out.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen([*launch, "fit", *args], cwd=tmp_path, env=env(), stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and "step 15/" not in log.read_text():
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)  # torchrun forwards it to every rank
        proc.wait(timeout=120)
    out = log.read_text()
    assert proc.returncode != 0
    (ckpt,) = (tmp_path / "run" / "checkpoints").glob("step_*.pt")  # one checkpoint, written by rank 0 only
    step = int(ckpt.stem.split("_")[1])
    assert step % 5 == 0  # the ranks stopped together at a log boundary
    assert out.count("received SIGTERM: saved the checkpoint") == 1, out[-3000:]


def test_distill_under_torchrun_builds_the_cache_once_and_never_runs_the_teacher(tmp_path):
    tiny = ["gpt.n_layer=1", "gpt.n_embd=32", "gpt.n_head=2", "gpt.block_size=32", "batch_size=8", "eval_batches=2",
            "progress=plain", "tensorboard=false"]  # fmt: skip
    hotloop = [sys.executable, "-m", "hotloop", "fit"]
    res = subprocess.run([*hotloop, *tiny, "max_steps=10", "run_dir=teacher"], cwd=tmp_path, env=env(),
                         capture_output=True, text=True, timeout=240)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "hotloop"]
    args = [*tiny, "recipe=distill", "teacher=teacher", "max_steps=10", "log_every=5", "eval_every=5",
            "distill.samples=64", "run_dir=student"]  # fmt: skip
    res = subprocess.run([*launch, "fit", *args], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-6000:]
    assert res.stdout.count("teacher cache: 64/64") == 1  # rank 0 built it, rank 1 waited
    counts = {
        r["teacher_forwards"] for r in map(json.loads, (tmp_path / "student/metrics.jsonl").read_text().splitlines())
    }
    assert counts == {2}  # the build's 2 batches of 32; none in training or evaluation


SAMPLER_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
    import hotloop
    from hotloop.recipes.classify import MLP, make_data
    from hotloop.config import ClassifyConfig

    batch, out = int(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)  # the model is built before the Trainer seeds: the same initial weights as one process
    c = ClassifyConfig(samples=600, hidden=32, n_layer=2)
    (x, y), _ = make_data(c)
    cfg = hotloop.TrainConfig(max_steps=12, batch_size=batch, log_every=3, epochs=3, ckpt_every=None,
                              progress="off", tensorboard=False, run_dir="run")
    trainer = hotloop.Trainer(MLP(c), cfg)  # joins the torchrun job (if any) before the sampler asks for it
    d = trainer.dist
    sampler = DistributedSampler(torch.utils.data.TensorDataset(x, y), num_replicas=d.world, rank=d.rank, seed=5)
    loader = DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch, sampler=sampler, drop_last=True)
    trainer.fit(loader)
    if d.main:
        json.dump([r["loss"] for r in trainer.history if "loss" in r], open(out, "w"))
""")


def test_distributed_sampler_loaders_equal_one_process_with_twice_the_batch(tmp_path):
    """A user's DataLoader over a DistributedSampler: the epoch is set for it, and 2 ranks x 8 == 1 x 16."""
    script = tmp_path / "sampler.py"
    script.write_text(SAMPLER_SCRIPT)
    one = subprocess.run([sys.executable, str(script), "16", "one.json"], cwd=tmp_path, env=env(),
                         capture_output=True, text=True, timeout=240)  # fmt: skip
    assert one.returncode == 0, one.stderr[-3000:]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    two = subprocess.run([*launch, "8", "two.json"], cwd=tmp_path, env=env(), capture_output=True, text=True,
                         timeout=240)  # fmt: skip
    assert two.returncode == 0, two.stderr[-6000:]
    a, b = json.loads((tmp_path / "one.json").read_text()), json.loads((tmp_path / "two.json").read_text())
    assert len(a) == len(b) == 4
    for u, v in zip(a, b, strict=True):
        assert math.isclose(u, v, rel_tol=1e-5), (a, b)


INIT_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist
    import hotloop
    from hotloop.recipes.classify import MLP
    from hotloop.config import ClassifyConfig

    model = MLP(ClassifyConfig(hidden=32, n_layer=2))  # unseeded: every process draws its own weights
    mine = {k: v.clone() for k, v in model.state_dict().items()}
    hotloop.Trainer(model, hotloop.TrainConfig(strategy="fsdp", progress="off", run_dir="run"))
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    ref = [mine]
    dist.broadcast_object_list(ref, src=0)
    same_as_rank0 = all(torch.equal(full[k], ref[0][k]) for k in full)
    differed = not all(torch.equal(mine[k], ref[0][k]) for k in mine)
    print(f"rank {dist.get_rank()}: same_as_rank0={same_as_rank0} own_init_differed={differed}", flush=True)
""")


def test_fsdp_starts_every_rank_from_rank0_weights(tmp_path):
    script = tmp_path / "init.py"
    script.write_text(INIT_SCRIPT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    res = subprocess.run(cmd, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-6000:]
    assert "rank 1: same_as_rank0=True own_init_differed=True" in res.stdout, res.stdout
