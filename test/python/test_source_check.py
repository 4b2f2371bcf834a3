"""Input MLIR text that would crash MLIR's parser is refused before it parses
(``hector.passes.source_check``), on every path that parses text from outside.

What would crash runs in a subprocess: a regression then fails the test instead of killing
pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hector.passes import source_check
from hector.passes.diagnostics import InvalidPipelineError
from hector.passes.pipeline import build_pass_manager, parse_pipeline
from hector.passes.source_check import MAX_NESTING, UnsafeSourceError, check_source

TEST_ROOT = Path(__file__).resolve().parent.parent


def _messages(text: str, **kwargs: bool) -> list[tuple[int, int, str]]:
    return [(p.line, p.column, p.message) for p in source_check.source_problems(text, **kwargs)]


# ---- nesting and size ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opener", "closer"),
    [("[", "]"), ("(", ")"), ("{", "}"), ("<", ">"), ("module {", "}"), ("loc(", ")")],
)
def test_nesting_deeper_than_the_bound_is_refused_at_the_first_bracket_beyond_it(
    opener: str, closer: str
) -> None:
    text = "\n" + opener * (MAX_NESTING + 5) + closer * (MAX_NESTING + 5)
    [(line, column, message)] = _messages(text)
    assert (line, column) == (2, len(opener) * (MAX_NESTING + 1))
    assert message.startswith(f"nesting deeper than {MAX_NESTING} levels")
    assert _messages(opener * MAX_NESTING + closer * MAX_NESTING) == []


def test_all_bracket_kinds_count_together() -> None:
    kinds = ["[", "(", "{", "<"]
    text = "".join(kinds[i % 4] for i in range(MAX_NESTING + 1))
    assert len(_messages(text)) == 1


def test_brackets_in_strings_comments_and_arrows_do_not_count() -> None:
    deep = "[" * (MAX_NESTING * 2)
    text = f'// {deep}\nmodule attributes {{a.s = "{deep}"}} {{}}\n'
    text += "func.func @f() -> (i32) {\n" + "%0 = arith.constant 0 : i32 -> \n" * 300 + "}\n"
    assert _messages(text) == []


def test_every_lit_test_is_well_within_the_nesting_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound is generous for real IR: no test input nests even a tenth as deep."""
    monkeypatch.setattr(source_check, "MAX_NESTING", MAX_NESTING // 10)
    for path in sorted(TEST_ROOT.rglob("*.mlir")):
        problems = _messages(path.read_text(errors="replace"), allow_unregistered=True)
        assert not [m for _, _, m in problems if m.startswith("nesting deeper")], path


def test_input_larger_than_the_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_check, "MAX_SOURCE_BYTES", 64)
    [(line, column, message)] = _messages("module {}\n" * 10)
    assert (line, column) == (1, 1)
    assert message == "input is 100 bytes; at most 64 bytes of MLIR are accepted"


# ---- resource blobs ------------------------------------------------------------------------


def _blob(value: str, key: str = "r") -> str:
    return f'module {{}}\n{{-# dialect_resources: {{ builtin: {{ {key}: "{value}" }} }} #-}}\n'


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0x0000000001020304", "has alignment 0"),
        ("0x0300000001", "has alignment 3"),
        ("0x00000080aa", "has alignment 2147483648"),
        ("0x04000000zz", 'must be a hex string "0x..." of whole bytes'),
        ("0x040000000", 'must be a hex string "0x..." of whole bytes'),
        ("04000000", 'must be a hex string "0x..." of whole bytes'),
        ("0x0400", "must start with its alignment (4 bytes)"),
    ],
)
def test_bad_resource_blobs_are_refused_at_the_blob(value: str, problem: str) -> None:
    [(line, column, message)] = _messages(_blob(value))
    assert (line, column) == (2, 40)
    assert message.startswith("resource blob 'r' ")
    assert problem in message


@pytest.mark.parametrize(
    "value", ["0x0400000001020304", "0x00000000", "0x01000000ff", "0x10000000"]
)
def test_good_resource_blobs_pass(value: str) -> None:
    assert _messages(_blob(value)) == []
    assert _messages(_blob(value, key='"quoted key"')) == []


def test_blob_checks_apply_to_dialect_resources_only() -> None:
    text = '{-# external_resources: { mlir_reproducer: { pipeline: "0x00" } } #-}'
    assert _messages(text) == []
    unclosed = '{-# dialect_resources: { builtin: { r: "0x00000000ff" } }'
    assert "has alignment 0" in _messages(unclosed)[0][2]


# ---- generic op names ----------------------------------------------------------------------

_NO_OP_PART = "operation name 'gpu' has no op part (expected 'dialect.op')"


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ('module {} "gpu"() : () -> ()', 11),
        ('func.func @f() { return "gpu"() : () -> () }', 25),
        ('func.func @f() { %0 = arith.constant 0 : index "gpu"() : () -> ()\nreturn }', 48),
        ('module { "gpu"<{}>() : () -> () }', 10),
        ('module { "gpu" // comment\n () : () -> () }', 10),
        ('"g\\70u"() : () -> ()', 1),
        ('func.func @f() -> (i32) { "gpu"() : () -> () }', 27),
    ],
)
def test_op_names_without_op_part_are_refused_wherever_an_op_starts(text: str, column: int) -> None:
    [(line, col, message)] = _messages(text)
    assert (line, col, message) == (1, column, _NO_OP_PART)
    assert _messages(text, allow_unregistered=True) == []


@pytest.mark.parametrize(
    "text",
    [
        'module {} loc("gpu"("a.py":1:2))',
        'module {} loc(callsite("gpu"("a.py":1:2) at "x"("b.py":1:1)))',
        'module {} loc(fused["gpu"("a.py":1:2), "x"("b.py":1:1)])',
        '#loc = loc("gpu"("a.py":1:2))\nmodule {} loc(#loc)',
        'func.func @"gpu"() { return }',
        'func.func @f() { emitc.call_opaque "gpu"() : () -> ()\nreturn }',
        'module attributes {a.b = "gpu", a.c = ["gpu"]} {}',
        'module attributes {a.b = #a<"gpu"(1)>} {}',
    ],
)
def test_location_names_symbols_callees_and_attribute_strings_are_not_ops(text: str) -> None:
    assert _messages(text) == []


# ---- every parse of outside text is guarded ------------------------------------------------

_DEEP = "module {" * 10_000 + "}" * 10_000
_BLOB = _blob("0x0000000001020304")
_AFTER_BRACE = 'module {} "gpu"() : () -> ()\n'


def _run(code: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_plan_load_refuses_crashing_plan_files(tmp_path: Path) -> None:
    for i, text in enumerate((_DEEP, _BLOB, _AFTER_BRACE)):
        (tmp_path / f"plan{i}.mlir").write_text(text)
    result = _run(
        f"""
        from hector.offload.plan import Plan, PlanError
        for i in range(3):
            try:
                Plan.load({str(tmp_path)!r} + f"/plan{{i}}.mlir")
            except PlanError as err:
                print(str(err).replace(chr(10), " "))
        """
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "not a valid placement plan" in lines[0]
    assert "nesting deeper than" in lines[0]
    assert "resource blob 'r' has alignment 0" in lines[1]
    assert "operation name 'gpu' has no op part" in lines[2]


def test_torch_text_parse_refuses_crashing_input() -> None:
    result = _run(
        """
        import sys
        from hector.lowering.cpu.torch_linalg import LinalgLoweringError, lower_torch_text
        try:
            lower_torch_text(sys.stdin.read(), display="in.mlir")
        except LinalgLoweringError as err:
            print(err.locations)
        """,
        _BLOB,
    )
    assert result.returncode == 0, result.stderr
    assert "in.mlir:2:40: error: resource blob 'r' has alignment 0" in result.stdout


def test_hector_compile_on_text_refuses_crashing_input() -> None:
    result = _run(
        """
        import sys
        from mlir import ir
        from hector.program import instantiate
        try:
            instantiate(sys.stdin.read())
        except ir.MLIRError as err:
            print(err)
        """,
        _DEEP,
    )
    assert result.returncode == 0, result.stderr
    assert '"-":1:2056: nesting deeper than 256 levels' in result.stdout


def test_check_source_names_the_file() -> None:
    with pytest.raises(UnsafeSourceError) as info:
        check_source(_AFTER_BRACE, "x.mlir")
    assert info.value.lines() == [f"x.mlir:1:11: error: {_NO_OP_PART}"]


# ---- property: nesting and blobs never crash hector-opt ------------------------------------

_ATTR_LEVELS = st.sampled_from([("[", "]"), ("{a = ", "}"), ("[1, ", ", 2]")])
_TYPE_LEVELS = st.sampled_from([("tuple<", ">"), ("tuple<i32, ", ">"), ("!llvm.array<2 x ", ">")])


@st.composite
def _nested_inputs(draw: st.DrawFn) -> str:
    depth = draw(st.integers(1, 2 * MAX_NESTING + 50))
    if draw(st.booleans()):
        levels = draw(st.lists(_ATTR_LEVELS, min_size=depth, max_size=depth))
        inner = "".join(o for o, _ in levels) + "0" + "".join(c for _, c in reversed(levels))
        return f"module attributes {{a.b = {inner}}} {{}}\n"
    levels = draw(st.lists(_TYPE_LEVELS, min_size=depth, max_size=depth))
    inner = "".join(o for o, _ in levels) + "i32" + "".join(c for _, c in reversed(levels))
    return f"func.func private @f(%a: {inner})\n"


@st.composite
def _blob_inputs(draw: st.DrawFn) -> str:
    alignment = draw(st.sampled_from([0, 1, 3, 8, 4096, 8192, 2**31, 2**32 - 1]))
    data = draw(st.binary(max_size=16))
    return _blob("0x" + alignment.to_bytes(4, "little").hex() + data.hex())


_PARSE_ALL = """
import json, sys
from mlir import ir
from hector.dialects import make_context
from hector.passes.module_text import parse_module
for i, text in enumerate(json.load(sys.stdin)):
    print(i, flush=True)  # the last index printed names the input that crashed
    try:
        parse_module(text, make_context())
    except ir.MLIRError:
        pass
print("done")
"""


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(_nested_inputs(), _blob_inputs()), min_size=12, max_size=12))
def test_random_nesting_and_blobs_never_crash_the_parser(texts: list[str]) -> None:
    for text in texts:
        deep = [m for _, _, m in _messages(text) if m.startswith("nesting deeper")]
        assert bool(deep) == (_depth(text) > MAX_NESTING)
    result = subprocess.run(
        [sys.executable, "-c", _PARSE_ALL],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = result.stdout.split()[-1:]
    crashed = texts[int(last[0])] if last and last[0].isdigit() else ""
    assert result.returncode == 0, f"exit {result.returncode} on input: {crashed}"
    assert result.stdout.endswith("done\n")


def _depth(text: str) -> int:
    depth = deepest = 0
    for ch in text.replace("->", ""):
        depth += ch in "([{<"
        depth -= ch in ")]}>"
        deepest = max(deepest, depth)
    return deepest


# ---- pipelines -----------------------------------------------------------------------------


def test_deeply_nested_pipeline_is_an_error_not_a_recursion_error() -> None:
    with pytest.raises(InvalidPipelineError, match="nested deeper than 32 levels"):
        parse_pipeline("builtin.module(" * 1000 + ")" * 1000)


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        ("nvvm-attach-target{O=99}", "option 'O' must be an integer from 0 to 3, got '99'"),
        ("nvvm-attach-target{triple=}", "option 'triple' must be an NVPTX triple"),
        ("gpu-module-to-binary{format=}", "option 'format' must be one of offloading"),
        ("func.func(canonicalize{max-iterations=-7})", "'max-iterations' must be an integer >= -1"),
        ("convert-func-to-llvm{index-bitwidth=7}", "option 'index-bitwidth' must be one of 0"),
        ("async-parallel-for{num-workers=0}", "option 'num-workers' must be -1 or an integer >= 1"),
        ("inline{max-iterations=3}", "options of upstream pass 'inline' are not accepted"),
    ],
)
def test_upstream_options_mlir_would_assert_on_are_refused(pipeline: str, message: str) -> None:
    from hector.dialects import make_context

    with pytest.raises(InvalidPipelineError, match=message.replace("(", r"\(")):
        build_pass_manager(parse_pipeline(pipeline), make_context())


def test_upstream_options_in_hectors_own_pipelines_are_accepted() -> None:
    from hector.dialects import make_context
    from hector.passes.registry import load_all

    load_all()  # registers the named pipelines

    for name in ("hector-lower-cpu", "hector-lower-ptx", "hector-lower-cuda"):
        build_pass_manager(parse_pipeline(name), make_context())


# ---- elements attributes and numeric literals ----------------------------------------------

# Complex literals on a non-complex element type make MLIR assert in DenseElementsAttr::get
# (one value too many per literal); each case ran as an abort before the check.
_ABORTING_ELEMENTS = [
    "dense<(1, 2)> : tensor<1xi32>",
    "dense<(1, 2)> : tensor<1xindex>",
    "dense<(1.0, 2.0)> : tensor<1xf32>",
    "dense<(0x1, 0x2)> : tensor<1xf32>",
    "dense<(1, 2)> : tensor<i32>",
    "dense<(1, 2)> : tensor<2x2xi32>",
    "dense<[(1, 2)]> : tensor<1xi32>",
    "dense<[(1, 2), 3]> : tensor<2xi32>",
    "dense<[[(1, 2)]]> : tensor<1x1xi32>",
    "dense<[(true, false)]> : tensor<1xi1>",
    "dense<(1, 2)> : vector<1xindex>",
    'dense<("a", "b")> : tensor<1x!llvm.ptr>',
    "sparse<[[0]], [(1, 2)]> : tensor<2xi32>",
    "sparse<[[0]], (1, 2)> : tensor<2xi32>",
]

# Elements attributes MLIR parses (or rejects with a diagnostic): left alone.
_ACCEPTED_ELEMENTS = [
    "dense<(1, 2)> : tensor<2xi32>",  # MLIR reads this one as the two values
    "dense<(1, 2)> : tensor<1x2xi32>",
    'dense<("a", "b")> : tensor<2x!llvm.ptr>',
    "dense<[1, 2, 3]> : tensor<2xi32>",
    "dense<[[1], [2, 3]]> : tensor<2x2xi32>",
    "dense<5> : tensor<1xi1>",
    'dense<"0x0102"> : tensor<1xi32>',
    "dense<> : tensor<0xi32>",
    "dense<1> : tensor<?xi32>",
    "dense<1> : tensor<4xindex>",
]


# Elements attributes of complex type: MLIR parses them, but its Python bindings abort the
# process when a pass reads them (nanobind's "Can't cast unknown element type"): refused.
_COMPLEX_TYPED_ELEMENTS = [
    "dense<(1, 2)> : tensor<1xcomplex<i32>>",
    "dense<[(1.0, 2.0), (3.0, 4.0)]> : tensor<2xcomplex<f32>>",
    'dense<"0x0000803F00000040"> : tensor<1xcomplex<f32>>',
    "sparse<[[0]], [(1, 2)]> : tensor<2xcomplex<i32>>",
]


def _module_attr(attr: str) -> str:
    return f"module attributes {{fuzz.a = {attr}}} {{}}\n"


@pytest.mark.parametrize("attr", _ABORTING_ELEMENTS)
def test_complex_literals_on_non_complex_elements_are_refused_at_the_attribute(attr: str) -> None:
    keyword = attr.partition("<")[0]
    [(line, column, message)] = _messages(_module_attr(attr))
    assert (line, column) == (1, _module_attr(attr).index(keyword) + 1)
    assert "complex literal '(re, im)'" in message
    assert "element type is not complex" in message


@pytest.mark.parametrize("attr", _COMPLEX_TYPED_ELEMENTS)
def test_elements_attributes_of_complex_type_are_refused_at_the_attribute(attr: str) -> None:
    keyword = attr.partition("<")[0]
    [(line, column, message)] = _messages(_module_attr(attr))
    assert (line, column) == (1, _module_attr(attr).index(keyword) + 1)
    assert "complex element type are not supported" in message


@pytest.mark.parametrize(
    "text",
    [
        "module attributes {a = array // a comment\n <index: 1>} {}\n",
        "!t // a comment\n = index\nmodule attributes {a = array<!t: 1>} {}\n",
        "!t = // a comment\n index\nmodule attributes {a = array<!t: 1>} {}\n",
        "module attributes {a = array<\n// a comment\n index: 1>} {}\n",
    ],
)
def test_comments_between_tokens_do_not_hide_what_aborts_the_parser(text: str) -> None:
    [(_, _, message)] = _messages(text)
    assert "cannot hold 'index' elements" in message


@pytest.mark.parametrize("attr", _ACCEPTED_ELEMENTS)
def test_other_elements_attributes_pass(attr: str) -> None:
    assert _messages(_module_attr(attr)) == []


def test_complex_element_types_are_found_through_aliases_and_context() -> None:
    text = textwrap.dedent(
        """\
        !c = complex<f32>
        !t = tensor<1x!c>
        memref.global "private" @x : memref<1xcomplex<f32>> = dense<(1.0, 2.0)>
        memref.global "private" @y : memref<1xf32> = dense<(1.0, 2.0)>
        module attributes {a = dense<(1.0, 2.0)> : !t, b = dense<(1.0, 2.0)> : tensor<1x!c>} {}
        """
    )
    found = [(line, column, "literal" in m) for line, column, m in _messages(text)]
    # x, a and b are of complex type (refused as such), y holds a complex literal.
    assert found == [(3, 55, False), (4, 46, True), (5, 24, False), (5, 52, False)]


def test_elements_attributes_never_abort_the_parser() -> None:
    """Every case through Hector's parse, in one subprocess: refused ones raise a located
    MLIRError, and an abort (a missed case) fails the test instead of killing pytest."""
    result = _run(
        """
        import json, sys
        from mlir import ir
        from hector.dialects import make_context
        from hector.passes.module_text import parse_module
        for attr in json.loads(sys.stdin.read()):
            text = "module attributes {fuzz.a = " + attr + "} {}"
            try:
                parse_module(text, make_context())
                print("parsed")
            except ir.MLIRError as err:
                print("refused" if "complex" in str(err) else "error")
        """,
        json.dumps(_ABORTING_ELEMENTS + _COMPLEX_TYPED_ELEMENTS + _ACCEPTED_ELEMENTS),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    outcomes = result.stdout.split()
    refused = len(_ABORTING_ELEMENTS) + len(_COMPLEX_TYPED_ELEMENTS)
    assert outcomes[:refused] == ["refused"] * refused
    assert "refused" not in outcomes[refused:]


@pytest.mark.parametrize(
    ("literal", "column"),
    [
        ("9" * 100_000 + " : i64", 29),
        ("-" + "9" * 513 + " : i64", 30),
        ("1." + "9" * 600 + " : f64", 29),
        ("1.0e+" + "9" * 600 + " : f64", 34),
        ("0x" + "F" * 600 + " : i64", 29),
        ("dense<" + "9" * 600 + "> : tensor<1xi64>", 35),
        ("affine_map<(d0) -> (d0 + " + "9" * 600 + ")>", 54),
    ],
)
def test_numeric_literals_longer_than_the_bound_are_refused(literal: str, column: int) -> None:
    [(line, col, message)] = _messages(_module_attr(literal))
    assert (line, col) == (1, column)
    assert message.startswith("numeric literal of ")
    assert "at most 512" in message


@pytest.mark.parametrize(
    "literal",
    [
        "9" * source_check.MAX_NUMBER_LENGTH + " : i64",
        "dense<1> : tensor<" + "1x" * 300 + "f32>",  # a shape is not one number
        "@x" + "9" * 600,
        "a" + "9" * 600,
        '"' + "9" * 600 + '"',
        '"a ' + "9" * 600 + '"',
        'dense<"0x' + "AB" * 400 + '"> : tensor<400xi8>',
        "1 : i64} {} // " + "9" * 600 + "\nmodule attributes {b = 1",
    ],
)
def test_long_shapes_names_and_strings_are_not_numbers(literal: str) -> None:
    assert [m for m in _messages(_module_attr(literal)) if "numeric" in m[2]] == []


def test_number_scan_is_linear() -> None:
    import time

    def seconds(text: str) -> float:
        start = time.perf_counter()
        source_check.source_problems(text)
        return time.perf_counter() - start

    for text in ("9" * 2_000_000, "+1" * 1_000_000, "1234567, " * 200_000):
        assert seconds(text) < 1.0
