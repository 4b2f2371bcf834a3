"""The ``hector`` command line's argument types (issue 39): every number bounded and finite,
every plot path one matplotlib can write, refused by the parser (exit 2, no traceback) before
any work starts; an internal error during a run is one clean line."""

from __future__ import annotations

import argparse

import pytest

from hector.tools import cli
from hector.tools import cli_args as _args
from hector_bench import gnn
from hector_bench.plot_args import PlotPath


def _subparsers(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """``(command words, parser)`` of every (sub)command under ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _subparsers(sub, (*prefix, name))


COMMANDS = list(_subparsers(cli._parser()))
OPTIONS = [
    (words, action)
    for words, sub in COMMANDS
    for action in sub._actions
    if action.option_strings and action.type is not None
]


def test_every_command_is_seen() -> None:
    names = {" ".join(w) for w, _ in COMMANDS}
    assert {"demo", "compile", "bench gnn", "bench minibatch", "bench feature-gather"} <= names
    assert {"bench offload", "bench gather", "bench import", "bench compile"} <= names
    assert {"bench placement", "bench offload-store", "bench train-over-forward"} <= names


@pytest.mark.parametrize(
    ("words", "action"), OPTIONS, ids=[f"{' '.join(w)} {a.dest}" for w, a in OPTIONS]
)
def test_every_typed_option_is_validated_and_states_its_bounds(words, action) -> None:
    """No option of any command takes a bare int or float (unbounded, nan, inf), and the
    accepted range is in its --help."""
    assert action.type not in (int, float), (words, action.option_strings)
    assert hasattr(action.type, "describe"), (words, action.option_strings)
    if action.help != argparse.SUPPRESS:
        assert action.type.describe() in (action.help or ""), (words, action.option_strings)


def test_every_plot_option_is_a_plot_path() -> None:
    plots = [(w, a) for w, sub in COMMANDS for a in sub._actions if a.dest in ("plot", "frontier")]
    assert plots
    for words, action in plots:
        assert isinstance(action.type, PlotPath), (words, action.option_strings)


def _bad_values(action) -> list[str]:
    t = action.type
    if isinstance(t, _args.IntRange):
        return [str(t.hi + 1), str(t.lo - 1), "99999999999999999999", "1.5", "x"]
    if isinstance(t, _args.FloatRange):
        return ["nan", "inf", "-inf", "1e999", "x"]
    if isinstance(t, _args.IntList):
        return [f"1,{t.item.hi + 1}", "", "x,1"]
    if isinstance(t, PlotPath):
        return ["plot.xyz", "plot", "/no/such/folder/plot.png"]
    if isinstance(t, _args.GpuChip):
        return ["sm_90z", "sm_999", "sm_10", "ampere", ""]
    raise AssertionError(f"untested type {t!r}")


@pytest.mark.parametrize(
    ("words", "action"), OPTIONS, ids=[f"{' '.join(w)} {a.dest}" for w, a in OPTIONS]
)
def test_out_of_range_values_exit_2_with_the_option_named(words, action, capsys) -> None:
    option = action.option_strings[-1]
    for value in _bad_values(action):
        with pytest.raises(SystemExit) as exc:
            cli._parser().parse_args([*words, f"{option}={value}"])
        assert exc.value.code == 2, (option, value)
        err = capsys.readouterr().err
        assert f"error: argument {'/'.join(action.option_strings)}: " in err, (value, err)
        assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--runs", "99999999999999999999"], "argument --runs: must be from 1 to 100_000"),
        (["--hidden", "100000000"], "argument --hidden: must be from 1 to 65536"),
        (["--max-peer-mem-gb", "nan"], "argument --max-peer-mem-gb: must be a finite number"),
        (["--plot", "p.xyz"], "argument --plot: cannot save a plot as 'xyz'"),
        (["--plot", "nowhere/p.png"], "argument --plot: folder 'nowhere' does not exist"),
    ],
)
def test_gnn_refuses_before_any_work(argv, message, monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    ran = []
    monkeypatch.setattr(gnn, "run_single", lambda args: ran.append(args) or 0)
    base = ["bench", "gnn", "--model", "rgcn", "--mode", "inference", "--dataset", "synthetic:aifb"]
    with pytest.raises(SystemExit) as exc:
        cli.main([*base, *argv])
    assert exc.value.code == 2
    assert f"hector bench gnn: error: {message}" in capsys.readouterr().err
    assert ran == []


def test_valid_values_still_parse(tmp_path) -> None:
    args = cli._parser().parse_args(
        ["bench", "gnn", "--runs", "3", "--scale", "0.5", "--max-peer-mem-gb", "1.5"]
        + ["--plot", str(tmp_path / "p.svg"), "--seed", "4294967295"]
    )
    assert (args.runs, args.scale, args.max_peer_mem_gb, args.seed) == (3, 0.5, 1.5, 2**32 - 1)
    args = cli._parser().parse_args(["bench", "minibatch", "--fanouts", " 10, -1 ", "--procs", "2"])
    assert (args.fanouts, args.procs) == ("10,-1", "2")
    args = cli._parser().parse_args(["compile", "--in-dim", str(2**31 - 1), "--dst-ratio", "-1"])
    assert (args.in_dim, args.dst_ratio) == (2**31 - 1, -1.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compile", "--model", "rgcn", "--in-dim", "0"], "argument --in-dim: must be from 1"),
        (["compile", "--model", "rgcn", "--etypes", str(2**31)], "argument --etypes: must be"),
        (["compile", "--dst-ratio", "nan"], "argument --dst-ratio: must be a finite number"),
        (["demo", "--runs", "0"], "argument --runs: must be from 1 to 100_000, got 0"),
    ],
)
def test_other_commands_refuse_bad_numbers(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_offload_compiled_refuses_heads_that_do_not_divide_the_width(capsys) -> None:
    argv = ["bench", "offload-compiled", "--model", "hf-t5", "--width", "100", "--heads", "16"]
    assert cli.main(argv) == 2  # before any process starts
    assert "error: --width must be divisible by --heads" in capsys.readouterr().err


def test_an_internal_error_in_a_bench_run_is_one_clean_line(monkeypatch, capsys) -> None:
    def boom(args):
        raise RuntimeError("something broke\nwith a second line\nand a third")

    monkeypatch.setattr(gnn, "run_single", boom)
    monkeypatch.delenv("HECTOR_DEBUG", raising=False)
    argv = ["bench", "gnn", "--model", "rgcn", "--mode", "inference", "--dataset", "synthetic:aifb"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        "hector: internal error: RuntimeError: something broke "
        "(set HECTOR_DEBUG=1 for the traceback)\n"
    )
    monkeypatch.setenv("HECTOR_DEBUG", "1")
    with pytest.raises(RuntimeError, match="something broke"):
        cli.main(argv)
