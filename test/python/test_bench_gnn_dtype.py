"""``hector bench gnn --dtype``: a bfloat16 cell runs every system in bfloat16 and measures the
errors against the reference PyG layer in float32 on the same bfloat16-rounded weights and
inputs; the dtype is in the record and in the suite's file names."""

from __future__ import annotations

import pytest
import torch

from hector.tools import cli
from hector_bench import gnn, gnn_setup
from hector_bench.gnn_measure import fresh_input, input_dtype

# synthetic:mag at this scale: 194 nodes, 4222 edges, 8 relations, 4 node types
DS, SCALE = "synthetic:mag", 0.0001


def _cell(model: str, mode: str, dtype: str) -> gnn.Cell:
    return gnn.Cell(
        model, DS, mode, hidden=8, in_dim=8, runs=1, scale=SCALE, roofline=False, dtype=dtype
    )


def test_bfloat16_cell_record_and_its_float32_error_reference() -> None:
    rec = gnn.run_cell(_cell("rgat", "training", "bfloat16"), memory=False, quiet=True)
    assert rec["dtype"] == rec["config"]["dtype"] == "bfloat16"
    by = {r["variant"]: r for r in rec["results"]}
    assert list(by) == ["RGATLayer", "RGATConv float32", "RGATConv"]
    ref, peer, hector = by["RGATConv float32"], by["RGATConv"], by["RGATLayer"]
    # the float32 reference: run once, untimed, on the rounded weights and inputs
    assert (ref["status"], ref["dtype"], ref["out_dtype"]) == ("untimed", "float32", "float32")
    assert "median_ms" not in ref
    assert "bfloat16-rounded weights and inputs" in ref["reason"]
    assert ref["max_abs_err"] == 0.0
    for row in (hector, peer):
        assert (row["status"], row["dtype"], row["out_dtype"]) == ("ok", "bfloat16", "bfloat16")
        assert row["error_reference"] == "pyg RGATConv float32"
        assert set(row["grad_params_compared"]) == {"weight", "q", "k", "bias"}
        # bfloat16's own rounding (8 significant bits), not zero and not a wrong result
        for kind in ("", "_grad_input", "_grad_params"):
            assert 0 < row[f"max_rel_err{kind}"] < 3e-2, (kind, row)
    # the speed-up compares the timed bfloat16 systems only
    assert rec["speedup_vs_best_peer"] == pytest.approx(
        peer["median_ms"] / hector["median_ms"], rel=1e-3, abs=1e-4
    )


@pytest.mark.parametrize("model", ["rgcn", "hgt"])
def test_float32_reference_gets_the_rounded_weights_and_inputs(model: str) -> None:
    narrow = gnn_setup.build_setup(_cell(model, "inference", "bfloat16"))
    wide = gnn_setup.build_setup(_cell(model, "inference", "float32"))
    names = {(s.name, s.variant) for s in narrow.systems}
    assert len(names) == len(wide.systems) + 1  # the float32 reference is the one added
    ref_system = next(s for s in narrow.systems if s.dtype == "float32")
    assert ref_system.reference
    assert ref_system.untimed_reason
    assert not any(s.reference for s in narrow.systems if s is not ref_system)
    ref32, _ = ref_system.build()
    peer = next(s for s in narrow.systems if s.name == "pyg" and s.dtype is None)
    conv, _ = peer.build()
    for (name, p32), (_, p16), (_, p_wide) in zip(
        ref32.named_parameters(), conv.named_parameters(), wide.systems[-1].build()[0]
        .named_parameters(), strict=True
    ):  # fmt: skip
        assert (p32.dtype, p16.dtype) == (torch.float32, torch.bfloat16), name
        assert torch.equal(p32, p16.float()), name  # the same rounded values, widened
        assert torch.equal(p16, p_wide.to(torch.bfloat16)), name  # the float32 draw, rounded
    x32 = fresh_input(narrow.x, False, input_dtype(narrow, ref_system))
    xs = x32.values() if isinstance(x32, dict) else [x32]
    assert all(v.dtype == torch.float32 for v in xs)
    x16 = narrow.x if isinstance(narrow.x, dict) else {"x": narrow.x}
    x_wide = wide.x if isinstance(wide.x, dict) else {"x": wide.x}
    x32d = x32 if isinstance(x32, dict) else {"x": x32}
    for k, v in x16.items():
        assert v.dtype == torch.bfloat16
        assert torch.equal(x32d[k], v.float())
        assert torch.equal(v, x_wide[k].to(torch.bfloat16))


def test_float32_cell_has_no_extra_reference() -> None:
    setup = gnn_setup.build_setup(_cell("rgcn", "inference", "float32"))
    assert [(s.variant, s.reference, s.dtype) for s in setup.systems] == [
        ("RGCNLayer", False, None),
        ("RGCNConv", True, None),
        ("FastRGCNConv", False, None),
    ]
    assert setup.x.dtype == torch.float32


def test_bad_dtype_is_refused_by_the_parser(capsys) -> None:
    argv = ["bench", "gnn", "--dataset", DS, "--model", "rgcn", "--mode", "training"]
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--dtype", "float16"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "hector bench gnn: error: argument --dtype: invalid choice: 'float16'" in err, err
    assert "Traceback" not in err
