"""lit configuration for Hector's FileCheck tests: ``lit -v test/``.

RUN lines call ``hector-opt``, ``hector``, ``FileCheck``, ``not``, ``count`` and ``mlir-opt`` by
name (found on ``PATH``, set up below from the installed packages) and ``%python`` for this
interpreter.
"""

# ruff: noqa: F821  (lit injects ``config`` and ``lit_config``)

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig

import lit.formats


def _package_dir(name: str) -> str:
    """Directory of an installed (possibly namespace) package, without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        lit_config.fatal(f"cannot find the '{name}' package; install Hector with '.[test]'")
    return list(spec.submodule_search_locations)[0]


config.name = "Hector"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["python", "Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = config.test_source_root

_llvm = _package_dir("llvm")
_mlir = _package_dir("mlir")

# This interpreter's scripts (hector, hector-opt) first, then LLVM's and MLIR's tools.
_path = [
    sysconfig.get_path("scripts"),
    os.path.dirname(sys.executable),
    os.path.join(_llvm, "bin"),
    os.path.join(_mlir, "bin"),
]
config.environment["PATH"] = os.pathsep.join(_path + [config.environment.get("PATH", "")])
config.environment["LD_LIBRARY_PATH"] = os.pathsep.join(
    [os.path.join(_llvm, "lib"), os.environ.get("LD_LIBRARY_PATH", "")]
).rstrip(os.pathsep)

# Keep what Python and the tools need from the caller's environment.
for var in ("HOME", "PYTHONPATH", "HECTOR_DEBUG", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

config.substitutions.append(("%python", sys.executable))
