"""Static sizes that 64-bit arithmetic can hold.

MLIR computes a memref's strides, offsets and sizes in ``int64_t``: the canonical strides of
``memref<3x4294967296x4294967296xf32>`` overflow, and MLIR's strided-layout code then fails
an assertion (``integer overflow in size computation``), which ends the whole process. No
diagnostic can follow an assertion, so such types are refused before any pass lowers them:

* ``hector-verify`` reports each one at the op (or function) that holds it;
* every Hector pass checks its input with :func:`size_problems` before it runs (see
  ``register_pass``), so ``--no-hector-verify`` cannot carry such a type into a lowering.

The bound: the product of a type's static dimensions (the zero and dynamic ones left out, as
MLIR's canonical strides leave them out), times its element size in bytes, is at most
``2**63 - 1``. Every canonical stride and every in-bounds offset is below that product, and
every byte offset below that bound. An explicit ``strided<[...], offset: ...>`` layout must also
keep its farthest element's byte offset within it.
"""

from __future__ import annotations

from collections.abc import Iterator

from mlir import ir

from .walk import walk_ops

#: The largest value of ``int64_t``: a type's bytes must fit.
INT64_MAX = 2**63 - 1


def element_bytes(t: ir.Type) -> int:
    """Bytes of one element of type ``t`` (a vector element counts all its lanes); 1 for a
    type without a known size (at least one byte per element)."""
    if isinstance(t, ir.IntegerType | ir.FloatType):
        width = ir.IntegerType(t).width if isinstance(t, ir.IntegerType) else ir.FloatType(t).width
        return max(1, (width + 7) // 8)
    if isinstance(t, ir.IndexType):
        return 8
    if isinstance(t, ir.ComplexType):
        return 2 * element_bytes(ir.ComplexType(t).element_type)
    if isinstance(t, ir.VectorType):
        v = ir.VectorType(t)
        return _static_product(v) * element_bytes(v.element_type)
    return 1


def _static_product(t: ir.ShapedType) -> int:
    """The product of the positive static dimensions of ``t``."""
    product = 1
    for i in range(t.rank):
        if not t.is_dynamic_dim(i) and t.get_dim_size(i) > 0:
            product *= t.get_dim_size(i)
    return product


def _layout_extent(t: ir.MemRefType) -> int:
    """The farthest element offset an explicit strided layout reaches (0 without one)."""
    if not isinstance(t.layout, ir.StridedLayoutAttr):
        return 0
    layout = ir.StridedLayoutAttr(t.layout)
    dyn = ir.ShapedType.get_dynamic_stride_or_offset()
    extent = abs(layout.offset) if layout.offset != dyn else 0
    for i, stride in enumerate(layout.strides):
        if stride != dyn and not t.is_dynamic_dim(i) and t.get_dim_size(i) > 0:
            extent += (t.get_dim_size(i) - 1) * abs(stride)
        if stride != dyn:
            extent = max(extent, abs(stride))
    return extent


def size_problem(t: ir.Type) -> str | None:
    """Why ``t`` is too large for 64-bit sizes, strides and offsets; ``None`` when it fits (or
    is not a ranked shaped type)."""
    if not isinstance(t, ir.ShapedType) or not ir.ShapedType(t).has_rank:
        return None
    shaped = ir.ShapedType(t)
    elements = _static_product(shaped)
    size = element_bytes(shaped.element_type)
    if elements * size > INT64_MAX:
        return (
            f"type {t} is too large for 64-bit sizes and strides: its static dimensions hold "
            f"{elements} elements of {size} bytes, more than 2^63 - 1 bytes"
        )
    if isinstance(t, ir.MemRefType) and _layout_extent(ir.MemRefType(t)) * size > INT64_MAX:
        return (
            f"type {t} is too large for 64-bit offsets and strides: its layout reaches past "
            "2^63 - 1 bytes"
        )
    return None


def _once(t: ir.Type, seen: set[ir.Type]) -> str | None:
    """:func:`size_problem` of ``t`` unless ``t`` was seen before (then ``None``): types are
    uniqued in their context, so the set holds each once (no printing to compare them)."""
    if t in seen:
        return None
    seen.add(t)
    return size_problem(t)


def _signature(attr: ir.Attribute) -> Iterator[tuple[str, ir.Type]]:
    """The types a type attribute holds, each with what it is: a function type's arguments and
    results, or the type itself."""
    t = ir.TypeAttr(attr).value
    if isinstance(t, ir.FunctionType):
        f = ir.FunctionType(t)
        yield from ((f"argument #{i}", a) for i, a in enumerate(f.inputs))
        yield from ((f"result #{i}", r) for i, r in enumerate(f.results))
    else:
        yield "type", t


def size_problems(op: ir.Operation | ir.OpView) -> Iterator[tuple[str, ir.Location]]:
    """Each type in ``op`` too large for 64-bit sizes (:func:`size_problem`), as ``(message,
    location)``, each type once, where it first appears: in type attributes (a function's
    signature, so declarations too), block arguments and results of ops, in walk order."""
    seen: set[ir.Type] = set()  # each type once, where it first appears
    for inner in [op.operation, *walk_ops(op)]:
        where, signature = f"'{inner.name}'", False
        attributes = inner.attributes
        for name in attributes if len(attributes) else ():
            attr = attributes[name]
            if not isinstance(attr, ir.TypeAttr):
                continue
            for what, t in _signature(attr):
                signature = signature or what.startswith("argument")
                problem = _once(t, seen)
                if problem is not None:
                    yield f"{what} of {where}: {problem}", inner.location
        for r, region in enumerate(inner.regions):
            for b, block in enumerate(region.blocks):
                if signature and r == 0 and b == 0:
                    continue  # a function's arguments: its signature said it
                for i, arg in enumerate(block.arguments):
                    problem = _once(arg.type, seen)
                    if problem is not None:
                        yield f"block argument #{i} in {where}: {problem}", inner.location
        for i, result in enumerate(inner.results):
            problem = _once(result.type, seen)
            if problem is not None:
                yield f"result #{i} of {where}: {problem}", inner.location
