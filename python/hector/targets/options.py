"""What a compilation is asked for: the user's switches (:class:`Options`) and the statistics
of the graph it is compiled for (:class:`GraphStats`), which the optimizations' cost models read.

The compile cache of ``hector.compile`` keys on :meth:`Options.cache_key`: the switches and
only those graph statistics whose value changes the code (the compaction decision, HGT's
folding, the sizes a memory plan holds for), so one kernel serves every graph alike in them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..passes.optimizations import OPTIMIZATION_ORDER

__all__ = ["COMPACTION_MAX_RATIO", "GraphStats", "Options"]

#: ``hector-compact-materialization`` leaves the IR unchanged above this compaction ratio (its
#: ``max_ratio`` default): graphs on either side of it compile differently.
COMPACTION_MAX_RATIO = 0.95


@dataclass(frozen=True)
class GraphStats:
    """The statistics of the graph a program is compiled for; ``-1``: unknown (the
    optimizations then decide as for any graph)."""

    rows: int = -1  # edges of the graph (linear-reorder cost model)
    ratio: float = -1.0  # compaction ratio of the graph
    src_typed: bool = False  # every relation has one source node type (HGT's chained fold)
    dst_ratio: float = -1.0  # unique (destination, edge type) pairs per edge
    # The graph's row counts, which size the saved values of a memory plan.
    nodes: int = -1
    edges: int = -1
    compact_rows: int = -1
    dst_compact_rows: int = -1

    def cache_key(self) -> tuple[bool, bool, int, int, int]:
        """What of these statistics the compiled code depends on: the compaction decision,
        HGT's folding and the sizes a memory plan holds for (the aggregation order, which
        depends on ``dst_ratio``, is keyed per message by ``hector.compile``)."""
        compacts = self.ratio <= COMPACTION_MAX_RATIO
        return (compacts, self.src_typed, self.nodes, self.edges, self.compact_rows)


@dataclass(frozen=True, init=False)
class Options:
    """Which of Hector's optimizations run (``hector.compile(..., compact=, reorder=, fuse=,
    order=, memory_budget=)``) and how, plus the :class:`GraphStats` of the graph compiled for.

    The graph statistics are also accepted as keywords (``Options(ratio=0.5, dst_ratio=0.1)``),
    as they were fields of this class."""

    compact: bool = True
    reorder: bool = True
    fuse: bool = True
    threads: int = 1  # CPU workers of scheduled kernels (hector.compile: torch.get_num_threads())
    # Linear messages: "auto" (cost model on dst_ratio), "transform-first", "aggregate-first".
    order: str = "auto"
    # Time every template into a counter buffer (hector-profile-kernels; CPU target only).
    profile: bool = False
    # Saved values kept resident in training (placement-plan-saved): a fraction of keep-all
    # (<= 1) or bytes; -1 keeps everything. The graph's row counts size the saved values.
    memory_budget: float = -1.0
    # GEMMs with a bf16 operand multiply bf16 pairs (AVX512-BF16); None when constructed:
    # where the CPU has it and $HECTOR_BF16_DOT is not "off" (lowering/cpu/features.py).
    bf16_dot: bool = False
    # The bf16 pairs' vdpbf16ps in f32 vector arithmetic (HECTOR_BF16_DOT=emulate; for tests on
    # CPUs without AVX512-BF16); None when constructed: from the environment.
    bf16_emulated: bool = False
    # The CPU's vector register width (512, 256 or 128 bits), which bounds the GEMM register
    # block; None when constructed: the host's (lowering/cpu/features.py).
    vector_bits: int = 512
    graph: GraphStats = field(default_factory=GraphStats)

    def __init__(
        self,
        compact: bool = True,
        reorder: bool = True,
        fuse: bool = True,
        *,
        threads: int = 1,
        order: str = "auto",
        profile: bool = False,
        memory_budget: float = -1.0,
        bf16_dot: bool | None = None,
        bf16_emulated: bool | None = None,
        vector_bits: int | None = None,
        graph: GraphStats | None = None,
        rows: int = -1,
        ratio: float = -1.0,
        src_typed: bool = False,
        dst_ratio: float = -1.0,
        nodes: int = -1,
        edges: int = -1,
        compact_rows: int = -1,
        dst_compact_rows: int = -1,
    ) -> None:
        switches = (compact, reorder, fuse, threads, order, profile, memory_budget)
        names = ("compact", "reorder", "fuse", "threads", "order", "profile", "memory_budget")
        for name, value in zip(names, switches, strict=True):
            object.__setattr__(self, name, value)
        from ..lowering.cpu import features as cpu_features

        if bf16_dot is None:
            bf16_dot = cpu_features.bf16_dot()
        if bf16_emulated is None:
            bf16_emulated = bf16_dot and cpu_features.bf16_emulated()
        object.__setattr__(self, "bf16_dot", bf16_dot)
        object.__setattr__(self, "bf16_emulated", bf16_emulated)
        object.__setattr__(self, "vector_bits", vector_bits or cpu_features.vector_bits())
        if graph is None:
            graph = GraphStats(
                rows, ratio, src_typed, dst_ratio, nodes, edges, compact_rows, dst_compact_rows
            )
        object.__setattr__(self, "graph", graph)

    def cache_key(self) -> tuple[object, ...]:
        """The switches and :meth:`GraphStats.cache_key`: compilations with equal keys (and
        equal aggregation orders) make the same code."""
        switches = (self.compact, self.reorder, self.fuse, self.threads, self.memory_budget)
        features = (self.bf16_dot, self.bf16_emulated, self.vector_bits)
        return (*switches, *features, *self.graph.cache_key())

    def placement_pipeline(self) -> str:
        """The placement-plan-saved run for ``memory_budget`` at the graph's sizes."""
        g = self.graph
        return (
            f"placement-plan-saved{{memory_budget={self.memory_budget} nodes={g.nodes} "
            f"edges={g.edges} compact={g.compact_rows} "
            f"dst_compact={g.dst_compact_rows}}}"
        )

    def variant(self) -> str:
        """The ablation label: U (none), C, R, C+R, C+R+F, ..."""
        parts = [n for n, on in (("C", self.compact), ("R", self.reorder), ("F", self.fuse)) if on]
        return "+".join(parts) or "U"

    def pipelines(self, autodiff: bool) -> list[tuple[str, str]]:
        """(stage name, pipeline) of the hector_inter optimizations these options run, in
        :data:`~hector.passes.optimizations.OPTIMIZATION_ORDER`."""
        g = self.graph
        training = "true" if autodiff else "false"
        typed = "true" if g.src_typed else "false"
        arguments = {
            "reorder": f"{{rows={g.rows} src_typed={typed}}}",
            "aggregate": (
                f"{{order={self.order} dst_ratio={g.dst_ratio} "
                f"training={training} threads={self.threads}}}"
            ),
            "compact": f"{{ratio={g.ratio} training={training}}}",
        }
        enabled = {
            "reorder": self.reorder,
            "aggregate": True,
            "compact": self.compact,
            "autodiff": autodiff,
            # Saved values a memory budget places (offloads, recomputes) stay f32: the
            # placement plan and the runtime's store size them as f32 rows.
            "half_saved": autodiff and self.bf16_dot and self.memory_budget < 0,
            "fuse": self.fuse,
        }
        return [
            (o.stage, o.pass_name + arguments.get(o.stage, ""))
            for o in OPTIMIZATION_ORDER
            if enabled[o.stage]
        ]
