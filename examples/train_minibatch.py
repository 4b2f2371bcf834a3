"""Sampled mini-batch training of Hector's compiled RGCN/RGAT/HGT, on one process or many.

One process::

    python examples/train_minibatch.py --dataset synthetic:mag --scale 0.05 --steps 20

Data-parallel on ``torch.distributed`` (gloo on CPU, NCCL on CUDA), each rank sampling its
shard of the seeds and DDP averaging the gradients::

    torchrun --nproc_per_node 2 examples/train_minibatch.py --dataset synthetic:mag --steps 20

The loop is a plain PyTorch loop: ``hector.data.loader.NeighborLoader`` samples each batch natively
(per-relation fan-outs, several hops) and reads its input feature rows from an ``.npy`` file
(native ``pread`` in file order, never mapping or loading the table) in a worker thread while
the previous step computes; the model's layers are compiled once per
mode and reused for every batch (each has its own node and edge counts). Rank 0 prints the
loss, per-phase times and the number of compilations; ``--json`` writes them as one record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from hector.data.loader import NeighborLoader
from hector_bench.minibatch import (
    build_models,
    cached_dataset,
    compiled_functions,
    feature_store,
    seed_type,
)


def main() -> int:
    """Parse arguments, set up (distributed) training, train, report."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="synthetic:mag")
    p.add_argument("--scale", type=float, default=0.05, help="scale of a synthetic dataset")
    p.add_argument("--model", choices=("rgcn", "rgat", "hgt"), default="rgcn")
    p.add_argument("--fanouts", default="10,10", help="fan-out per hop (every relation)")
    p.add_argument("--batch-size", type=int, default=1024, help="seeds per batch per rank")
    p.add_argument("--feat", type=int, default=128)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--classes", type=int, default=349)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--workers", type=int, default=1, help="loader threads (prefetch)")
    p.add_argument("--cache-dir", default="/tmp/hector-minibatch-cache")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:  # started by torchrun
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    rank = dist.get_rank() if world > 1 else 0

    ds = cached_dataset(args.dataset, args.scale, args.cache_dir)
    store = feature_store(ds, args.cache_dir, args.feat, args.classes, seed=0)
    loader = NeighborLoader(
        ds,
        [int(f) for f in args.fanouts.split(",")],
        input_nodes=seed_type(ds),
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        features=store,
        num_workers=args.workers,
    )  # rank and world size come from torch.distributed
    model, _ = build_models(args.model, ds, args.feat, args.hidden, args.classes, 1, seed=0)
    compiled = compiled_functions(model)
    if world > 1:
        # An HGT layer whose input and output widths differ leaves its residual gate unused.
        model = torch.nn.parallel.DistributedDataParallel(
            model, find_unused_parameters=args.model == "hgt"
        )
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    phases = {k: 0.0 for k in ("wait", "sampling", "gather", "forward", "backward", "optimizer")}
    start = time.perf_counter()
    t0 = start
    warm = 0
    for step, batch in zip(range(args.steps), loader, strict=False):
        t1 = time.perf_counter()
        loss = F.cross_entropy(model(batch), batch.y)
        t2 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t3 = time.perf_counter()
        opt.step()
        t4 = time.perf_counter()
        if step == 0:
            warm = sum(fn.compilations for fn in compiled)
        for k, v in (
            ("wait", t1 - t0),
            ("sampling", batch.times["sampling"]),
            ("gather", batch.times["gather"]),
            ("forward", t2 - t1),
            ("backward", t3 - t2),
            ("optimizer", t4 - t3),
        ):
            phases[k] += v
        if rank == 0:
            print(
                f"step {step}: loss {loss.item():.4f}, {batch.num_nodes} nodes, "
                f"{batch.num_edges} edges, {t4 - t0:.3f}s",
                flush=True,
            )
        t0 = time.perf_counter()
    wall = time.perf_counter() - start
    steps = min(args.steps, len(loader))
    record = {
        "dataset": args.dataset,
        "model": args.model,
        "world_size": world,
        "steps": steps,
        "batches_per_s_per_rank": steps / wall,
        "phase_s_per_step": {k: v / steps for k, v in phases.items()},
        "compilations_first_step": warm,
        "compilations_total": sum(fn.compilations for fn in compiled),
        "feature_file_bytes": store.nbytes,
    }
    if rank == 0:
        print(json.dumps(record, indent=2))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(record, f, indent=2)
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
