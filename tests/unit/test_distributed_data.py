"""Data sharding without processes: the ranks' shares of every step make up one process's batch x world."""

from __future__ import annotations

import pytest
import torch

from hotloop.config import TrainConfig
from hotloop.data import make_source
from hotloop.distributed import resolve_strategy
from hotloop.errors import ConfigError


def batches(data, rank, world, b, epoch=0, skip=0):
    src = make_source(data, batch_size=b, device=torch.device("cpu"), train=True, drop_last=True, seed=3,
                      rank=rank, world=world)  # fmt: skip
    return list(src.epoch(epoch, skip)), src


@pytest.mark.parametrize("epoch,skip", [(0, 0), (1, 0), (2, 3)])
def test_tensor_shards_union_is_the_one_process_batch(epoch, skip):
    x = torch.arange(100).float()[:, None]
    y = torch.arange(100)
    one, src1 = batches((x, y), 0, 1, 8, epoch, skip)
    r0, src0 = batches((x, y), 0, 2, 4, epoch, skip)
    r1, _ = batches((x, y), 1, 2, 4, epoch, skip)
    assert src0.length == src1.length == 12 and len(r0) == len(r1) == len(one) == 12 - skip
    for b1, a, b in zip(one, r0, r1, strict=True):
        assert torch.equal(b1[1], torch.cat([a[1], b[1]]))


def test_map_style_datasets_get_a_distributed_sampler():
    ds = torch.utils.data.TensorDataset(torch.arange(64).float())

    class Wrapped(torch.utils.data.Dataset):  # not a TensorDataset: goes through a DataLoader
        def __len__(self):
            return len(ds)

        def __getitem__(self, i):
            return ds[i][0]

    one, _ = batches(Wrapped(), 0, 1, 8)
    shares = zip(batches(Wrapped(), 0, 2, 4)[0], batches(Wrapped(), 1, 2, 4)[0], strict=True)
    seen = [torch.cat([a, b]) for a, b in shares]
    assert sorted(torch.cat(seen).tolist()) == list(range(64))  # every sample once per epoch over the ranks
    assert sorted(torch.cat(one).tolist()) == list(range(64))


def test_a_plain_dataloader_under_several_ranks_is_warned_about():
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(8)), batch_size=2)
    with pytest.warns(UserWarning, match="DistributedSampler"):
        batches(loader, 0, 2, 2)


def test_strategy_values():
    assert resolve_strategy("auto", 1) == "none" and resolve_strategy("auto", 4) == "ddp"
    with pytest.raises(ConfigError, match="strategy=none with 2 processes"):
        resolve_strategy("none", 2)
    with pytest.raises(ConfigError, match="strategy"):
        TrainConfig(strategy="zero3")


def test_fsdp_shard_targets():
    from hotloop.config import ClassifyConfig
    from hotloop.distributed import shard_targets
    from hotloop.recipes.classify import MLP, Block

    model = MLP(ClassifyConfig(n_layer=3))
    assert shard_targets(model, None) == list(model.blocks)  # the model's hotloop_blocks()
    assert all(isinstance(m, Block) for m in shard_targets(model, "Block")) and len(shard_targets(model, "Block")) == 3
    assert len(shard_targets(model, "Block, LayerNorm")) == 3 + 3 + 1
    with pytest.raises(ConfigError, match="shard_modules=Blok matches no submodule; classes in this model: .*Block"):
        shard_targets(model, "Blok")
