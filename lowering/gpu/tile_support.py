"""What the shared-memory tiled GPU kernels (:mod:`.gpu_gemm`, :mod:`.gpu_xty`) share: the
per-block limits a schedule is checked against and the small IR builders both bodies use
(address spaces, contracting fast-math, bounds checks, guarded loads, block-strided loops)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mlir import ir
from mlir.dialects import arith, scf

from .. import templates as T

#: Static shared memory a block may use without an opt-in (CUDA's 48 KiB).
SHARED_BYTES_LIMIT = 48 * 1024
#: Threads per block (every NVIDIA GPU since sm_20).
MAX_THREADS = 1024
#: Accumulators one thread may hold (its ``unroll × vector`` register block): beyond this the
#: register file spills to local memory.
MAX_REGISTER_BLOCK = 64
F32_BYTES = 4


def address_space(name: str) -> ir.Attribute:
    """The ``#gpu.address_space<name>`` attribute (``workgroup`` or ``private``)."""
    # The bindings have no builder for #gpu.address_space; the attribute is a constant.
    return ir.Attribute.parse(f"#gpu.address_space<{name}>")


def fma_contract() -> ir.Attribute:
    """The ``#arith.fastmath<contract>`` flag of the micro-kernels' multiply-adds."""
    # The micro-kernel's multiply-adds may fuse (one FMA each on the GPU); the bindings have
    # no builder for #arith.fastmath.
    return ir.Attribute.parse("#arith.fastmath<contract>")


def ult(x: ir.Value, y: ir.Value) -> ir.Value:
    """``x < y``, unsigned."""
    return arith.cmpi(arith.CmpIPredicate.ult, x, y)


def select_load(b: T.Body, cond: ir.Value, load: Callable[[], ir.Value]) -> ir.Value:
    """``cond ? load() : 0.0``, the load only executed when ``cond`` holds."""
    f32 = T.f32_type()
    if_op = scf.IfOp(cond, [f32], has_else=True)
    with ir.InsertionPoint(if_op.then_block):
        scf.yield_([load()])
    with ir.InsertionPoint(if_op.else_block):
        scf.yield_([b.f32(0.0)])
    return if_op.results[0]


@contextmanager
def strided(b: T.Body, start: ir.Value, total: int, step: int) -> Iterator[ir.Value]:
    """``for e = start; e < total; e += step`` (a block's threads sharing ``total`` items)."""
    with b.loop(start, b.index(total), b.index(step)) as e:
        yield e
