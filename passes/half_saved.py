"""``hector-half-saved``: a training step on bf16 features saves its wide activations in bf16.

After ``hector-autodiff``, ``@f_train`` returns the values ``@f_backward`` reads (*saved*
values) in f32. Where the caller stores the program's inputs in bf16 (an argument of ``@f``
carries ``{hector.storage = bf16}``: features in bf16, the MLPerf setting; the weights may be
f32), the CPU computes the GEMMs of both functions on bf16 pairs (AVX512-BF16,
``lowering/cpu/bf16.py``), so a saved value a GEMM reads is rounded to bf16 when it is packed
anyway. This pass gives every saved value of ``[rows, width]`` f32 rows, ``width`` at least
:data:`MIN_WIDTH`, in the row spaces of :data:`HALVED_KINDS`, ``hector.storage = bf16`` — as
a result of ``@f_train`` and as the matching argument of ``@f_backward`` — so the training step
writes it once in bf16 and the backward reads half the bytes, as autocast keeps a bf16
matmul's result in bf16:

* RGCN's sums into the (destination, relation) pairs: read by the forward's scatter-GEMM and
  the backward's weight gradient, both of which round them to bf16 for their pair products
  (the same numbers);
* RGAT's per-edge messages ``W_r h_j``: rounded once, as an inference program's messages are
  (``hector-half-messages``); the forward reads them from the same bf16 buffer, so its
  results and gradients agree with one another.

The CPU pipeline's ``hector-half-messages`` then lets the template computing such a value
write it in bf16 directly (no f32 buffer and copy; a sum becomes a segmented sum). The pass
runs only when ``hector.compile`` computes on bf16 pairs (``Options.bf16_dot``: the CPU has
AVX512-BF16) and places no saved value under a memory budget (``placement-plan-saved`` and the
runtime's store size them as f32 rows); narrower values (attention scores, one column per
head), node rows, f16 programs and programs without a bf16 argument are left as they are.
"""

from __future__ import annotations

from mlir import ir

from ..dialects import hector_inter as inter
from .registry import PassFailure, register_pass

#: The narrowest rows saved in bf16: one 512-bit vector of f32 (narrower: per-head scores).
MIN_WIDTH = 16
#: The row spaces (``hector.result_kinds``) of the saved values stored in bf16: per-edge rows
#: (RGAT's messages) and the (destination, relation) pairs (RGCN's sums). Node rows and the
#: (source, relation) rows of compaction (HGT's keys and messages, which its attention's
#: gradients read) stay f32: rounding them took HGT's weight-gradient error from 1.8x to 2.2x
#: that of the f32 products on the same bf16 features
#: (``test_bf16_inputs_match_float32_on_both_paths``, whose bound is 2x).
HALVED_KINDS = frozenset({"edge", "dst_compact"})


def _dicts(fn: ir.Operation, of: str, count: int) -> list[dict[str, ir.Attribute]]:
    """``fn``'s ``arg_attrs`` / ``res_attrs`` as mutable dicts, ``count`` of them."""
    key = f"{of}_attrs"
    given = list(ir.ArrayAttr(fn.attributes[key])) if key in fn.attributes else []
    out: list[dict[str, ir.Attribute]] = []
    for i in range(count):
        d = ir.DictAttr(given[i]) if i < len(given) else ir.DictAttr.get({})
        out.append({d[j].name: d[j].attr for j in range(len(d))})
    return out


def _set(fn: ir.Operation, of: str, dicts: list[dict[str, ir.Attribute]]) -> None:
    fn.attributes[f"{of}_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(d) for d in dicts])


def program_half_type(train: ir.Operation) -> ir.Type | None:
    """bf16 when an argument of ``train`` carries ``hector.storage = bf16`` and none another
    half type; else None."""
    n = len(train.regions[0].blocks[0].arguments)
    stored = {
        str(ir.TypeAttr(d[inter.STORAGE]).value)
        for d in _dicts(train, "arg", n)
        if inter.STORAGE in d
    }
    halves = stored - {"f32"}
    return ir.BF16Type.get() if halves == {"bf16"} else None


def halves_saved(value_type: ir.Type) -> bool:
    """Whether a saved value of ``value_type`` is stored in bf16: f32 rows at least
    :data:`MIN_WIDTH` wide."""
    if not isinstance(value_type, ir.RankedTensorType):
        return False
    t = ir.RankedTensorType(value_type)
    return (
        t.rank == 2
        and isinstance(t.element_type, ir.F32Type)
        and t.shape[1] != ir.ShapedType.get_dynamic_size()
        and t.shape[1] >= MIN_WIDTH
    )


def _result_kinds(train: ir.Operation, count: int) -> list[str]:
    """``train``'s ``hector.result_kinds`` (``"node"``, ``"edge"``, ...; empty strings where
    none is given)."""
    if "hector.result_kinds" not in train.attributes:
        return [""] * count
    kinds = [ir.StringAttr(k).value for k in ir.ArrayAttr(train.attributes["hector.result_kinds"])]
    return kinds + [""] * (count - len(kinds))


def _pair(block: ir.Block) -> dict[str, tuple[ir.Operation | None, ir.Operation | None]]:
    """``@f_train`` and ``@f_backward`` of each differentiated function, by ``f``."""
    pairs: dict[str, list[ir.Operation | None]] = {}
    for op in block.operations:
        op = op.operation
        if op.name != "func.func":
            continue
        for attr, slot in (("hector.train_of", 0), ("hector.backward_of", 1)):
            if attr in op.attributes:
                pairs.setdefault(ir.StringAttr(op.attributes[attr]).value, [None, None])[slot] = op
    return {k: (v[0], v[1]) for k, v in pairs.items()}


def halve(train: ir.Operation, backward: ir.Operation) -> int:
    """Store the wide saved values of ``train`` in bf16 (module docstring); how many."""
    half = program_half_type(train)
    if half is None or "hector.num_saved" not in train.attributes:
        return 0
    saved = ir.IntegerAttr(train.attributes["hector.num_saved"]).value
    ret = list(train.regions[0].blocks[0].operations)[-1].operation
    outs = list(ret.operands)
    n_args = len(train.regions[0].blocks[0].arguments)
    b_args = list(backward.regions[0].blocks[0].arguments)
    first = len(outs) - saved
    if saved <= 0 or len(b_args) < n_args + saved:
        return 0
    res, args = _dicts(train, "res", len(outs)), _dicts(backward, "arg", len(b_args))
    kinds = _result_kinds(train, len(outs))
    done = 0
    for i in range(saved):
        value, arg = outs[first + i], b_args[n_args + i]
        if value.type != arg.type:
            raise PassFailure(
                f"saved value #{i} is {value.type} in @_train but {arg.type} in @_backward",
                backward.location,
            )
        if not halves_saved(value.type) or inter.STORAGE in res[first + i]:
            continue
        if kinds[first + i] not in HALVED_KINDS:
            continue
        res[first + i][inter.STORAGE] = ir.TypeAttr.get(half)
        args[n_args + i][inter.STORAGE] = ir.TypeAttr.get(half)
        done += 1
    if done:
        _set(train, "res", res)
        _set(backward, "arg", args)
    return done


@register_pass(
    "hector-half-saved",
    "In a training program fed bf16 arguments, store the wide saved values (f32 rows at least "
    "16 wide) in bf16: a result of <f>_train and an argument of <f>_backward",
)
def run(module_op: ir.Operation) -> None:
    """Pass entry point: every ``@f_train`` / ``@f_backward`` pair."""
    block = module_op.regions[0].blocks[0]
    with module_op.context:
        for name, (train, backward) in _pair(block).items():
            if train is None or backward is None:
                alone = train if train is not None else backward
                assert alone is not None
                raise PassFailure(
                    f"@{name}: hector-half-saved needs both @{name}_train and @{name}_backward",
                    alone.location,
                )
            halve(train, backward)
