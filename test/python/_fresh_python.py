"""Python code run in a fresh interpreter, for tests of what a process does from its start:
which modules an import or a command line loads, what a registry holds before anything else
ran, what a library writes to file descriptor 2."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) with this interpreter in a new process; its exit status and
    output."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
