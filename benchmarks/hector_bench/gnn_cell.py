"""What one ``hector bench gnn`` cell is: the (model, dataset, mode) grid and every setting that
determines a cell's graph, weights and inputs.

The benchmark itself is described in :mod:`hector_bench.gnn`; its records follow
docs/benchmarks.md, "Benchmark records".
"""

from __future__ import annotations

from dataclasses import dataclass

MODELS = ("rgcn", "rgat", "hgt")
MODES = ("inference", "training")
#: Element types a cell's features, weights and systems can run in (``--dtype``).
DTYPES = ("float32", "bfloat16")
#: Suite datasets and their default scale (BGS scaled so a cell runs in minutes on 2 cores).
SUITE_DATASETS: dict[str, float] = {
    "synthetic:aifb": 1.0,
    "synthetic:mutag": 1.0,
    "synthetic:bgs": 0.1,
    "ogbn_mag_0.1": 1.0,
}
#: Reference PyG layer (correctness baseline) per model.
REFERENCE = {"rgcn": "RGCNConv", "rgat": "RGATConv", "hgt": "HGTConv"}
#: Hector layer class per model, in ``hector.models``.
HECTOR_CLASS = {"rgcn": "RGCNLayer", "rgat": "RGATLayer", "hgt": "HGTLayer"}


class BenchError(Exception):
    """A bad benchmark argument or unusable dataset; printed as ``error: ...``."""


@dataclass(frozen=True)
class Cell:
    """One benchmark cell and every setting that determines its graph, weights and inputs."""

    model: str
    dataset: str
    mode: str
    hidden: int = 64
    in_dim: int = 64
    heads: int = 1
    runs: int = 5
    scale: float = 1.0
    seed: int = 0
    device: str = "cpu"
    max_peer_mem_gb: float = 4.0
    max_system_mem_gb: float | None = None  # cap per system's worker (default: 80% available)
    system_timeout_s: float = 3600.0  # a system's worker is killed (failed) after this
    ablation: bool = False  # measure Hector under U, C, R, C+R, C+R+F
    time_peers: bool = True  # False: PyG layers run once, as the error reference, untimed
    order: str = "auto"  # Hector's linear messages: auto (cost model), or a forced order
    roofline: bool = True  # Hector's CPU templates timed one by one, against torch.mm (roofline.py)
    dtype: str = "float32"  # features, weights and every system's layer (one of DTYPES)

    @property
    def training(self) -> bool:
        """Whether a timed call includes the backward pass."""
        return self.mode == "training"

    @property
    def low_precision(self) -> bool:
        """Whether the systems run in a narrower type than float32: errors are then measured
        against a float32 reference on the same (rounded) weights and inputs."""
        return self.dtype != "float32"
