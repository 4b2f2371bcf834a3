"""Run Python in a subprocess where some packages cannot be imported, as on a GPU node.

The GPU machines Hector deploys to carry PyTorch and the CUDA driver but neither MLIR nor
torch-mlir. :func:`run_python` starts ``sys.executable`` with a ``sitecustomize`` module (in a
temporary folder put first on ``PYTHONPATH``) that installs a meta-path finder in front of every
other: importing a blocked package, or any module under it, raises ``ModuleNotFoundError`` with
``name`` set to the package, exactly as if it were not installed. A dotted name
(``mlir._mlir_libs``) blocks that subpackage alone, as in a broken install. A ``sitecustomize``
rather than a ``-c`` prelude, so ``-m module`` runs and the child's own subprocesses are blocked
too. (It shadows any other ``sitecustomize`` the interpreter would have imported.)

If a blocked package was already imported before ``sitecustomize`` ran (a ``.pth`` file that
imports it), the child exits with status 97 and says so instead of running with the package.

Usage (another test can reuse it, e.g. for the bundle executor)::

    from _no_mlir import run_python

    proc = run_python("-c", "import hector.runtime.launch")
    assert proc.returncode == 0, proc.stderr
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The compiler's packages, absent on a GPU node.
COMPILER_PACKAGES: tuple[str, ...] = ("mlir", "torch_mlir")

#: Exit status of a child whose blocked package was imported before the block was installed.
ALREADY_IMPORTED = 97

_SITECUSTOMIZE = '''\
"""Blocks imports of {blocked!r} (installed by test/python/_no_mlir.py)."""
import sys

_BLOCKED = {blocked!r}


class _Blocker:
    """Meta-path finder that makes the blocked packages look uninstalled."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        for blocked in _BLOCKED:
            if name == blocked or name.startswith(blocked + "."):
                raise ModuleNotFoundError(
                    f"No module named {{blocked!r}} (blocked by the test, as on a GPU node)",
                    name=blocked,
                )
        return None


_early = sorted(m for m in sys.modules for b in _BLOCKED if m == b or m.startswith(b + "."))
if _early:
    sys.stderr.write(f"_no_mlir: already imported before the block: {{_early}}\\n")
    sys.stderr.flush()
    import os

    os._exit({already})  # site.py would catch SystemExit from sitecustomize
sys.meta_path.insert(0, _Blocker())
'''


def sitecustomize_source(blocked: Sequence[str] = COMPILER_PACKAGES) -> str:
    """The ``sitecustomize.py`` text that blocks imports of the packages ``blocked``."""
    return _SITECUSTOMIZE.format(blocked=tuple(blocked), already=ALREADY_IMPORTED)


def run_python(
    *args: str,
    blocked: Sequence[str] = COMPILER_PACKAGES,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``python3 *args`` with ``blocked`` packages unimportable; return the finished process.

    ``env`` adds to (or overrides) the current environment; ``PYTHONPATH`` is extended, not
    replaced. Output is captured as text; the exit status is not checked.
    """
    with tempfile.TemporaryDirectory(prefix="hector-no-mlir-") as site:
        Path(site, "sitecustomize.py").write_text(sitecustomize_source(blocked))
        child_env = {**os.environ, **(env or {})}
        path = child_env.get("PYTHONPATH", "")
        child_env["PYTHONPATH"] = site + (os.pathsep + path if path else "")
        return subprocess.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            env=child_env,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )
