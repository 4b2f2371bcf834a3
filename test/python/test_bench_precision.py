"""``hector bench precision``: every layer in each type, its errors and bytes, in a record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_bench_precision_records_each_layer_in_each_type(tmp_path: Path) -> None:
    from hector.tools.cli import main

    record = tmp_path / "precision.json"
    argv = ["bench", "precision", "--dataset", "random:40x200x3", "--in-dim", "16"]
    argv += ["--hidden", "8", "--dtypes", "float32,bfloat16", "--runs", "1", "--warmup", "1"]
    assert main([*argv, "--json", str(record)]) == 0
    rows = json.loads(record.read_text())["results"]
    assert [(r["model"], r["dtype"]) for r in rows] == [
        (m, d) for m in ("rgcn", "rgat", "hgt") for d in ("float32", "bfloat16")
    ]
    _check_rows(rows)  # float16: test_bench_precision_times_cpu_time_when_asked


def _check_rows(rows: list[dict]) -> None:
    """Bytes halved in the half types; float32 against itself exact, the halves within their
    rounding (1e-2 for outputs, 2e-2 for gradients)."""
    for r in rows:
        half = r["dtype"] != "float32"
        assert r["feature_bytes"] * (2 if half else 1) == r["feature_bytes_f32"]
        assert r["weight_bytes"] * (2 if half else 1) == r["weight_bytes_f32"]
        assert r["output_rel_error"] <= (1e-2 if half else 0.0)
        assert r["grad_rel_error"] <= (2e-2 if half else 0.0)


def test_bench_precision_refuses_an_unknown_type(capsys: pytest.CaptureFixture[str]) -> None:
    from hector.tools.cli import main

    assert main(["bench", "precision", "--dtypes", "float32,int8"]) == 2
    assert "unknown ['int8']" in capsys.readouterr().err


def test_bench_precision_times_cpu_time_when_asked(tmp_path: Path) -> None:
    """``--clock cpu`` is kept in the record's configuration, and the calls are timed; the
    float16 row as the other types' (bytes halved, errors within its rounding)."""
    from hector.tools.cli import main

    record = tmp_path / "precision.json"
    argv = ["bench", "precision", "--dataset", "random:40x200x3", "--in-dim", "16"]
    argv += ["--hidden", "8", "--models", "rgcn", "--dtypes", "float32,float16"]
    argv += ["--runs", "1", "--warmup", "1", "--clock", "cpu", "--json", str(record)]
    assert main(argv) == 0
    data = json.loads(record.read_text())
    assert data["config"]["clock"] == "cpu"
    assert [r["dtype"] for r in data["results"]] == ["float32", "float16"]
    assert all(r["infer_ms"] > 0 and r["train_step_ms"] > 0 for r in data["results"])
    _check_rows(data["results"])


def test_bench_precision_refuses_an_unknown_clock(capsys: pytest.CaptureFixture[str]) -> None:
    from hector.tools.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "precision", "--clock", "sundial"])
    assert "invalid choice: 'sundial'" in capsys.readouterr().err


def test_bench_precision_times_gemms_against_torch_mm(tmp_path: Path) -> None:
    """``--gemm`` adds a typed linear against ``torch.mm`` per shape and type to the record."""
    from hector.tools.cli import main

    record = tmp_path / "precision.json"
    argv = ["bench", "precision", "--models", "", "--dtypes", "float32,bfloat16"]
    argv += ["--gemm", "32x32", "--gemm-rows", "64", "--runs", "1", "--json", str(record)]
    assert main(argv) == 0
    gemm = json.loads(record.read_text())["gemm"]
    assert [(r["shape"], r["dtype"]) for r in gemm] == [
        ("[64, 32] x [32, 32]", "float32"),
        ("[64, 32] x [32, 32]", "bfloat16"),
    ]
    assert all(r["hector_gflops"] > 0 and r["torch_mm_gflops"] > 0 for r in gemm)


def test_bench_precision_refuses_a_bad_gemm_shape(capsys: pytest.CaptureFixture[str]) -> None:
    from hector.tools.cli import main

    assert main(["bench", "precision", "--gemm", "256by256"]) == 2
    assert "--gemm wants KxN shapes such as 256x256, got '256by256'" in capsys.readouterr().err


def test_bench_precision_times_each_kernel_of_the_training_steps(tmp_path: Path) -> None:
    """``--kernels`` records every template of the float32 and bfloat16 training steps
    (their ``_train`` and ``_backward`` functions) with both types' times, and their sum."""
    from hector.tools.cli import main

    record = tmp_path / "precision.json"
    argv = ["bench", "precision", "--dataset", "random:40x200x3", "--in-dim", "16"]
    argv += ["--hidden", "16", "--models", "rgcn", "--dtypes", "float32,bfloat16", "--kernels"]
    argv += ["--runs", "1", "--warmup", "1", "--json", str(record)]
    assert main(argv) == 0
    kernels = json.loads(record.read_text())["kernels"]
    assert {r["phase"] for r in kernels} == {"train", "backward", "all"}
    assert all(r["model"] == "rgcn" and r["other"] == "bfloat16" for r in kernels)
    gemms = [r for r in kernels if r["kernel"].startswith("gemm")]
    assert {r["kernel"] for r in gemms} >= {"gemm xw", "gemm xty"}
    assert all(r["float32_ms"] is not None and r["float32_ms"] >= 0 for r in gemms)
    total = kernels[-1]
    assert total["phase"] == "all"
    assert total["float32_ms"] > 0
    assert total["other_ms"] > 0


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_bench_precision_says_how_bf16_gemms_multiplied(
    tmp_path: Path,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The record and the table's first line name the bf16 GEMMs' products: bf16 pairs only
    on a CPU with AVX512-BF16 and ``HECTOR_BF16_DOT`` not ``off``; f32 otherwise, with why."""
    from hector.lowering.cpu import features
    from hector.tools.cli import main

    monkeypatch.setenv(features.ENV, mode)
    record = tmp_path / "precision.json"
    argv = ["bench", "precision", "--dataset", "random:40x200x3", "--in-dim", "16"]
    argv += ["--hidden", "8", "--models", "rgcn", "--dtypes", "float32,bfloat16"]
    argv += ["--runs", "1", "--warmup", "1", "--json", str(record)]
    assert main(argv) == 0
    got = json.loads(record.read_text())["products"]
    pairs = mode == "auto" and features.has_avx512_bf16()
    assert got == {
        "products": "bf16 pairs" if pairs else "f32",
        "avx512_bf16": features.has_avx512_bf16(),
        features.ENV: mode,
    }
    out = capsys.readouterr().out
    if pairs:
        assert "bf16 GEMMs: bf16 pairs (vdpbf16ps" in out
    else:
        why = "HECTOR_BF16_DOT=off)" if features.has_avx512_bf16() else "no AVX512-BF16 on"
        assert f"bf16 GEMMs: f32 products on widened bf16 ({why}" in out
