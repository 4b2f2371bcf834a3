"""Run a command with this script's stdin; echo its stdout and stderr, then its exit code.

lit's internal shell cannot test an exact exit status (``not`` accepts any failure), so CLI
tests run ``%python %S/Inputs/exit_code.py hector-opt ...`` and check ``exit code: 1``.
"""

import subprocess
import sys

proc = subprocess.run(sys.argv[1:], stdin=sys.stdin, capture_output=True, text=True)
sys.stdout.write(proc.stdout)
sys.stdout.write(proc.stderr)
sys.stdout.write(f"exit code: {proc.returncode}\n")
