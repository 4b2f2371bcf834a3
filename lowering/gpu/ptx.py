"""The GPU back end's last step: read PTX text out of the ``gpu.binary`` ops of a module."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import gpu

# gpu::CompilationTarget: what an object holds (``gpu-module-to-binary{format=isa}`` → text).
_ASSEMBLY = 2


def _ptx(binary: ir.Operation) -> str | None:
    """The PTX of the first object of ``binary`` that holds assembly, read through the
    bindings (``#gpu.object``), or None."""
    for obj in ir.ArrayAttr(binary.attributes["objects"]):
        attr = gpu.ObjectAttr(obj)
        if attr.format == _ASSEMBLY:
            return bytes(attr.object).decode()
    return None


def extract_ptx(module: ir.Module | ir.Operation) -> dict[str, str]:
    """PTX text of every ``gpu.binary`` in ``module``, by binary name."""
    op = module.operation if isinstance(module, ir.Module) else module
    result: dict[str, str] = {}
    for inner in op.regions[0].blocks[0].operations:
        inner = inner.operation
        if inner.name != "gpu.binary":
            continue
        name = ir.StringAttr(inner.attributes["sym_name"]).value
        ptx = _ptx(inner)
        if ptx is None:
            raise ValueError(f"gpu.binary @{name} holds no PTX assembly (format=isa expected)")
        result[name] = ptx
    return result
