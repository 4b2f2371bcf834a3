#!/usr/bin/env bash
# A long run of Hector's own IR fuzzer (the fuzz/hector_fuzz package and its strategies):
# mutated lit-test inputs, modules generated from the dialects' specs, depth and size extremes,
# mixed Hector/upstream pipelines with random options, and --verify-diagnostics runs.
#
#   scripts/fuzz.sh [--cases N] [--strategies A,B] [--seed S] [--out DIR] [--workers W]
#                   [--timeout T] [--inputs N] [--pipelines M]
#
# Defaults: 20000 cases over every strategy (mutation,grammar,extremes,pass-options,
# diagnostics), seed 0, findings and summary.json under build/fuzz/<date>-seed<S>/
# (git-ignored): each crashing, hanging or internally failing input with the hector-opt command
# that replays it. --inputs/--pipelines add mutation cases (parse-and-verify, pipeline runs).
# --strategies loaders fuzzes the dataset and feature loaders' files instead (npy headers,
# torch.save archives, TSV encodings, IGBH folders, labels; see docs/contributing.md#fuzzing).
# Exit status: 0 when no case crashed, timed out or failed internally, 1 otherwise.
# The Python-API strategies run by name only: --strategies differential,shapes,tamper
# (random programs vs a float64 reference, argument changes between calls, cache tampering).
set -euo pipefail
cd "$(dirname "$0")/.."
cases=20000
strategies=mutation,grammar,extremes,pass-options,diagnostics
seed=0
workers=$(nproc 2>/dev/null || echo 2)
timeout=60
out=
extra=()
while (($#)); do
  case $1 in
    --cases) cases=$2; shift 2 ;;
    --strategies) strategies=$2; shift 2 ;;
    --inputs|--pipelines) extra+=("$1" "$2"); shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=${out:-build/fuzz/$(date -u +%Y-%m-%d)-seed$seed}
exec python3 -m hector_fuzz --cases "$cases" --strategies "$strategies" --seed "$seed" \
  --workers "$workers" --timeout "$timeout" --out "$out" ${extra[@]+"${extra[@]}"}
