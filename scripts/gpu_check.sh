#!/usr/bin/env bash
# GPU check: run on a lent GPU machine (see DEVELOPERS.md), in under 8 minutes, writing
# results under $OUT. Today Hector emits PTX but has no kernel launcher yet (that is the
# unified-tensors/GPU issue), so this script checks what can be checked on real hardware:
#   1. the emitted PTX assembles with the machine's ptxas for its own architecture;
#   2. the CPU path's numerics still hold on this machine (the full pytest suite).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
log="$OUT/gpu_check.log"
exec > >(tee "$log") 2>&1

echo "== machine"; nvidia-smi || echo "no nvidia-smi"
python3 -m pip install -q -e '.[test]' || { echo "install failed"; exit 1; }

echo "== PTX for the RGCN slice"
hector compile --model rgcn --in-dim 64 --out-dim 64 --etypes 8 --emit ptx -o "$OUT/rgcn.ptx"
grep -c '\.entry' "$OUT/rgcn.ptx"
if command -v ptxas >/dev/null 2>&1; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
  ptxas -arch="sm_${arch:-90}" "$OUT/rgcn.ptx" -o "$OUT/rgcn.cubin" && echo "ptxas: OK (sm_${arch})"
else
  echo "ptxas not found: PTX not assembled"
fi

echo "== tests"
timeout 400 bash scripts/test.sh > "$OUT/tests.log" 2>&1; echo "tests rc=$?"
tail -3 "$OUT/tests.log"
