"""Unit tests for the pipeline machinery behind ``hector-opt`` and the compiler API: pipeline
text (``passes/pipeline.py``), its diagnostics (``passes/diagnostics.py``), the reproducer
(``passes/reproducer.py``) and the parse of input text (``passes/module_text.py``)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator

import pytest
from _fresh_python import run_python
from mlir import ir

from hector.dialects import make_context
from hector.passes.diagnostics import InvalidPipelineError, PipelineError, diagnostics_from_error
from hector.passes.module_text import parse_module, parse_module_file
from hector.passes.pipeline import (
    VERIFY_PASS,
    Stage,
    build_pass_manager,
    parse_options,
    parse_pipeline,
    run_pipeline,
    split_elements,
)
from hector.passes.registry import (
    PASSES,
    PIPELINES,
    TORCH_CONTEXT,
    Option,
    PassFailure,
    PassInfo,
    PipelineInfo,
    register_pass,
)

_TEST_PASSES = {
    "test-noop": PassInfo(
        "test-noop",
        "Does nothing (test only).",
        lambda op, width, exact, tag: None,
        {
            "width": Option(int, 4, "a number"),
            "exact": Option(bool, False, "a flag"),
            "tag": Option(str, "", "a word"),
        },
    ),
}

_MODULE = """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "hector_inter.unary"(%x) {fn = "relu", slope = 0.0 : f32} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


@pytest.fixture
def registry() -> Iterator[list[str]]:
    """Register throwaway passes and pipelines; remove them afterwards.

    Yields a list; names appended to it are removed from PASSES at the end too.
    """
    added_passes = list(_TEST_PASSES)
    PASSES.update(_TEST_PASSES)
    pipelines = {
        "test-pipe": PipelineInfo("test-pipe", "t", "test-noop{width=8}, canonicalize"),
        "test-outer": PipelineInfo("test-outer", "t", "builtin.module(cse, test-pipe)"),
        "test-loop": PipelineInfo("test-loop", "t", "test-noop, test-loop"),
    }
    PIPELINES.update(pipelines)
    extra: list[str] = []
    try:
        yield extra
    finally:
        for name in added_passes + extra:
            PASSES.pop(name, None)
        for name in pipelines:
            PIPELINES.pop(name, None)


def _describe(stages: list[Stage]) -> list[tuple[str, dict]]:
    return [(s.name, dict(s.options)) if s.is_hector else ("upstream", s.text) for s in stages]


# ---- parse_pipeline -------------------------------------------------------------------------


def test_split_elements_respects_nesting() -> None:
    text = 'a, b{x=1 y="p, q"}, func.func(c, d{z={1,2}}), e'
    assert split_elements(text) == ["a", 'b{x=1 y="p, q"}', "func.func(c, d{z={1,2}})", "e"]
    assert split_elements("  ") == []


@pytest.mark.parametrize("text", ["a, (b", "a)", "a,,b", "a, b,", 'a{x="}'])
def test_split_elements_rejects_malformed(text: str) -> None:
    with pytest.raises(InvalidPipelineError):
        split_elements(text)


def test_parse_options() -> None:
    assert parse_options('width=3 tag="a b" exact') == {
        "width": "3",
        "tag": "a b",
        "exact": "true",
    }
    assert parse_options("list={1,2}") == {"list": "1,2"}
    assert parse_options("") == {}


def test_hector_and_upstream_stages(registry: list[str]) -> None:
    stages = parse_pipeline(
        "builtin.module(canonicalize, func.func(cse), test-noop{width=3 exact=true tag=x}, cse)"
    )
    assert _describe(stages) == [
        ("upstream", "canonicalize, func.func(cse)"),
        ("test-noop", {"width": 3, "exact": True, "tag": "x"}),
        ("upstream", "cse"),
    ]


def test_wrapper_is_optional(registry: list[str]) -> None:
    wrapped = parse_pipeline("builtin.module(test-noop, cse)")
    bare = parse_pipeline("test-noop, cse")
    assert _describe(wrapped) == _describe(bare)
    assert _describe(bare)[0] == ("test-noop", {"width": 4, "exact": False, "tag": ""})


def test_empty_pipeline() -> None:
    assert parse_pipeline("") == []
    assert parse_pipeline("builtin.module()") == []


def test_named_pipelines_expand_recursively(registry: list[str]) -> None:
    stages = parse_pipeline("test-outer, test-noop")
    assert _describe(stages) == [
        ("upstream", "cse"),
        ("test-noop", {"width": 8, "exact": False, "tag": ""}),
        ("upstream", "canonicalize"),
        ("test-noop", {"width": 4, "exact": False, "tag": ""}),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("test-noop{depth=2}", "has no option 'depth'"),
        ("test-noop{width=wide}", "option 'width'"),
        ("test-noop{exact=maybe}", "expected a boolean"),
        ("func.func(test-noop)", "cannot be nested inside 'func.func(...)'"),
        ("gpu.module(func.func(test-pipe))", "'gpu.module(func.func(...))'"),
        ("test-noop(cse)", "not a nested pipeline"),
        ("test-pipe{x=1}", "takes no options"),
        ("test-loop", "refers to itself"),
        ("cse extra", "malformed pipeline element"),
        ("func.func(cse)(cse)", "malformed"),
    ],
)
def test_parse_errors(registry: list[str], text: str, message: str) -> None:
    with pytest.raises(InvalidPipelineError, match=None) as info:
        parse_pipeline(text)
    assert message in str(info.value)


def test_unknown_pass_suggests_close_names(registry: list[str]) -> None:
    ctx = make_context()
    with pytest.raises(InvalidPipelineError) as info:
        build_pass_manager(parse_pipeline("cse, test-nop"), ctx)
    assert str(info.value).startswith("unknown pass 'test-nop'; did you mean 'test-noop'")
    with pytest.raises(InvalidPipelineError, match="unknown pass 'no-such-pass-at-all'$"):
        build_pass_manager(parse_pipeline("no-such-pass-at-all"), ctx)


# ---- run_pipeline ---------------------------------------------------------------------------


def _register(registry: list[str], name: str, run) -> None:
    PASSES[name] = PassInfo(name, "test only", run, {})
    registry.append(name)


def _parse(ctx: ir.Context, text: str = _MODULE) -> ir.Module:
    with ctx:
        return ir.Module.parse(text)


def test_run_pipeline_mixes_hector_and_upstream(registry: list[str]) -> None:
    seen: list[str] = []

    def rename(op: ir.Operation) -> None:
        seen.append(op.name)
        func = op.regions[0].blocks[0].operations[0]
        func.attributes["sym_name"] = ir.StringAttr.get("renamed")

    _register(registry, "test-rename", rename)
    ctx = make_context()
    module = _parse(ctx)
    run_pipeline(module, "builtin.module(test-rename, canonicalize)", verify=False)
    assert seen == ["builtin.module"]
    assert "@renamed" in str(module)


def test_run_pipeline_prepends_verify(registry: list[str]) -> None:
    calls: list[str] = []
    saved = PASSES.get(VERIFY_PASS)
    PASSES[VERIFY_PASS] = PassInfo(VERIFY_PASS, "stub", lambda op: calls.append("verify"), {})
    _register(registry, "test-mark", lambda op: calls.append("mark"))
    try:
        ctx = make_context()
        run_pipeline(_parse(ctx), "test-mark")
        assert calls == ["verify", "mark"]
        calls.clear()
        run_pipeline(_parse(ctx), "hector-verify, test-mark")  # not run twice
        assert calls == ["verify", "mark"]
        calls.clear()
        run_pipeline(_parse(ctx), "test-mark", verify=False)
        assert calls == ["mark"]
    finally:
        if saved is None:
            PASSES.pop(VERIFY_PASS, None)
        else:
            PASSES[VERIFY_PASS] = saved


def _fail_on_unary(op: ir.Operation) -> None:
    func = op.regions[0].blocks[0].operations[0]
    for inner in func.regions[0].blocks[0].operations:
        if inner.name == "hector_inter.unary":
            raise PassFailure("test: unary is not allowed here", inner.location)


def test_failure_writes_reproducer(registry: list[str]) -> None:
    _register(registry, "test-fail", _fail_on_unary)
    ctx = make_context()
    module = _parse(ctx)
    before = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)
    pipeline = "builtin.module(canonicalize, test-fail)"
    with pytest.raises(PipelineError) as info:
        run_pipeline(module, pipeline, verify=False)
    err = info.value
    try:
        assert not isinstance(err, InvalidPipelineError)
        [diag] = err.diagnostics
        assert diag.severity == "error"
        assert diag.message == "test: unary is not allowed here"
        assert (diag.line, diag.column) == (3, 8)
        assert err.reproducer is not None
        name = os.path.basename(err.reproducer)
        assert name.startswith(f"hector-repro-{os.getpid()}-")
        assert name.endswith(".mlir")
        assert os.path.dirname(err.reproducer) == _tempdir()
        with open(err.reproducer, encoding="utf-8") as f:
            assert f.read() == before
        assert err.command == f"hector-opt {err.reproducer} -p '{pipeline}' --no-hector-verify"
        assert err.command in str(err)
        assert "test: unary is not allowed here" in str(err)
        # The command replays the failure (the pass is registered in-process only, so drive
        # hector-opt's main with the same argv).
        from hector.tools import opt

        argv = shlex.split(err.command)[1:]
        assert opt.main(argv) == 1
    finally:
        if err.reproducer is not None and os.path.exists(err.reproducer):
            os.remove(err.reproducer)


def _tempdir() -> str:
    import tempfile

    return tempfile.gettempdir()


def test_reproducers_do_not_overwrite_each_other(registry: list[str]) -> None:
    _register(registry, "test-fail", _fail_on_unary)
    ctx = make_context()
    paths = []
    try:
        for _ in range(2):
            with pytest.raises(PipelineError) as info:
                run_pipeline(_parse(ctx), "test-fail", verify=False)
            paths.append(info.value.reproducer)
        assert paths[0] != paths[1]
    finally:
        for p in paths:
            if p is not None and os.path.exists(p):
                os.remove(p)


def test_no_reproducer_when_disabled(registry: list[str]) -> None:
    _register(registry, "test-fail", _fail_on_unary)
    ctx = make_context()
    with pytest.raises(PipelineError) as info:
        run_pipeline(_parse(ctx), "test-fail", verify=False, reproducer=False)
    assert info.value.reproducer is None
    assert info.value.command is None
    assert "reproduce" not in str(info.value)


def test_python_exception_becomes_diagnostic(registry: list[str]) -> None:
    """With no op in sight the message names the pass alone, at the first function."""

    def crash(op: ir.Operation) -> None:
        raise KeyError("oops")

    _register(registry, "test-crash", crash)
    ctx = make_context()
    with pytest.raises(PipelineError) as info:
        run_pipeline(_parse(ctx), "test-crash", verify=False, reproducer=False)
    [diag] = info.value.diagnostics
    assert diag.message == "internal error in pass 'test-crash': KeyError: 'oops'"
    assert (diag.line, diag.column) == (2, 1)
    assert "Traceback" in info.value.tracebacks[0]


def test_failure_without_location_uses_module(registry: list[str]) -> None:
    def refuse(op: ir.Operation) -> None:
        raise PassFailure("test: refused")

    _register(registry, "test-refuse", refuse)
    ctx = make_context()
    with pytest.raises(PipelineError) as info:
        run_pipeline(_parse(ctx), "test-refuse", verify=False, reproducer=False)
    [diag] = info.value.diagnostics
    assert diag.message == "test: refused"
    # The parser's implicit module sits at line 0: the error goes to its first function.
    assert (diag.line, diag.column) == (2, 1)


def _crash_on_unary(op: ir.Operation) -> None:
    func = op.regions[0].blocks[0].operations[0]
    for inner in func.regions[0].blocks[0].operations:
        if inner.name == "hector_inter.unary":
            _inspect(inner)


def _inspect(inner: ir.Operation) -> None:
    raise IndexError("no such operand")  # a bug in the pass, deeper in its call stack


def test_internal_error_is_located_at_the_op_being_processed(registry: list[str]) -> None:
    """A Python exception inside a pass names and points at the op the pass was working on
    (not the module at file:0:0), says it is internal, and keeps the reproducer."""
    _register(registry, "test-crash-op", _crash_on_unary)
    ctx = make_context()
    with pytest.raises(PipelineError) as info:
        run_pipeline(_parse(ctx), "test-crash-op", verify=False)
    err = info.value
    try:
        [diag] = err.diagnostics
        assert diag.message == (
            "internal error in pass 'test-crash-op' on 'hector_inter.unary': "
            "IndexError: no such operand"
        )
        assert (diag.line, diag.column) == (3, 8)
        assert err.reproducer is not None
        assert os.path.exists(err.reproducer)
        assert "IndexError" in err.tracebacks[0]
    finally:
        if err.reproducer is not None and os.path.exists(err.reproducer):
            os.remove(err.reproducer)


def test_internal_error_without_an_op_goes_to_the_function(registry: list[str]) -> None:
    def crash(op: ir.Operation) -> None:
        func = op.regions[0].blocks[0].operations[0]
        raise ValueError(f"cannot handle {func.name}")

    _register(registry, "test-crash-func", crash)
    with pytest.raises(PipelineError) as info:
        run_pipeline(_parse(make_context()), "test-crash-func", verify=False, reproducer=False)
    [diag] = info.value.diagnostics
    assert diag.message.startswith("internal error in pass 'test-crash-func' on 'func.func'")
    assert (diag.line, diag.column) == (2, 1)


def test_failure_reports_every_error(registry: list[str]) -> None:
    """A pass can report several offending ops at once: one diagnostic each, in order."""

    def refuse_all(op: ir.Operation) -> None:
        func = op.regions[0].blocks[0].operations[0]
        ops = list(func.regions[0].blocks[0].operations)
        raise PassFailure("first", ops[0].location, more=[("second", ops[1].location)])

    _register(registry, "test-refuse-all", refuse_all)
    ctx = make_context()
    with pytest.raises(PipelineError) as info:
        run_pipeline(_parse(ctx), "test-refuse-all", verify=False, reproducer=False)
    assert [(d.message, d.line) for d in info.value.diagnostics] == [("first", 3), ("second", 4)]


def test_torch_context_pass_cannot_join_a_hector_pipeline(registry: list[str]) -> None:
    """raise-torch-to-hector is named like any pass, but runs alone, in torch-mlir's context."""
    from hector.passes.registry import load_all

    load_all()  # registers it

    assert PASSES["raise-torch-to-hector"].context == "torch"
    [stage] = parse_pipeline("raise-torch-to-hector{strict=true}")
    assert stage.options == {"strict": True}
    ctx = make_context()
    with pytest.raises(InvalidPipelineError, match="runs in torch-mlir's context"):
        run_pipeline(_parse(ctx), "hector-verify, raise-torch-to-hector", verify=False)


def test_invalid_pipeline_is_a_pipeline_error(registry: list[str]) -> None:
    ctx = make_context()
    with pytest.raises(PipelineError, match="unknown pass 'test-nope'"):
        run_pipeline(_parse(ctx), "test-nope", verify=False)


def test_print_ir_after_all_goes_to_stderr(registry: list[str]) -> None:
    # MLIR writes the dumps straight to file descriptor 2: check in a subprocess.
    code = (
        "from hector.dialects import make_context\n"
        "from hector.passes.pipeline import run_pipeline\n"
        "from hector.passes.registry import PASSES, PassInfo\n"
        "from mlir import ir\n"
        "PASSES['test-noop'] = PassInfo('test-noop', 't', lambda op: None, {})\n"
        "ctx = make_context()\n"
        f"m = ir.Module.parse('''{_MODULE}''', ctx)\n"
        "run_pipeline(m, 'test-noop, canonicalize', verify=False, print_ir_after_all=True)\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert "IR Dump After test-noop (test-noop)" in proc.stderr
    assert "IR Dump After Canonicalizer (canonicalize)" in proc.stderr
    assert proc.stdout == ""


def test_internal_error_in_a_torch_context_pass_is_located(
    registry: list[str], tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """hector-opt reports an exception inside a torch-context pass at the op it was working on
    (file:line), labelled internal, with exit 1 and no traceback."""

    def crash(module: object) -> None:
        for func in module.body.operations:  # type: ignore[attr-defined]
            for inner in func.regions[0].blocks[0].operations:
                if inner.name == "torch.aten.sin":
                    raise KeyError("sin")

    PASSES["test-torch-crash"] = PassInfo("test-torch-crash", "t", crash, {}, TORCH_CONTEXT)
    registry.append("test-torch-crash")
    path = tmp_path / "in.mlir"
    path.write_text(
        "func.func @f(%x: !torch.vtensor<[3],f32>) -> !torch.vtensor<[3],f32> {\n"
        "  %0 = torch.aten.sin %x : !torch.vtensor<[3],f32> -> !torch.vtensor<[3],f32>\n"
        "  return %0 : !torch.vtensor<[3],f32>\n}\n"
    )
    from hector.tools import opt

    assert opt.main([str(path), "-p", "test-torch-crash"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"{path}:2: error: internal error in pass 'test-torch-crash' on 'torch.aten.sin': "
        "KeyError: 'sin'\n"
    )


# ---- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "text", "message"),
    [
        (Option(int, 4, "n", min=1, max=1024), "0", "must be between 1 and 1024, got 0"),
        (Option(int, 4, "n", min=1, max=1024), "1025", "must be between 1 and 1024, got 1025"),
        (Option(int, 0, "n", min=0), "-1", "must be at least 0, got -1"),
        (Option(int, 0, "n"), str(2**63), "must be a 64-bit integer"),
        (Option(int, 0, "n"), "1.5", "expected an integer, got '1.5'"),
        (Option(float, 0.5, "x"), "nan", "expected a finite number, got nan"),
        (Option(float, 0.5, "x"), "inf", "expected a finite number, got inf"),
        (Option(float, 0.5, "x"), "abc", "expected a number, got 'abc'"),
    ],
)
def test_option_rejects_values_out_of_range(option: Option, text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\\(")):
        option.parse(text)


def test_option_accepts_bounds() -> None:
    option = Option(int, 4, "n", min=1, max=1024)
    assert (option.parse("1"), option.parse("1024")) == (1, 1024)
    assert Option(int, 0, "n").parse(str(-(2**63))) == -(2**63)


def test_out_of_range_option_is_an_invalid_pipeline(registry: list[str]) -> None:
    PASSES["test-bounded"] = PassInfo(
        "test-bounded", "t", lambda op, n: None, {"n": Option(int, 4, "n", min=1, max=8)}
    )
    registry.append("test-bounded")
    with pytest.raises(
        InvalidPipelineError,
        match="pass 'test-bounded', option 'n': must be between 1 and 8, got 0",
    ):
        parse_pipeline("test-bounded{n=0}")


def test_register_pass_rejects_a_default_out_of_range() -> None:
    with pytest.raises(ValueError, match="default of option 'n': must be at least 1, got 0"):
        register_pass("test-bad-default", "t", n=Option(int, 0, "n", min=1))
    assert "test-bad-default" not in PASSES


def test_every_registered_option_default_is_valid() -> None:
    from hector.passes.registry import load_all

    load_all()  # registers every pass

    for info in PASSES.values():
        for option in info.options.values():
            option.check(option.default)


# ---- parsing input -------------------------------------------------------------------------


def test_parse_module_rejects_index_dense_array_before_mlir_aborts() -> None:
    """MLIR's parser asserts (aborts the process) on array<index: ...>: parse_module raises a
    located ir.MLIRError instead, like any parse error (here through a type alias)."""
    text = "!t = index\nmodule attributes {a = array<i64: 1>, b = array<!t: 1>} {}\n"
    with pytest.raises(ir.MLIRError) as info:
        parse_module(text, make_context())
    [diag] = diagnostics_from_error(info.value)
    assert (diag.file, diag.line, diag.column) == ("-", 2, 49)
    assert "dense array attributes cannot hold 'index' elements" in diag.message


def test_parse_module_file_names_the_file(tmp_path) -> None:
    path = tmp_path / "in.mlir"
    # Comments and strings are not attributes: only line 3's array is.
    path.write_text(
        '// array<index: 1>\nmodule attributes {s = "array<index>",\n  a = array <index>} {}\n'
    )
    with pytest.raises(ir.MLIRError) as info:
        parse_module_file(str(path), make_context())
    [diag] = diagnostics_from_error(info.value)
    assert (diag.file, diag.line, diag.column) == (str(path), 3, 14)


def test_parse_module_takes_dialect_only_op_names_when_unregistered_ops_are_allowed() -> None:
    """MLIR aborts on "gpu"() only when it must refuse unregistered ops; with them allowed the
    op parses, so it is not refused either."""
    text = 'func.func @f() {\n  "gpu"() : () -> ()\n  return\n}\n'
    with pytest.raises(ir.MLIRError, match="operation name 'gpu' has no op part"):
        parse_module(text, make_context())
    ctx = make_context()
    ctx.allow_unregistered_dialects = True
    assert '"gpu"() : () -> ()' in str(parse_module(text, ctx))


def test_parse_module_parses_safe_text() -> None:
    text = "module attributes {test.a = array<i64: 1>} {}"
    assert "array<i64: 1>" in str(parse_module(text, make_context()))


def test_pass_table_names_what_each_module_registers() -> None:
    """``PASS_MODULES`` holds every name Hector registers, under the module that defines it:
    the parser imports that module alone when a pipeline names the pass."""
    from hector.passes.registry import PASS_MODULES, load_all

    load_all()
    table = {name: module for module, names in PASS_MODULES.items() for name in names}
    ours = {n: i for n, i in PASSES.items() if i.run.__module__.startswith("hector.")}
    assert set(table) == set(ours) | set(PIPELINES)
    for name, info in ours.items():
        assert info.run.__module__ == f"hector.{table[name]}", name
    assert {table[name] for name in PIPELINES} == {"lowering.pipelines"}


def test_a_pipeline_imports_only_the_modules_of_its_passes() -> None:
    """In a fresh process: parsing ``hector-verify`` registers it without importing the
    conversions; naming a pipeline registers it and the passes it holds; an unknown name is
    suggested from every name."""
    code = (
        "import sys\n"
        "from hector.dialects import make_context\n"
        "from hector.passes.pipeline import build_pass_manager, parse_pipeline\n"
        "from hector.passes.diagnostics import InvalidPipelineError\n"
        "from hector.passes.registry import PASSES, PIPELINES\n"
        "[s] = parse_pipeline('hector-verify')\n"
        "assert s.pass_info is PASSES['hector-verify']\n"
        "assert 'hector.lowering.gpu.intra_to_gpu' not in sys.modules\n"
        "assert 'hector.lowering.pipelines' not in sys.modules\n"
        "stages = parse_pipeline('hector-lower-cpu')\n"
        "assert 'hector-lower-cpu' in PIPELINES\n"
        "assert 'convert-hector-intra-to-scf' in [s.name for s in stages]\n"
        "try:\n"
        "    build_pass_manager(parse_pipeline('hector-autodif'), make_context())\n"
        "except InvalidPipelineError as err:\n"
        "    print(err)\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert "did you mean 'hector-autodiff'" in proc.stdout, proc.stdout
