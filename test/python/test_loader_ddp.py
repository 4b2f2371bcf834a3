"""hector.data.loader under torch.distributed: two gloo ranks, each training on its shard of the
seeds with DDP over Hector's compiled layers, give the gradients of one process that trains on
the same batches (the mean of the two ranks' batch gradients)."""

from __future__ import annotations

import json
import os
import socket

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

STEPS = 2
LR = 0.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _setup(folder: str, rank: int, world: int):
    """The dataset, feature store, this rank's loader and a model with fixed initial weights."""
    from hector import datasets, models
    from hector.data.loader import FeatureStore, NeighborLoader

    ds = datasets.load("synthetic:mag", scale=0.002, seed=1)
    store = FeatureStore(os.path.join(folder, "x.npy"), os.path.join(folder, "y.npy"))
    loader = NeighborLoader(
        ds,
        [4, 3],
        input_nodes="paper",
        batch_size=32,
        shuffle=True,
        seed=7,
        features=store,
        num_workers=1,
        rank=rank,
        world_size=world,
    )
    torch.manual_seed(0)
    model = models.RGCN(8, 8, 5, ds.num_relations)
    return loader, model


def _rank_main(rank: int, world: int, port: int, folder: str) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        loader, model = _setup(folder, None, None)  # rank and world from torch.distributed
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        grads, seeds = [], []
        for step, batch in zip(range(STEPS), loader, strict=False):
            opt.zero_grad()
            out = ddp(batch.graph, batch.x)[batch.seed_local]
            F.cross_entropy(out, batch.y).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            seeds.append(batch.node_ids[batch.seed_local].tolist())
            opt.step()
            assert step == batch.index
        torch.save(grads, os.path.join(folder, f"grads{rank}.pt"))
        with open(os.path.join(folder, f"seeds{rank}.json"), "w") as f:
            json.dump({"seeds": seeds, "batches": len(loader)}, f)
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_match_one_process(tmp_path):
    from hector import datasets
    from hector.data.loader import write_random_features

    folder = str(tmp_path)
    n = datasets.load("synthetic:mag", scale=0.002, seed=1).num_nodes
    write_random_features(tmp_path / "x.npy", n, 8, seed=3)
    np.save(tmp_path / "y.npy", np.random.default_rng(4).integers(0, 5, n))
    mp.spawn(_rank_main, args=(2, _free_port(), folder), nprocs=2, join=True)

    ddp_grads = torch.load(tmp_path / "grads0.pt")
    other = torch.load(tmp_path / "grads1.pt")
    # DDP all-reduces: both ranks hold the same gradients.
    for a, b in zip(ddp_grads, other, strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)
    meta = [json.loads((tmp_path / f"seeds{r}.json").read_text()) for r in range(2)]
    assert meta[0]["batches"] == meta[1]["batches"]  # equal shards: ranks step alike
    s0, s1 = (set(sum(m["seeds"], [])) for m in meta)
    assert not s0 & s1  # each rank trains on its own shard of the seeds

    # One process, the same batches: the loaders of both ranks, gradients averaged.
    torch.set_num_threads(1)
    loaders, model = [], None
    for rank in range(2):
        loader, m = _setup(folder, rank, 2)
        loaders.append(loader)
        model = model or m
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step, batches in zip(range(STEPS), zip(*loaders, strict=True), strict=False):
        opt.zero_grad()
        for batch in batches:
            out = model(batch.graph, batch.x)[batch.seed_local]
            (F.cross_entropy(out, batch.y) / 2).backward()
        for rank, batch in enumerate(batches):
            assert batch.node_ids[batch.seed_local].tolist() == meta[rank]["seeds"][step]
        for p, g in zip(model.parameters(), ddp_grads[step], strict=True):
            torch.testing.assert_close(p.grad, g, atol=1e-5, rtol=0)
        opt.step()
