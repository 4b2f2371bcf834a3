"""Inputs at the limits of what the compiler holds (issue 39): sizes that overflow 64-bit
strides end in a located error, not an MLIR assertion; deeply nested regions are walked without
Python recursion."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mlir import ir
from mlir.dialects import func, scf

from hector.dialects import make_context
from hector.passes import PASSES
from hector.passes.diagnostics import PipelineError
from hector.passes.pipeline import run_pipeline
from hector.passes.registry import MLIR_CONTEXT, load_all
from hector.passes.verify import verify_module
from hector.passes.walk import walk_ops

load_all()  # every pass, not only those the imports above register

#: Deeper than Python's default recursion limit (1000 frames).
DEPTH = 1500


def _hector(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hector.tools.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_compile_rgcn_with_sizes_beyond_int64_fails_cleanly() -> None:
    # The weights [3, K, N] and [K, N] hold more than 2^63 - 1 bytes: MLIR's strided-layout
    # code asserted (the process aborted) while lowering them.
    dim = str(2**31 - 1)
    r = _hector("compile", "--model", "rgcn", "--in-dim", dim, "--out-dim", dim, "--etypes", "3")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert "Assertion" not in r.stderr
    assert "models.py:" in r.stderr  # located at the layer's source line
    assert f"type tensor<3x{dim}x{dim}xf32> is too large for 64-bit sizes and strides" in r.stderr


def test_compile_rgcn_with_huge_dims_has_no_traceback() -> None:
    r = _hector("compile", "--model", "rgcn", "--in-dim", str(2**32), "--out-dim", str(2**32))
    assert r.returncode in (1, 2), r.stderr  # the verifier's error, or the argument parser's
    assert "Traceback" not in r.stderr
    assert "Assertion" not in r.stderr
    assert "error:" in r.stderr


def _deep_module(ctx: ir.Context, depth: int) -> ir.Module:
    """``func @f`` holding ``depth`` nested ``scf.execute_region`` ops, a template innermost
    (built through the bindings: no text, so no bound on the text's nesting applies)."""
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        rows = ir.MemRefType.get([ir.ShapedType.get_dynamic_size(), 8], ir.F32Type.get())
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("f", ir.FunctionType.get([rows, rows], []))
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            at = func.ReturnOp([])
        for _ in range(depth):
            with ir.InsertionPoint(at):
                region = scf.ExecuteRegionOp([])
            with ir.InsertionPoint(region.region.blocks.append()):
                at = scf.YieldOp([])
        with ir.InsertionPoint(at):
            ir.Operation.create(
                "hector_intra.traversal_template",
                operands=list(entry.arguments),
                attributes={
                    "parallel": ir.StringAttr.get("node"),
                    "fn": ir.StringAttr.get("relu"),
                    "reduce": ir.StringAttr.get("none"),
                    "slope": ir.FloatAttr.get(ir.F32Type.get(), 0.0),
                    "block_size": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 256),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 0, 0, 1, 0, 1]),
                },
            )
    assert module.operation.verify()
    return module


@pytest.fixture(scope="module")
def context() -> ir.Context:
    return make_context()


def test_walk_is_not_recursive(context: ir.Context) -> None:
    module = _deep_module(context, DEPTH)
    ops = list(walk_ops(module.operation))
    names = [op.name for op in ops]
    assert names.count("scf.execute_region") == DEPTH
    # Pre-order: the innermost template right after the last region op, func.return last.
    assert names[DEPTH + 1 : DEPTH + 3] == ["hector_intra.traversal_template", "scf.yield"]
    assert names[0] == "func.func"
    assert names[-1] == "func.return"
    verify_module(module.operation)  # no RecursionError


@pytest.mark.parametrize("name", sorted(n for n, p in PASSES.items() if p.context == MLIR_CONTEXT))
def test_every_pass_walks_deep_nesting(context: ir.Context, name: str) -> None:
    module = _deep_module(context, DEPTH)
    message = ""
    try:
        run_pipeline(module, name, reproducer=False)
    except PipelineError as err:  # refusing the input is fine; crashing in a walk is not
        message = str(err)
    assert "internal error" not in message, message
    assert "RecursionError" not in message
