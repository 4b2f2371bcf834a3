"""Traced programs carry the user's source lines: each op at the line of the graph-API call
that made it, the function at its ``def``; diagnostics and ``--debug-info`` dumps point there."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from mlir import ir

import hector
from hector import targets
from hector.frontends import trace as frontend
from hector.passes.diagnostics import PipelineError
from hector.passes.pipeline import run_pipeline
from hector.passes.registry import PASSES, PassFailure, PassInfo
from hector.targets import driver as compiler

ROOT = Path(__file__).resolve().parents[2]


def _layer(g, x, w):
    e = g.gather_src(x)  # the line the test looks for
    return g.sum_to_dst(g.typed_linear(e, w))


GATHER_LINE = inspect.getsourcelines(_layer)[1] + 1
SUM_LINE = GATHER_LINE + 1
SHAPES = [(10, 4), (3, 4, 2)]


def _ops(module: ir.Module) -> dict[str, ir.Operation]:
    func = module.body.operations[0]
    return {op.operation.name: op.operation for op in func.regions[0].blocks[0].operations}


def _file_line(loc: ir.Location) -> tuple[str, int]:
    assert loc.is_a_file(), str(loc)
    return loc.filename, loc.start_line


def test_each_op_is_located_at_the_users_line() -> None:
    traced = frontend.trace(_layer, SHAPES)
    assert isinstance(traced.program, ir.Module)
    ops = _ops(traced.program)
    assert _file_line(ops["hector_inter.gather_src"].location) == (__file__, GATHER_LINE)
    assert _file_line(ops["hector_inter.typed_linear"].location) == (__file__, SUM_LINE)
    assert _file_line(ops["hector_inter.sum_to_dst"].location) == (__file__, SUM_LINE)
    # The column is where the call's expression starts (1-based).
    line = inspect.getsourcelines(_layer)[0][1]
    assert ops["hector_inter.gather_src"].location.start_col == line.index("g.gather_src") + 1


def test_function_is_located_at_its_def_after_decorators() -> None:
    @hector.compile
    @staticmethod  # a second decorator line: the location is still the def's
    def decorated(g, x):
        return g.sum_to_dst(g.gather_src(x))

    traced = frontend.trace(decorated.fn.__func__, [(5, 3)])
    func = traced.program.body.operations[0].operation
    def_line = inspect.getsourcelines(decorated.fn.__func__)[1] + 2
    assert _file_line(func.location) == (__file__, def_line)


def test_debug_info_dump_names_the_users_line() -> None:
    staged = compiler.run_stages(frontend.trace(_layer, SHAPES), "cpu", until="inter")
    assert ' loc("' not in staged.ir("inter")
    staged = compiler.run_stages(
        frontend.trace(_layer, SHAPES), "cpu", until="intra", debug_info=True
    )
    assert f'loc("{__file__}":{GATHER_LINE}:' in staged.ir("inter")


def test_verifier_diagnostic_points_at_the_users_line() -> None:
    """A diagnostic about an op names the Python line that traced it, not a line of IR."""
    module = frontend.trace(_layer, SHAPES).instantiate()
    ops = _ops(module)
    # Break the program through the bindings: sum a node-wise value onto nodes.
    ops["hector_inter.sum_to_dst"].operands[1] = module.body.operations[0].arguments[1]
    with pytest.raises(PipelineError) as err:
        compiler.run_stages(module, "cpu", until="inter")
    diag = err.value.diagnostics[0]
    assert (diag.file, diag.line) == (__file__, SUM_LINE), diag


def _refuse(prefix: str) -> PassInfo:
    """A pass that fails at the first op whose name starts with ``prefix``, as a later check
    of that stage would."""

    def run(module_op: ir.Operation) -> None:
        found: list[ir.Operation] = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name.startswith(prefix):
                found.append(op)
                return ir.WalkResult.INTERRUPT
            return ir.WalkResult.ADVANCE

        module_op.walk(visit)
        raise PassFailure(f"test: {found[0].name} refused", found[0].location)

    return PassInfo(f"test-refuse-{prefix}", "test only", run, {})


@pytest.mark.parametrize(
    ("stages", "prefix"),
    [
        ("convert-hector-inter-to-intra", "hector_intra."),
        ("convert-hector-inter-to-intra, convert-hector-intra-to-scf", "scf.for"),
    ],
)
def test_later_stage_diagnostic_points_at_the_users_line(stages: str, prefix: str) -> None:
    """After each conversion, a diagnostic about a lowered op still names the Python line."""
    info = _refuse(prefix)
    PASSES[info.name] = info
    try:
        module = frontend.trace(_layer, SHAPES).instantiate()
        with pytest.raises(PipelineError) as err:
            run_pipeline(module, f"{stages}, {info.name}", verify=False, reproducer=False)
    finally:
        del PASSES[info.name]
    diag = err.value.diagnostics[0]
    assert diag.message.startswith("test: ")
    assert diag.file == __file__, diag
    assert diag.line in (GATHER_LINE, SUM_LINE), diag


def test_compiling_leaves_the_traced_program_unchanged() -> None:
    traced = frontend.trace(_layer, SHAPES)
    before = traced.key
    compiler.run_stages(traced, "cpu", until="loops")
    assert traced.program.operation.get_asm(enable_debug_info=True) == before


def test_lowered_ops_keep_the_users_line() -> None:
    staged = compiler.run_stages(
        frontend.trace(_layer, SHAPES), "cpu", until="intra", debug_info=True
    )
    assert f'loc("{__file__}":{SUM_LINE}:' in staged.ir("intra")


def test_targets_live_in_one_table() -> None:
    assert {"cpu", "cuda"} <= set(targets.TARGETS)
    assert targets.target("cpu").compile.__qualname__ == "Target.compile"
    with pytest.raises(ValueError, match="use 'cpu' or 'cuda'"):
        hector.compile(_layer, target="tpu")
    with pytest.raises(ValueError, match="unknown target 'gpu'"):
        targets.target("gpu")  # PTX to read, not a target to run on
    assert not targets.target("gpu", runs=False).runs


def test_no_import_cycles() -> None:
    """scripts/import_cycles.py (run by CI) finds no cycle among Hector's modules."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "import_cycles.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
