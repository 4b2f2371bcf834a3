"""The dialect definitions load into both MLIR copies: the compiler's and torch-mlir's."""

from __future__ import annotations

import pytest

from hector.dialects import DIALECTS, hector_inter, irdl_text, load_into_torch_mlir


def test_irdl_defines_every_op() -> None:
    text = irdl_text()
    for dialect in DIALECTS:
        assert f"irdl.dialect @{dialect.name}" in text
        for op in dialect.ops:
            assert f"irdl.operation @{op.name}" in text


def test_loads_into_torch_mlir_context() -> None:
    from torch_mlir import ir

    ctx = ir.Context()
    load_into_torch_mlir(ctx)
    with ctx:
        module = ir.Module.parse(hector_inter.TYPED_LINEAR.example)
        assert module.operation.verify()
        assert '"hector_inter.typed_linear"' in str(module)
        bad = hector_inter.TYPED_LINEAR.example.replace('"etype"', '"bogus"')
        with pytest.raises(ir.MLIRError, match="does not satisfy the constraint"):
            ir.Module.parse(bad)


def test_op_handlers_register_once_per_op() -> None:
    """Per-op handler tables (verifiers, adjoints, lowerings, raise patterns) take exactly one
    handler per op, under the table's prefix."""
    import pytest

    from hector.dialects.builders import OpHandlers

    table: OpHandlers = OpHandlers("lowering", prefix="hector_inter.")

    @table.register("scale", "add")
    def lower(op: object) -> None:
        """A handler."""

    assert table.get("hector_inter.scale") is lower
    assert "hector_inter.add" in table
    assert table.get("scale") is None
    with pytest.raises(ValueError, match="two lowerings for 'hector_inter.add'"):
        table.register("add")(lower)
