#!/usr/bin/env bash
# The whole test suite: lit (+FileCheck) over the IR tests, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
lit -sv test
python3 -m pytest --durations=30
