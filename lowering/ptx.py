"""The GPU back end's last step: read PTX text out of the ``gpu.binary`` ops of a module."""

from __future__ import annotations

import re

from mlir import ir

_ASSEMBLY = re.compile(r'assembly = "((?:[^"\\]|\\.)*)"')


def _unescape(text: str) -> str:
    """Decode MLIR string-literal escapes (``\\0A``-style hex pairs, ``\\\\``, ``\\"``)."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt in '\\"':
                out += nxt.encode()
                i += 2
                continue
            if nxt == "n":
                out += b"\n"
                i += 2
                continue
            if nxt == "t":
                out += b"\t"
                i += 2
                continue
            out.append(int(text[i + 1 : i + 3], 16))
            i += 3
            continue
        out += c.encode()
        i += 1
    return out.decode()


def extract_ptx(module: ir.Module | ir.Operation) -> dict[str, str]:
    """PTX text of every ``gpu.binary`` in ``module``, by binary name."""
    op = module.operation if isinstance(module, ir.Module) else module
    result: dict[str, str] = {}
    for inner in op.regions[0].blocks[0].operations:
        inner = inner.operation
        if inner.name != "gpu.binary":
            continue
        name = ir.StringAttr(inner.attributes["sym_name"]).value
        match = _ASSEMBLY.search(str(inner))
        if match is None:
            raise ValueError(f"gpu.binary @{name} holds no PTX assembly (format=isa expected)")
        result[name] = _unescape(match.group(1))
    return result
