"""A bundle's plan is validated completely before anything runs (issue 39).

A small hand-written training bundle (three host functions, four kernels, a temporary, a view,
scalars, memsets and a copy) is loaded and run through the fake CUDA driver on CPU tensors. Its
``plan.json`` is then broken on purpose — by explicit cases (each failure the adversarial round
found) and by a derandomized hypothesis fuzzer that mutates the plan's JSON tree and its text —
and every outcome must be a :class:`BundleError` naming what is wrong (or a run, when the
mutation left a valid plan), with no kernel launched and no buffer allocated on a failure.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from _fake_driver import FakeDriver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hector
from hector.runtime import bundle as rb

N, E, R, F = 6, 10, 2, 4

_DTYPES = {torch.int32: "i32", torch.int64: "i64", torch.float32: "f32"}


def _graph() -> hector.HeteroGraph:
    return hector.random_graph(N, E, R, seed=1)


def _ptx() -> str:
    """Four entries with the parameter counts the plan's launches expand to."""
    counts = {"k_fwd": 23, "k_view": 5, "k_train": 23, "k_bwd": 21}
    out = [".version 8.0", ".target sm_90", ".address_size 64", ""]
    for name, n in counts.items():
        out.append(f".visible .entry {name}(")
        out += [f"\t.param .u64 {name}_p{i}," for i in range(n - 1)] + [
            f"\t.param .u64 {name}_p{n - 1}"
        ]
        out += [")", "{", "\tret;", "}", ""]
    return "\n".join(out)


def _plan() -> dict[str, Any]:
    """A valid plan: ``f`` (forward), ``f_train`` and ``f_backward`` of ``x [N, F]`` and a
    per-edge-type weight ``w [R, F]``."""
    g = _graph()
    graph = [{"shape": [None, *a.shape[1:]], "dtype": _DTYPES[a.dtype]} for a in g.arrays()]
    x, w = len(graph), len(graph) + 1
    spec = {"x": {"shape": [None, F], "dtype": "f32"}, "w": {"shape": [R, F], "dtype": "f32"}}
    rows = ["dim", x, 0]

    def forward(kernel: str) -> dict[str, Any]:
        return {
            "args": [*graph, spec["x"], spec["w"], {"shape": [None, F], "dtype": "f32"}],
            "outputs": 1,
            "temps": [{"shape": [rows, F], "dtype": "f32"}],
            "steps": [
                {"op": "alloc", "temp": 0},
                {"op": "memset", "dst": {"temp": 0}, "value": float("-inf")},
                {
                    "op": "launch",
                    "kernel": kernel,
                    "grid": [["ceildivu", ["mul", rows, F], 64], 1, 1],
                    "block": [64, 1, 1],
                    "shared": 0,
                    "args": [
                        {"arg": x},
                        {"arg": w},
                        {"temp": 0},
                        {"index": rows},
                        {"f32": 0.5},
                    ],
                },
                {
                    "op": "launch",
                    "kernel": "k_view",
                    "grid": [1, 1, 1],
                    "block": [32, 2, 1],
                    "args": [{"temp": 0, "shape": [["mul", rows, F]]}],
                },
                {"op": "copy", "dst": {"arg": w + 1}, "src": {"temp": 0}},
                {"op": "free", "temp": 0},
            ],
        }

    backward = {
        "args": [
            *graph,
            spec["x"],
            spec["w"],
            {"shape": [None, F], "dtype": "f32"},
            {"shape": [None, F], "dtype": "f32"},
            {"shape": [R, F], "dtype": "f32"},
        ],
        "outputs": 2,
        "temps": [],
        "steps": [
            {"op": "memset", "dst": {"arg": w + 3}, "value": 0.0},
            {
                "op": "launch",
                "kernel": "k_bwd",
                "grid": [["ceildivu", rows, 32], 1, 1],
                "block": [32, 1, 1],
                "shared": 0,
                "args": [{"arg": w + 1}, {"arg": w + 2}, {"arg": w + 3}],
            },
        ],
    }
    result = {"result_kinds": ["node"], "result_shapes": [[None, F]], "grad_of": [], "num_saved": 0}
    return {
        "version": 1,
        "chip": "sm_90",
        "training": True,
        "abi": {
            "functions": {
                "f": result,
                "f_train": copy.deepcopy(result),
                "f_backward": {
                    "result_kinds": ["node", "weight"],
                    "result_shapes": [[None, F], [R, F]],
                    "grad_of": [0, 1],
                    "num_saved": 0,
                },
            },
            "name": "f",
            "result_kinds": ["node"],
            "arg_kinds": ["node", "weight"],
            "weight_slices": {"1": "etype"},
        },
        "functions": {"f": forward("k_fwd"), "f_train": forward("k_train"), "f_backward": backward},
    }


PTX = _ptx()
PLAN = _plan()


def _write(root: Path, plan: Any, ptx: str = PTX) -> Path:
    """Write a bundle directory (``plan`` as JSON, or as the given text or bytes)."""
    root.mkdir(parents=True, exist_ok=True)
    if isinstance(plan, str):
        plan = plan.encode()
    if not isinstance(plan, bytes):
        plan = json.dumps(plan, indent=1).encode()
    (root / rb.PLAN_FILE).write_bytes(plan)
    (root / rb.PTX_FILE).write_text(ptx)
    return root


def _run(root: Path) -> tuple[FakeDriver, list[rb.Event]]:
    """Load the bundle and run it as a user does: a forward, then a training step (forward and
    backward). A ``BundleError`` must come before anything of the failing call ran: no module
    loaded by a failing load, no step recorded and no kernel launched by a failing call."""
    driver = FakeDriver()
    events: list[rb.Event] = []
    try:
        fn = rb.load(root, driver)
    except rb.BundleError:
        assert not driver.launches
        assert not driver.loaded
        raise
    fn.events = events
    g = _graph()
    torch.manual_seed(0)
    x, w = torch.randn(N, F), torch.randn(R, F)

    def training_step() -> None:
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        fn(g, xs, ws).sum().backward()

    for call in (lambda: fn(g, x, w), training_step):
        before = (len(driver.launches), len(events))
        try:
            call()
        except rb.BundleError:
            assert (len(driver.launches), len(events)) == before
            raise
    return driver, events


def test_the_hand_written_bundle_runs(tmp_path: Path) -> None:
    driver, events = _run(_write(tmp_path / "ok", PLAN))
    kernels = [launch["function"][1] for launch in driver.launches]
    assert kernels == ["k_fwd", "k_view", "k_train", "k_view", "k_bwd"]
    assert driver.launches[0]["grid"] == (1, 1, 1)  # ceil(6 * 4 / 64)
    assert [e.op for e in events].count("alloc") == 2


# ---------------------------------------------------------------------------------------------
# Explicit regressions: each failure the adversarial round found
# ---------------------------------------------------------------------------------------------


def _id(value: Any) -> str:
    """A short test id: a case's text or pattern, cut."""
    return value[:40] if isinstance(value, str) else type(value).__name__


def _broken(tmp_path: Path, change: Callable[[dict[str, Any]], Any]) -> Path:
    plan = copy.deepcopy(PLAN)
    change(plan)
    return _write(tmp_path / "broken", plan)


def _refused(root: Path, match: str) -> None:
    with pytest.raises(rb.BundleError, match=match):
        _run(root)


def _fwd(plan: dict[str, Any]) -> dict[str, Any]:
    return plan["functions"]["f"]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        # a negative grid literal was silently skipped
        (
            lambda p: _fwd(p)["steps"][2]["grid"].__setitem__(0, -1),
            r"plan\.json: functions\.f\.steps\[2\]\.grid\[0\]: must be a positive int "
            r"\(at most 2147483647\), got -1",
        ),
        (
            lambda p: _fwd(p)["steps"][3]["block"].__setitem__(2, 0),
            r"functions\.f\.steps\[3\]\.block\[2\]: must be a positive int",
        ),
        (
            lambda p: _fwd(p)["steps"][3]["block"].__setitem__(0, 2048),
            r"block\[0\]: must be a positive int \(at most 1024\), got 2048",
        ),
        (
            lambda p: _fwd(p)["steps"][3]["block"].__setitem__(1, 64),
            r"steps\[3\]\.block: 2048 threads a block, over CUDA's 1024",
        ),
        # {"arg": -1} used the last argument (Python's negative indexing)
        (
            lambda p: _fwd(p)["steps"][2]["args"].__setitem__(0, {"arg": -1}),
            r"functions\.f\.steps\[2\]\.args\[0\]\.arg: must be an index into the function's "
            r"args \(0 to 16\), got -1",
        ),
        # "version": true was read as 1
        (
            lambda p: p.__setitem__("version", True),
            r"plan\.json: version: must be an int, got true",
        ),
        (lambda p: p.__setitem__("version", 1.0), r"version: must be an int, got 1\.0"),
        (lambda p: p.__setitem__("training", 1), r"training: must be true or false, got 1"),
        # KeyError
        (
            lambda p: _fwd(p)["steps"][2].pop("grid"),
            r"functions\.f\.steps\[2\]: missing key 'grid'",
        ),
        (lambda p: p["abi"].pop("name"), r"plan\.json: abi: missing key 'name'"),
        # IndexError
        (
            lambda p: _fwd(p)["steps"][1]["dst"].__setitem__("temp", 5),
            r"steps\[1\]\.dst\.temp: must be an index into the function's temps \(0 to 0\)",
        ),
        (
            lambda p: _fwd(p)["temps"][0]["shape"].__setitem__(0, ["dim", 14, 7]),
            r"temps\[0\]\.shape\[0\]\[2\]: must be an index into the dimensions of args\[14\]",
        ),
        (
            lambda p: p["abi"]["weight_slices"].__setitem__("9", "etype"),
            r"abi\.weight_slices\[\"9\"\]: key '9' must be an argument position below 2",
        ),
        (
            lambda p: p["abi"]["functions"]["f_backward"]["grad_of"].__setitem__(1, 5),
            r"abi\.functions\.f_backward: grad_of names an argument beyond the 2 inputs",
        ),
        # TypeError, AttributeError
        (lambda p: _fwd(p)["steps"][2].__setitem__("grid", "abc"), r"grid: must be a list"),
        (lambda p: p.__setitem__("functions", []), r"functions: must be an object, got \[\]"),
        (lambda p: _fwd(p)["steps"].__setitem__(0, 7), r"steps\[0\]: must be an object, got 7"),
        (
            lambda p: _fwd(p)["steps"][2]["grid"].__setitem__(0, ["pow", 2, 3]),
            r"grid\[0\]\[0\]: must be one of 'dim', 'add'",
        ),
        (
            lambda p: _fwd(p)["steps"][2]["args"][4].__setitem__("f32", "half"),
            r"args\[4\]\.f32: must be a float32 value, got \"half\"",
        ),
        # unknown keys, names that point nowhere, steps out of order
        (
            lambda p: _fwd(p)["steps"][2].__setitem__("cluster", [2, 1, 1]),
            r"steps\[2\]: unknown key 'cluster'",
        ),
        (lambda p: p.__setitem__("extra", 1), r"plan\.json: unknown key 'extra'"),
        (
            lambda p: _fwd(p)["steps"][2].__setitem__("kernel", "k_gone"),
            r"kernel: the plan launches 'k_gone', which kernels\.ptx does not hold",
        ),
        (
            lambda p: _fwd(p)["steps"][2]["args"].pop(),
            r"steps\[2\]\.args: kernel k_fwd takes 23 parameters; these arguments expand to 22",
        ),
        (lambda p: p["abi"].__setitem__("name", "g"), r"abi\.name: names 'g', which is not"),
        (
            lambda p: _fwd(p)["steps"].insert(0, {"op": "free", "temp": 0}),
            r"steps\[0\]\.temp: temps\[0\] is not allocated here",
        ),
        (
            lambda p: _fwd(p)["steps"].append({"op": "memset", "dst": {"temp": 0}, "value": 0}),
            r"steps\[6\]\.dst\.temp: temps\[0\] is used before its alloc or after its free",
        ),
        (
            lambda p: _fwd(p)["steps"][2]["grid"].__setitem__(0, ["divu", 6, 0]),
            r"grid\[0\]\[2\]: a size expression divides by zero",
        ),
        # sizes that do not fit int64, dtypes out of range
        (
            lambda p: _fwd(p)["temps"][0]["shape"].__setitem__(1, 2**63),
            r"temps\[0\]\.shape\[1\]: must be an int64, got 9223372036854775808",
        ),
        (
            lambda p: _fwd(p)["args"][15]["shape"].__setitem__(1, -3),
            r"args\[15\]\.shape\[1\]: must be a size >= 0 or null, got -3",
        ),
        (lambda p: p.__setitem__("chip", "sm_90; rm -rf"), r"chip: must be an architecture"),
        (
            lambda p: p["abi"]["functions"]["f"]["result_shapes"].__setitem__(0, [None, 9]),
            r"abi\.functions\.f\.result_shapes\[0\]: is not the shape of output 0",
        ),
        (
            lambda p: p["functions"]["f_backward"]["args"][16].__setitem__("dtype", "i64"),
            r"functions\.f_backward: its arguments are not f_train's inputs",
        ),
    ],
    ids=_id,
)
def test_a_malformed_plan_is_refused_at_load_naming_its_path(
    tmp_path: Path, change: Callable[[dict[str, Any]], Any], match: str
) -> None:
    root = _broken(tmp_path, change)
    with pytest.raises(rb.BundleError, match=match):
        rb.Bundle.load(root)
    _refused(root, match)


def _text(plan: dict[str, Any] = PLAN) -> str:
    return json.dumps(plan)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        # RecursionError
        ("[" * 100_000 + "]" * 100_000, r"plan\.json: nested 100000 deep; a plan nests at most 64"),
        (
            _text().replace('"temp": 0}', '"temp": ' + "[" * 80 + "0" + "]" * 80 + "}", 1),
            r"nested \d+ deep",
        ),
        (b"\xff" + _text().encode(), r"plan\.json: not UTF-8 \(byte 0"),
        (_text().encode()[:-40] + b"\xc3(" + _text().encode()[-40:], r"not UTF-8"),
        (_text().replace("0.5", "NaN"), r"NaN is refused"),
        (
            _text().replace('"block": [32', '"block": [Infinity'),
            r"block\[0\]: must be a positive int",
        ),
        (_text().replace("0.5", "1e400"), r"number 1e400 is out of range"),
        (_text().replace('"value": 0.0', '"value": ' + "9" * 5000), r"has more than 20 digits"),
        (
            _text().replace('"op": "alloc",', '"op": "alloc", "op": "free",', 1),
            r"functions\.f\.steps\[0\]: duplicate key 'op'",
        ),
        (_text().replace('"version": 1,', '"version": 1, "version": 2,'), r"version"),
        (_text()[: len(_text()) // 2], r"plan\.json: not JSON"),
        ("\ufeff" + _text(), r"not JSON"),
        ("[]", r"plan\.json: must be an object, got \[\]"),
        ('{"version": 2}', r"plan\.json is plan version 2; this executor reads version 1"),
    ],
    ids=_id,
)
def test_malformed_json_is_refused(tmp_path: Path, text: str | bytes, match: str) -> None:
    _refused(_write(tmp_path / "bad", text), match)


def test_negative_grid_at_run_time_is_an_error_before_anything_runs(tmp_path: Path) -> None:
    """A grid that evaluates below zero is refused (only a grid of 0 blocks is skipped), and
    the whole call is refused before its first allocation."""
    plan = copy.deepcopy(PLAN)
    for name in ("f", "f_train"):
        steps = plan["functions"][name]["steps"]
        steps[3]["grid"][0] = ["sub", 1, ["dim", 14, 0]]
    root = _write(tmp_path / "neg", plan)
    rb.Bundle.load(root)  # well-formed: the value depends on the arguments
    _refused(root, r"functions\.f\.steps\[3\]: kernel k_view has a negative grid \(-5, 1, 1\)")


def test_run_time_sizes_are_all_checked_before_anything_runs(tmp_path: Path) -> None:
    plan = copy.deepcopy(PLAN)
    _fwd(plan)["steps"][3]["args"][0]["shape"] = [["mul", ["dim", 14, 0], 5]]
    _refused(
        _write(tmp_path / "view", plan),
        r"steps\[3\]\.args\[0\]\.shape: a view \[30\] of a buffer \[6, 4\]",
    )
    plan = copy.deepcopy(PLAN)
    _fwd(plan)["temps"][0]["shape"] = [["dim", 14, 0], 3]
    _fwd(plan)["steps"][3]["args"][0]["shape"] = [["mul", ["dim", 14, 0], 3]]
    _refused(_write(tmp_path / "copy", plan), r"steps\[4\]: copies \[6, 3\] into \[6, 4\]")
    plan = copy.deepcopy(PLAN)
    _fwd(plan)["temps"][0]["shape"] = [["sub", 0, ["dim", 14, 0]], 4]
    _refused(
        _write(tmp_path / "size", plan), r"functions\.f\.temps\[0\]: a negative size \[-6, 4\]"
    )
    plan = copy.deepcopy(PLAN)
    _fwd(plan)["temps"][0]["shape"] = [["mul", ["dim", 14, 0], 2**62], 4]
    _refused(_write(tmp_path / "overflow", plan), r"beyond int64")


def test_expressions_refuse_negative_indexing_and_bools() -> None:
    shapes = [(7, 3), (5,)]
    with pytest.raises(rb.BundleError, match="malformed size expression"):
        rb.evaluate(["dim", -1, 0], shapes)
    with pytest.raises(rb.BundleError, match="malformed size expression"):
        rb.evaluate(["dim", True, 0], shapes)
    with pytest.raises(rb.BundleError, match="malformed size expression"):
        rb.evaluate(["add", 1, False], shapes)
    with pytest.raises(rb.BundleError, match="names no argument dimension"):
        rb.evaluate(["dim", 1, 1], shapes)


# ---------------------------------------------------------------------------------------------
# The bundle's files
# ---------------------------------------------------------------------------------------------


def test_files_must_be_the_bundles_own(tmp_path: Path) -> None:
    outside = _write(tmp_path / "outside", PLAN)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / rb.PTX_FILE).write_text(PTX)
    os.symlink(outside / rb.PLAN_FILE, linked / rb.PLAN_FILE)
    _refused(linked, r"plan\.json is a symbolic link; a bundle's files must be its own")
    ptx_link = _write(tmp_path / "ptx_link", PLAN)
    (ptx_link / rb.PTX_FILE).unlink()
    os.symlink(Path("..") / "outside" / rb.PTX_FILE, ptx_link / rb.PTX_FILE)
    _refused(ptx_link, r"kernels\.ptx is a symbolic link")
    directory = _write(tmp_path / "dir", PLAN)
    (directory / rb.PTX_FILE).unlink()
    (directory / rb.PTX_FILE).mkdir()
    _refused(directory, r"kernels\.ptx is not a regular file|cannot read the bundle")
    _refused(tmp_path / "missing", r"is not a bundle: it needs plan\.json and kernels\.ptx")


def test_file_sizes_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _write(tmp_path / "big", PLAN)
    monkeypatch.setattr(rb, "MAX_PTX_BYTES", len(PTX) - 1)
    _refused(root, rf"kernels\.ptx is larger than {len(PTX) - 1} bytes")
    monkeypatch.setattr(rb, "MAX_PLAN_BYTES", 100)
    _refused(root, r"plan\.json is larger than 100 bytes")


def test_ptx_must_be_utf8(tmp_path: Path) -> None:
    root = _write(tmp_path / "ptx", PLAN)
    (root / rb.PTX_FILE).write_bytes(PTX.encode() + b"\xff")
    _refused(root, r"kernels\.ptx is not UTF-8")


# ---------------------------------------------------------------------------------------------
# Fuzzing: mutations of the plan's tree and text
# ---------------------------------------------------------------------------------------------

#: Derandomized, no example database, no deadline (the machine is shared).
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=400,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in a JSON tree."""
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*path, i))
    return out


PATHS = _paths(PLAN)[1:]


def _replacements(old: Any) -> st.SearchStrategy[Any]:
    """Values to put in place of ``old``: other types, bools for ints, negatives, values out of
    range and of no int64, deep nesting."""
    values: list[Any] = [None, True, False, "x", "", 0.5, [], {}, 0, -1, 1, 3, 2**31, 2**63, 2**64]
    values += [-(2**63) - 1, ["dim", 0, 0], ["add", 1], {"arg": 0}, {"temp": 0}]
    deep: Any = 0
    for _ in range(70):
        deep = [deep]
    values.append(deep)
    if isinstance(old, int) and not isinstance(old, bool):
        values += [old + 1, old - 1, old + 1000, -old, bool(old), float(old), str(old), [old]]
    if isinstance(old, str):
        values += [old + "_", old.upper(), old[:-1]]
    if isinstance(old, list):
        values += [old[:-1], [*old, *old[-1:]], [old], list(reversed(old))]
    return st.sampled_from(values)


@st.composite
def mutated_plans(draw: st.DrawFn) -> Any:
    """The valid plan with one to three mutations of its tree."""
    plan = copy.deepcopy(PLAN)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent: Any = plan
        try:
            for k in path[:-1]:
                parent = parent[k]
            old = parent[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed it
        how = draw(st.sampled_from(["replace", "delete", "add_key", "duplicate"]))
        if how == "delete":
            del parent[path[-1]]
        elif how == "add_key" and isinstance(old, dict):
            old[draw(st.sampled_from(["shape", "op", "extra", "temp", "arg", "index"]))] = 0
        elif how == "duplicate" and isinstance(parent, list):
            parent.insert(path[-1], copy.deepcopy(old))
        else:
            parent[path[-1]] = draw(_replacements(old))
    return plan


@st.composite
def mutated_texts(draw: st.DrawFn) -> bytes:
    """The valid plan's text with one mutation: a byte replaced or inserted (invalid UTF-8
    included), a cut, a number or key swapped for NaN, Infinity, a huge literal or a duplicate."""
    text = _text().encode()
    at = draw(st.integers(0, len(text) - 1))
    how = draw(st.sampled_from(["byte", "insert", "cut", "number", "duplicate"]))
    if how == "byte":
        return text[:at] + bytes([draw(st.integers(0, 255))]) + text[at + 1 :]
    if how == "insert":
        chunk = draw(st.sampled_from([b"\xff", b"\xc3", b"[", b"{", b"}", b",", b'"', b"\\", b"-"]))
        return text[:at] + chunk + text[at:]
    if how == "cut":
        return text[:at]
    if how == "number":
        spots = [i for i in range(len(text)) if text[i : i + 1].isdigit()]
        i = draw(st.sampled_from(spots))
        literal = draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"9" * 30]))
        return text[:i] + literal + text[i + 1 :]
    keys = [i for i in range(len(text)) if text[i : i + 2] == b'{"']
    i = draw(st.sampled_from(keys)) + 1
    end = text.index(b",", i) if b"," in text[i:] else i
    return text[:i] + text[i : end + 1] + text[i:]


def _only_bundle_errors(root: Path, plan: Any) -> None:
    _write(root, plan)
    with contextlib.suppress(rb.BundleError):  # _run checks that nothing of it ran
        _run(root)


@FUZZ
@given(mutated_plans())
def test_fuzzed_plans_load_and_run_or_raise_only_bundle_errors(
    tmp_path: Path, plan: dict[str, Any]
) -> None:
    _only_bundle_errors(tmp_path / "fuzz", plan)


@FUZZ
@given(mutated_texts())
def test_fuzzed_plan_texts_load_and_run_or_raise_only_bundle_errors(
    tmp_path: Path, text: bytes
) -> None:
    _only_bundle_errors(tmp_path / "fuzz_text", text)


# ---------------------------------------------------------------------------------------------
# The GPU check's manifest (hector_bench.bundle_check): its bundle paths stay inside --bundles
# ---------------------------------------------------------------------------------------------

CASE = {
    "model": "rgcn",
    "dataset": "aifb",
    "scale": 0.02,
    "seed": 0,
    "in_dim": 8,
    "hidden": 8,
    "heads": 1,
    "bundle": "rgcn-aifb",
}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"bundle": "../elsewhere"}, r"must be a path inside"),
        ({"bundle": "/etc"}, r"must be a path inside"),
        ({"bundle": "a/../../b"}, r"must be a path inside"),
        ({"bundle": 3}, r"is not a directory name"),
        ({"bundle": "escape"}, r"leads out of .* through a symbolic link"),
        ({"model": "gcn"}, r"cases\[0\]\.model must be one of"),
        ({"seed": True}, r"cases\[0\]\.seed must be an int"),
        ({"heads": -1}, r"cases\[0\]\.heads must be an int from 1"),
        ({"scale": float("nan")}, r"cases\[0\]\.scale must be a positive number"),
    ],
    ids=str,
)
def test_check_manifest_is_validated(
    tmp_path: Path, change: dict[str, Any], match: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from hector_bench import bundle_check as bc

    root = tmp_path / "bundles"
    root.mkdir()
    os.symlink(tmp_path, root / "escape")
    manifest = {"version": 1, "chip": "sm_90", "cases": [{**CASE, **change}]}
    with pytest.raises(ValueError, match=match):
        bc.check_cases(manifest, str(root))
    (root / bc.CHECK_FILE).write_text(json.dumps(manifest))
    assert bc.run(["--bundles", str(root), "--out", str(tmp_path / "r.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert bc.check_cases({"cases": [CASE]}, str(root)) == [CASE]
