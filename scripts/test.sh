#!/usr/bin/env bash
# The whole test suite: lit (+FileCheck) over the IR tests, then pytest.
#
# lit runs in the background while pytest runs: pytest's process is single-threaded most of
# the time, so the IR tests use the core it leaves idle (on 2 cores the whole command takes
# about the pytest part alone). lit's report is printed once pytest ends; the exit status is
# non-zero when either failed.
set -uo pipefail
cd "$(dirname "$0")/.."
lit_log=$(mktemp "${TMPDIR:-/tmp}/hector-lit-XXXXXX.log")
trap 'rm -f "$lit_log"' EXIT
lit -sv test >"$lit_log" 2>&1 &
lit_pid=$!
python3 -m pytest -n 2 --dist loadfile --durations=30
pytest_rc=$?
wait "$lit_pid"
lit_rc=$?
echo "== lit (ran beside pytest)"
cat "$lit_log"
echo "== lit exit status $lit_rc, pytest exit status $pytest_rc"
((lit_rc == 0 && pytest_rc == 0))
