"""The ``hector`` command: demo, compile, and errors without tracebacks."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from _fresh_python import run_python

from hector.targets import TARGETS
from hector.tools import cli

RGCN_SMALL = ["--nodes", "60", "--edges", "300", "--etypes", "3", "--runs", "2"]


def _hector(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hector.tools.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_demo_runs_and_checks_correctness() -> None:
    r = _hector("demo", *RGCN_SMALL, "--in-dim", "8", "--out-dim", "4")
    assert r.returncode == 0, r.stderr
    assert "correctness: OK" in r.stdout
    assert "pyg RGCNConv" in r.stdout
    assert "GPU: 4 kernels emitted as PTX for sm_90" in r.stdout


def test_demo_bad_sizes() -> None:
    r = _hector("demo", "--nodes", "0")
    assert r.returncode == 2  # refused by the parser, before any work (issue 39)
    assert "hector demo: error: argument --nodes: must be from 1 to 100_000_000, got 0" in r.stderr
    assert "Traceback" not in r.stderr


def test_compile_emits_each_stage(capsys: pytest.CaptureFixture[str]) -> None:
    # In this process (as test_compile_emits_the_cuda_host_stage): the command line as a
    # process of its own is test_compile_malformed_input's and the others' with _hector.
    expect = {
        "inter": '"hector_inter.sum_to_dst"',
        "intra": '"hector_intra.traversal_template"',
        "loops": "scf.for",
        "llvm": "llvm.func @_mlir_ciface_rgcn_layer",
        "gpu": "gpu.launch_func",
        "ptx": ".visible .entry rgcn_layer_5_gemm",
    }
    for stage, needle in expect.items():
        assert cli.main(["compile", "--model", "rgcn", "--emit", stage]) == 0, stage
        assert needle in capsys.readouterr().out, stage


def _compile_option(dest: str) -> argparse.Action:
    sub = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    return next(a for a in sub.choices["compile"]._actions if a.dest == dest)


def test_emit_choices_are_the_targets_stages() -> None:
    """``--target T --emit`` takes ``inter`` and T's stages, read from the target's one list;
    ``--emit`` offers every stage of the printable targets, and ``--target`` those targets."""
    for target in cli.EMIT_TARGETS:
        assert cli.emit_stages(target) == ("inter", *(s.name for s in TARGETS[target].stages))
    every = [s for t in cli.EMIT_TARGETS for s in cli.emit_stages(t)]
    assert _compile_option("emit").choices == list(dict.fromkeys(every))
    assert _compile_option("target").choices == list(cli.EMIT_TARGETS)
    # Without --target, a stage picks the first target that has it.
    assert [cli.emit_target(None, s) for s in ("intra", "loops", "ptx", "host")] == [
        "cpu",
        "cpu",
        "gpu",
        "cuda",
    ]


@pytest.mark.parametrize(("target", "stage"), [("cpu", "ptx"), ("gpu", "loops"), ("cuda", "llvm")])
def test_emit_of_a_stage_the_target_lacks_names_its_stages(
    target: str, stage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["compile", "--model", "rgcn", "--target", target, "--emit", stage]) == 1
    stages = ", ".join(cli.emit_stages(target))
    want = f"error: target '{target}' has no stage '{stage}'; its stages: {stages}\n"
    assert capsys.readouterr().err == want


def test_compile_emits_the_cuda_host_stage(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compile", "--model", "rgcn", "--emit", "host", "--chip", "sm_80"]) == 0
    host = capsys.readouterr().out
    assert "llvm.func @rgcn_layer" in host
    assert "llvm.call @mgpuMemAlloc" in host  # MLIR's CUDA runtime wrappers
    assert "gpu.launch_func" in host  # on LLVM values; a launch when translated
    assert "sm_80" in host  # the PTX of --chip, embedded


def test_compile_malformed_input() -> None:
    r = _hector("compile", "-", "--emit", "intra", stdin="func.func @f( {\n")
    assert r.returncode == 1
    assert "<stdin>:1:14: error:" in r.stderr
    assert "Traceback" not in r.stderr


def test_compile_verifier_error_points_into_the_input(tmp_path) -> None:
    bad = tmp_path / "bad.mlir"
    bad.write_text(
        "func.func @f(%g: !hector_inter.graph, %x: tensor<?x4xf32>) -> tensor<?x4xf32> {\n"
        '  %0 = "hector_inter.sum_to_dst"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) '
        "-> tensor<?x4xf32>\n"
        '  %1 = "hector_inter.gather_src"(%g, %x) : (!hector_inter.graph, tensor<?x4xf32>) '
        "-> tensor<?x4xf32>\n"
        "  return %1 : tensor<?x4xf32>\n}\n"
    )
    r = _hector("compile", str(bad), "--emit", "intra")
    assert r.returncode == 1
    assert f"{bad}:3:8: error: gathered features must be node-wise, but it is edge-wise" in r.stderr
    assert "Traceback" not in r.stderr
    assert "hector-repro" not in r.stderr  # the user's file is the reproducer


def test_compile_missing_file() -> None:
    r = _hector("compile", "/nonexistent/x.mlir")
    assert r.returncode == 1
    assert "cannot open input file" in r.stderr


def test_compile_debug_info_points_at_the_model_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--model`` programs are traced: with ``--debug-info`` every op names its Python line."""
    import inspect

    from hector import models

    assert cli.main(["compile", "--model", "rgcn", "--emit", "intra", "--debug-info"]) == 0
    first = inspect.getsourcelines(models._rgcn_layer)[1]
    templates = [ln for ln in capsys.readouterr().out.splitlines() if '"hector_intra.' in ln]
    assert templates
    for ln in templates:
        assert f'loc("{models.__file__}":' in ln, ln
        line = int(ln.rsplit(f'loc("{models.__file__}":', 1)[1].split(":")[0])
        assert first < line <= first + 5, ln  # a line of the layer's body
    assert cli.main(["compile", "--model", "rgcn", "--emit", "intra"]) == 0
    plain = capsys.readouterr().out
    assert '"hector_intra.' in plain
    assert ' loc("' not in plain


def test_bench_without_the_benchmarks_says_how_to_install_them() -> None:
    # hector_bench made unimportable, as where the benchmarks are not installed.
    code = (
        "import sys; sys.modules['hector_bench'] = None\n"
        "from hector.tools.cli import main\n"
        "sys.exit(main(['bench', 'gnn', '--model', 'rgcn']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "pip install -e '.[bench]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bench_plot_needs_matplotlib(tmp_path) -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from hector.tools.cli import main\n"
        f"sys.exit(main(['bench', 'gather', '--plot', {str(tmp_path / 'p.png')!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "plots need matplotlib" in proc.stderr


def test_a_bad_environment_setting_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value Hector cannot use in one of its environment variables (here the memory limit
    every graph and layer is checked against) is the user's error, said in one line: exit
    status 1, no "internal error", before anything is built."""
    monkeypatch.setenv("HECTOR_MEMORY_LIMIT", "lots")
    assert cli.main(["demo"]) == 1
    err = capsys.readouterr().err
    assert err == "error: HECTOR_MEMORY_LIMIT must be a byte count such as 8G, got 'lots'\n"


def test_a_command_line_imports_only_the_benchmark_it_names() -> None:
    """In a fresh process: the parser of ``hector compile`` and of ``hector bench --help``
    imports no benchmark module (some import torch: seconds before any work); ``hector bench
    gnn`` imports ``gnn``'s alone; the whole tree (no command line) has every benchmark's
    arguments."""
    code = (
        "import sys\n"
        "from hector.tools import cli\n"
        "import hector_bench\n"
        "before = set(sys.modules)\n"
        "cli._parser(['compile', 'x.mlir'])\n"
        "cli._parser(['bench', '--help'])\n"
        "print(sorted(m for m in set(sys.modules) - before if m.startswith('hector_bench.')))\n"
        "cli._parser(['bench', 'gnn', '--model', 'rgcn'])\n"
        "print('hector_bench.gnn' in sys.modules, 'hector_bench.offload' in sys.modules)\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "True False"], proc.stdout
    sub = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    bench = next(
        a for a in sub.choices["bench"]._actions if isinstance(a, argparse._SubParsersAction)
    )
    assert all(len(p._actions) > 1 for p in bench.choices.values())  # beyond --help
