"""The GPU architectures Hector compiles for, checked against LLVM's NVPTX back end itself.

``GPU_CHIP_MIN_PTX`` lists each architecture with the oldest PTX ISA version LLVM accepts for
it; :func:`gpu_features` writes kernels in PTX 8.0 unless the chip needs a newer version. Here
``llc`` (the one the toolchain ships) is asked for its processors and fed a kernel per chip.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from hector.lowering import pipelines
from hector.lowering.cpu import codegen as cpu_codegen

KERNEL = 'target triple = "nvptx64-nvidia-cuda"\ndefine void @k() {\n  ret void\n}\n'


def llc(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the toolchain's ``llc``."""
    tools = cpu_codegen.tools()
    assert tools is not None, "the xtc LLVM tools are a dependency of the package"
    return subprocess.run(
        [str(Path(tools.llvm_bin) / "llc"), *args],
        capture_output=True,
        text=True,
        env=tools.env,
        timeout=60,
        check=False,
    )


def test_the_table_is_nvptx_processors_from_sm_50_on() -> None:
    help_text = llc("-march=nvptx64", "-mcpu=help")
    listed = help_text.stdout + help_text.stderr
    known = set(re.findall(r"^\s+(sm_\d+[a-z]?)\s", listed, re.M))
    assert known, listed
    supported = {c for c in known if int(re.sub(r"\D", "", c)) >= 50}
    assert set(pipelines.GPU_CHIP_MIN_PTX) == supported


@pytest.mark.parametrize("chip", sorted(pipelines.GPU_CHIP_MIN_PTX))
def test_each_chip_gets_a_ptx_version_llvm_accepts(tmp_path: Path, chip: str) -> None:
    kernel = tmp_path / "k.ll"
    kernel.write_text(KERNEL)
    features = pipelines.gpu_features(chip)
    ok = llc("-march=nvptx64", f"-mcpu={chip}", f"-mattr={features}", str(kernel), "-o", "-")
    assert ok.returncode == 0, ok.stderr
    assert f".target {chip}" in ok.stdout
    minimum = pipelines.GPU_CHIP_MIN_PTX[chip]
    if minimum > pipelines.GPU_PTX_VERSION:  # the minimum is exact: one version older fails
        assert features == f"+ptx{minimum}"
        older = max(v for v in PTX_VERSIONS if v < minimum)
        refused = llc("-march=nvptx64", f"-mcpu={chip}", f"-mattr=+ptx{older}", str(kernel))
        assert f"Minimum required PTX version is {minimum // 10}.{minimum % 10}" in refused.stderr


#: PTX ISA versions LLVM 22 knows as target features (times ten), from 8.0 on.
PTX_VERSIONS = (80, 81, 82, 83, 84, 85, 86, 87, 88, 90)


@pytest.mark.parametrize("chip", ["sm_90z", "sm_999", "sm_10", "sm_37", "compute_90", ""])
def test_other_names_are_refused(chip: str) -> None:
    with pytest.raises(ValueError, match=f"unknown GPU architecture '{chip}'"):
        pipelines.check_gpu_chip(chip)
