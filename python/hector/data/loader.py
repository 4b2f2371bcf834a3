"""Sampled mini-batches for Hector's compiled layers: ``hector.data.loader.NeighborLoader``.

An iterable like PyG's ``NeighborLoader``: it shuffles seed nodes of one node type, cuts them
into batches, samples each batch's multi-hop neighbourhood with the native sampler
(:mod:`hector.runtime.sampler`: per-relation fan-outs, several threads, reproducible under a
seed) and yields :class:`Batch` objects whose ``graph`` is a :class:`hector.HeteroGraph` built
natively in the same pass (edges sorted by type, local ids grouped by node type, degree
normalizers, compaction map). Features and labels come from a :class:`FeatureStore`, ``.npy``
files whose rows each batch reads natively (``pread`` in file order, several threads, into a
reused buffer), never loaded whole or mapped. Batches are prepared by worker threads
``prefetch`` steps ahead (the native sampler and gather release the GIL), so a batch's
sampling and feature gather overlap the previous step's compute. Under ``torch.distributed``
each rank takes its shard of the seeds.

Every batch also converts to PyG inputs (:meth:`Batch.to_pyg`, :meth:`Batch.to_pyg_hetero`), so
PyG layers can be timed on the very same subgraphs. The batches (:mod:`hector.data.batch`) and
the feature stores the loader reads (:mod:`hector.data.feature_store`,
:mod:`hector.data.unified_features`) are defined beside it and importable from here::

    loader = NeighborLoader(ds, [10, 10], input_nodes="paper", batch_size=1024,
                            features=FeatureStore("feat.npy", "labels.npy"))
    for batch in loader:
        out = model(batch.graph, batch.x)[batch.seed_local]
        loss = F.cross_entropy(out, batch.y)
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from ..runtime import sampler as native_sampler
from .batch import Batch
from .dataset import Dataset
from .feature_store import BufferPool, FeatureStore, FeatureTable, write_random_features
from .graph import HeteroGraph
from .unified_features import UnifiedFeatureStore

# The batches and the feature stores are the loader's outputs and inputs: importable from here.
__all__ = [
    "Batch",
    "BufferPool",
    "FeatureStore",
    "FeatureTable",
    "NeighborLoader",
    "UnifiedFeatureStore",
    "write_random_features",
]


def _seed_ids(dataset: Dataset, input_nodes: Any) -> tuple[np.ndarray, int | None]:
    """Global seed ids and their node type index from ``input_nodes`` (see NeighborLoader)."""
    offsets = dataset.type_offsets()
    counts = dataset.num_nodes_dict()
    if input_nodes is None:
        return np.arange(dataset.num_nodes, dtype=np.int64), None
    if isinstance(input_nodes, str):
        input_nodes = (input_nodes, None)
    if isinstance(input_nodes, tuple):
        name, local = input_nodes
        if name not in offsets:
            raise ValueError(f"input_nodes names node type {name!r}; the graph has {list(offsets)}")
        t = dataset.node_types.index(name)
        if local is None:
            return np.arange(counts[name], dtype=np.int64) + offsets[name], t
        ids = native_sampler._ids("input_nodes", local)
        bad = np.flatnonzero((ids < 0) | (ids >= counts[name]))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"input_nodes[{i}] = {int(ids[i])} is out of range for node type {name!r} "
                f"({counts[name]} nodes)"
            )
        return ids + offsets[name], t
    ids = native_sampler._ids("input_nodes", input_nodes)
    bad = np.flatnonzero((ids < 0) | (ids >= dataset.num_nodes))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"input_nodes[{i}] = {int(ids[i])} is out of range for {dataset.num_nodes} nodes"
        )
    return ids, None


def _fanouts(dataset: Dataset, num_neighbors: Any) -> np.ndarray:
    """``num_neighbors`` (a list per hop, or ``{relation: [per hop]}``) as a fan-out table."""
    r = dataset.num_relations
    if isinstance(num_neighbors, dict):
        names: dict[Any, int] = {et: i for i, et in enumerate(dataset.edge_types)}
        names.update({et[1]: i for i, et in enumerate(dataset.edge_types)})
        hops = {len(v) for v in num_neighbors.values()}
        if len(hops) != 1:
            raise ValueError("every relation of num_neighbors needs the same number of hops")
        table = np.zeros((hops.pop(), r), dtype=np.int32)
        for key, per_hop in num_neighbors.items():
            if key not in names:
                raise ValueError(f"num_neighbors names unknown relation {key!r}")
            table[:, names[key]] = per_hop
        return native_sampler.fanout_table(table.tolist(), r)
    return native_sampler.fanout_table(num_neighbors, r)


class NeighborLoader:
    """Mini-batches of sampled neighbourhoods, like PyG's ``NeighborLoader``.

    Args:
        dataset: a :class:`hector.datasets.Dataset` (node ids grouped by type).
        num_neighbors: fan-outs, one entry per hop: an int for every relation, a list with one
            int per relation, or ``{relation name or (src, rel, dst): [fan-out per hop]}``
            (relations not named get 0). ``-1`` takes every neighbour.
        input_nodes: the seeds: a node type name (all its nodes), ``(name, local ids)``, or
            global ids; None for every node.
        batch_size: seeds per batch (per rank).
        shuffle: shuffle the seeds every epoch (reproducibly, from ``seed`` and the epoch).
        drop_last: drop the last, smaller batch.
        seed: base random seed of shuffling and sampling.
        features: a :class:`FeatureStore` (a file read per batch), a
            :class:`~hector.data.typed_features.TypedFeatureStore` (a file per node type) or a
            :class:`UnifiedFeatureStore` (pinned memory read by the GPU) to gather ``x`` (and
            ``y``) from, or None.
        num_workers: threads preparing batches ahead (0: prepare in the iterating thread).
        prefetch: batches prepared ahead of the one being consumed (with workers).
        threads: native sampling threads per batch (0: one per hardware thread).
        rank, world_size: this process's shard of the seeds; by default taken from
            ``torch.distributed`` when it is initialized (else 0 and 1). Every rank gets the
            same number of batches.
        sampler: a prebuilt :class:`hector.runtime.sampler.NeighborSampler` of ``dataset``, to
            share one adjacency between loaders.

    Raises:
        ValueError: on an unknown node type or relation, seeds out of range, malformed
            fan-outs, a non-positive batch size, or a feature store of another size.
    """

    def __init__(
        self,
        dataset: Dataset,
        num_neighbors: Any,
        *,
        input_nodes: Any = None,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        features: FeatureTable | None = None,
        num_workers: int = 1,
        prefetch: int = 2,
        threads: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        sampler: native_sampler.NeighborSampler | None = None,
    ) -> None:
        """Build (or take) the native sampler and check the arguments."""
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset must be a hector.datasets.Dataset, got {type(dataset)}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        for name, value in (("num_workers", num_workers), ("prefetch", prefetch)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        self.dataset = dataset
        self.fanouts = _fanouts(dataset, num_neighbors)
        self.seeds, self.seed_type = _seed_ids(dataset, input_nodes)
        self.batch_size = batch_size
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, int(seed)
        if features is not None and features.num_rows != dataset.num_nodes:
            raise ValueError(
                f"the feature store has {features.num_rows} rows but the graph has "
                f"{dataset.num_nodes} nodes"
            )
        self.features = features
        self.num_workers, self.prefetch, self.threads = num_workers, max(prefetch, 1), threads
        if world_size is None or rank is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank, world_size = dist.get_rank(), dist.get_world_size()
            else:
                rank, world_size = 0, 1
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is out of range for world_size {world_size}")
        self.rank, self.world_size = int(rank), int(world_size)
        if sampler is None:
            sampler = native_sampler.NeighborSampler(
                dataset.edge_index[0],
                dataset.edge_index[1],
                dataset.edge_type,
                dataset.num_nodes,
                dataset.num_relations,
                dataset.node_type,
                max(len(dataset.node_types), 1),
            )
        elif (sampler.num_nodes, sampler.num_etypes) != (
            dataset.num_nodes,
            dataset.num_relations,
        ):
            raise ValueError("the sampler was built for another graph")
        self.sampler = sampler
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (its shuffle and sampling seeds), as ``DistributedSampler``."""
        self.epoch = int(epoch)

    def _shard(self) -> np.ndarray:
        """This rank's seeds for the current epoch, in order."""
        seeds = self.seeds
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch])
            seeds = seeds[rng.permutation(len(seeds))]
        per_rank = len(seeds) // self.world_size  # equal shards: every rank steps alike
        return seeds[self.rank * per_rank : (self.rank + 1) * per_rank]

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        n = len(self.seeds) // self.world_size
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _batch_seed(self, index: int) -> int:
        """Sampling seed of batch ``index``: a function of (seed, epoch, rank, index) only."""
        state = np.random.SeedSequence([self.seed, self.epoch, self.rank, index])
        return int(state.generate_state(1, np.uint64)[0])

    def sample(self, seeds: Any, *, index: int = 0, rng_seed: int | None = None) -> Batch:
        """Sample (and gather features for) one batch around global ``seeds``."""
        start = time.perf_counter()
        arrays = self.sampler.sample(
            seeds,
            self.fanouts.tolist(),
            seed=self._batch_seed(index) if rng_seed is None else rng_seed,
            threads=self.threads,
        )
        graph = HeteroGraph.from_layout(arrays, max(len(self.dataset.node_types), 1))
        sampled = time.perf_counter()
        batch = Batch(
            graph=graph,
            node_ids=torch.from_numpy(arrays.node_ids),
            seed_local=torch.from_numpy(arrays.seed_local.astype(np.int64)),
            ntype_ptr=torch.from_numpy(arrays.ntype_ptr.astype(np.int64)),
            edge_ids=torch.from_numpy(arrays.edge_ids),
            index=index,
            epoch=self.epoch,
        )
        tracking = 0.0
        if self.features is not None:
            batch.x, tracking = self.features._gather(arrays.node_ids, None)
            if self.features.labels is not None:
                batch.y = self.features.gather_labels(np.asarray(seeds, dtype=np.int64))
        gathered = time.perf_counter() - sampled - tracking
        batch.times = {"sampling": sampled - start, "gather": gathered}
        return batch

    def __iter__(self) -> Iterator[Batch]:
        """Yield this rank's batches of the current epoch, in order (workers prefetch)."""
        shard = self._shard()
        count = len(self)
        chunks = [shard[i * self.batch_size : (i + 1) * self.batch_size] for i in range(count)]
        if self.num_workers == 0:
            for i, chunk in enumerate(chunks):
                yield self.sample(chunk, index=i)
            return
        with ThreadPoolExecutor(self.num_workers, thread_name_prefix="hector-loader") as pool:
            pending: deque[Future[Batch]] = deque()
            ahead = self.prefetch + self.num_workers - 1
            next_i = 0
            try:
                while next_i < len(chunks) and len(pending) < ahead + 1:
                    pending.append(pool.submit(self.sample, chunks[next_i], index=next_i))
                    next_i += 1
                while pending:
                    batch = pending.popleft().result()
                    if next_i < len(chunks):
                        pending.append(pool.submit(self.sample, chunks[next_i], index=next_i))
                        next_i += 1
                    yield batch
            finally:
                for f in pending:
                    f.cancel()
