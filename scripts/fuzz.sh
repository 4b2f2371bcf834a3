#!/usr/bin/env bash
# A long run of Hector's own IR fuzzer (python/hector/fuzz.py): mutated lit-test inputs through
# hector-opt's parse + verify and through every named pipeline and pass.
#
#   scripts/fuzz.sh [--inputs N] [--pipelines M] [--seed S] [--out DIR] [--workers W]
#
# Defaults: 6000 inputs, 1500 pipeline runs, seed 0, findings and summary.json under
# build/fuzz/<date>-seed<S>/ (git-ignored): each crashing, hanging or internally failing
# input with the hector-opt command that replays it. Exit status: 0 when no case crashed,
# timed out or failed internally, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
inputs=6000
pipelines=1500
seed=0
workers=$(nproc 2>/dev/null || echo 2)
out=
while (($#)); do
  case $1 in
    --inputs) inputs=$2; shift 2 ;;
    --pipelines) pipelines=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=${out:-build/fuzz/$(date -u +%Y-%m-%d)-seed$seed}
exec python3 -m hector.fuzz --inputs "$inputs" --pipelines "$pipelines" --seed "$seed" \
  --workers "$workers" --out "$out"
