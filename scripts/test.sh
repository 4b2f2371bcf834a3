#!/usr/bin/env bash
# The whole test suite: lit (+FileCheck) over the IR tests, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
lit -sv test
# Two workers, each test file on one of them (its module fixtures and order kept): most tests
# keep one core busy (Hector's CPU kernels are sequential): two cut the wall time by ~40%.
python3 -m pytest -n 2 --dist loadfile
