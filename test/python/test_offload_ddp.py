"""Offload under torch.distributed: two gloo ranks, one store per rank, DDP grads = keep-all."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, root: str, out: str) -> None:
    import hector
    from hector_bench.offload_models import build_model

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        results = []
        for policy in (None, "all"):
            model = build_model("gpt", 2, 64, 4, 128, 32, seed=0)
            ddp = torch.nn.parallel.DistributedDataParallel(model)
            fwd = hector.offload(ddp, policy, root=root, threshold=1024) if policy else ddp
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            gen = torch.Generator().manual_seed(100 + rank)
            for _ in range(3):
                ids = torch.randint(0, 128, (2, 32), generator=gen)
                opt.zero_grad()
                F.cross_entropy(fwd(ids).reshape(-1, 128), ids.reshape(-1)).backward()
                opt.step()
            results.append([p.grad.clone() for p in model.parameters()])
            if policy:
                stats = fwd.cache.stats()
                store_path = fwd.cache.store.path
                fwd.close()
        same = all(torch.equal(a, b) for a, b in zip(*results, strict=True))
        torch.save(
            {
                "same": same,
                "offloaded": stats["offloaded"],
                "store": store_path,
                "grads": results[1],
            },
            f"{out}/rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")
def test_ddp_two_gloo_ranks(tmp_path):
    root = str(tmp_path / "root")
    mp.spawn(_rank_main, args=(2, _free_port(), root, str(tmp_path)), nprocs=2, join=True)
    r0 = torch.load(tmp_path / "rank0.pt")
    r1 = torch.load(tmp_path / "rank1.pt")
    for r in (r0, r1):
        assert r["same"], "grads with offload differ from keep-all"
        assert r["offloaded"] > 0
    assert r0["store"] != r1["store"]  # one store per rank
    # DDP all-reduces: both ranks hold the same gradients.
    assert all(torch.equal(a, b) for a, b in zip(r0["grads"], r1["grads"], strict=True))
    assert os.listdir(root) == []
