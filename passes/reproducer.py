"""The reproducer of a failed pipeline: the input IR saved to a file, and the ``hector-opt``
command line that replays the failure on it.

:func:`hector.passes.pipeline.run_pipeline` prints the module (generic form, with locations)
before each run and, when the run fails, writes it with :func:`write_reproducer` and names
:func:`reproducer_command` in the :class:`~hector.passes.diagnostics.PipelineError`.
"""

from __future__ import annotations

import itertools
import os
import re
import tempfile

__all__ = ["reproducer_command", "shell_quote", "write_reproducer"]

_COUNTER = itertools.count()


def shell_quote(text: str) -> str:
    """Single-quote ``text`` for a POSIX shell."""
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _needs_quotes(text: str) -> bool:
    return re.fullmatch(r"[\w@%+=:,./-]+", text) is None


def reproducer_command(path: str, pipeline: str, verify: bool = True) -> str:
    """The ``hector-opt`` command line that replays ``pipeline`` on the file ``path``."""
    command = f"hector-opt {shell_quote(path) if _needs_quotes(path) else path} -p "
    command += shell_quote(pipeline)
    if not verify:
        command += " --no-hector-verify"
    return command


def write_reproducer(asm: str) -> str:
    """Write ``asm`` to a new file ``<tmp>/hector-repro-<pid>-<n>.mlir`` (never an existing
    one) and return its path."""
    directory = tempfile.gettempdir()
    while True:
        path = os.path.join(directory, f"hector-repro-{os.getpid()}-{next(_COUNTER)}.mlir")
        try:
            with open(path, "x", encoding="utf-8") as f:
                f.write(asm)
            return path
        except FileExistsError:
            continue
