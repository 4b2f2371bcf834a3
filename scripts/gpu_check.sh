#!/usr/bin/env bash
# GPU check: run on a lent GPU machine, in under 8 minutes, writing JSON records and a log under
# $OUT (default: a fresh temporary directory). Steps, each skipped when the time left is too
# short, none stopping the others:
#   1. machine info; install Hector (unless HECTOR_SKIP_INSTALL=1) and cuda-bindings;
#   2. the emitted PTX (RGCN slice, zero-copy gather kernels) assembles with ptxas;
#   3. GPU tests: pytest -m gpu (unified tensors, zero-copy gather correctness, RGCN/RGAT/HGT
#      forward+backward on CUDA vs PyG on CUDA through hector.gpu_exec, a bench smoke run),
#      skipped without CUDA;
#   4. hector bench gather: unified zero-copy gather (aligned, unaligned) vs index_select + copy;
#   5. hector bench gnn --device cuda for rgcn/rgat/hgt on synthetic aifb/mutag/bgs/am, only if
#      that benchmark accepts --device cuda.
# Summary lines start with "== ". Exit status: 0 if every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
log="$OUT/gpu_check.log"
exec > >(tee "$log") 2>&1
BUDGET="${GPU_CHECK_BUDGET_S:-460}"   # whole script, seconds (8 min minus margin)
start=$SECONDS
status=0
left() { echo $((BUDGET - (SECONDS - start))); }
step_ok() { echo "== $1: OK"; }
step_fail() { echo "== $1: FAILED ($2)"; status=1; }
# run NAME SECONDS CMD...: run with a timeout capped by the time left (skip if < 20 s left)
run() {
  local name=$1 want=$2; shift 2
  local t; t=$(left)
  if (( t < 20 )); then echo "== $name: SKIPPED (time budget spent)"; return 0; fi
  (( want > t - 5 )) && want=$((t - 5))
  echo "== $name (timeout ${want}s): $*"
  timeout "$want" "$@"; local rc=$?
  if (( rc == 0 )); then step_ok "$name"; elif (( rc == 124 )); then step_fail "$name" timeout;
  else step_fail "$name" "exit $rc"; fi
  return 0
}

echo "== machine"
nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv 2>/dev/null \
  || echo "no nvidia-smi"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available())"

if [[ "${HECTOR_SKIP_INSTALL:-0}" != 1 ]]; then
  run install 240 python3 -m pip install -q -e '.[test]'
fi
if command -v nvidia-smi >/dev/null 2>&1 && ! python3 -c "import cuda.bindings.driver" 2>/dev/null
then
  run cuda-bindings 90 python3 -m pip install -q cuda-bindings
fi
python3 -c "import cuda.bindings.driver as d; print('cuda-bindings OK')" \
  || echo "cuda-bindings missing: zero-copy gathers and kernel launches will be skipped/failed"

echo "== PTX"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
arch=${arch:-90}
hector compile --model rgcn --in-dim 64 --out-dim 64 --etypes 8 --emit ptx -o "$OUT/rgcn.ptx" \
  && grep -c '\.entry' "$OUT/rgcn.ptx"
python3 - "$OUT" <<'EOF'
import sys
from hector.unified import gather_kernel_ptx
for align in ("warp128", "none"):
    with open(f"{sys.argv[1]}/gather_{align}_w100.ptx", "w") as f:
        f.write(gather_kernel_ptx(100, align))
EOF
if command -v ptxas >/dev/null 2>&1; then
  for f in "$OUT"/*.ptx; do
    if ptxas -arch="sm_${arch}" "$f" -o "${f%.ptx}.cubin"; then echo "ptxas OK: $(basename "$f")";
    else step_fail ptxas "$(basename "$f")"; fi
  done
else
  echo "ptxas not found: PTX not assembled (the driver JIT still loads it)"
fi

run gpu-tests 150 python3 -m pytest -q -m gpu test/python -rs \
  --junitxml="$OUT/gpu_tests.xml"

run bench-gather 150 hector bench gather --json "$OUT/gather.json" --plot "$OUT/gather.png"

if hector bench gnn --help 2>/dev/null | grep -q -- '--device {cpu,cuda}'; then
  mkdir -p "$OUT/gnn"
  # Smallest datasets first, every model on each, so a short budget still covers all three
  # models (Hector runs on CUDA through hector.gpu_exec); am (12M edges) gets a longer cap.
  for ds in synthetic:aifb synthetic:mutag synthetic:bgs synthetic:am; do
    cap=40; [[ $ds == synthetic:am ]] && cap=75
    for model in rgcn rgat hgt; do
      run "gnn-$model-${ds#synthetic:}" "$cap" hector bench gnn --device cuda --model "$model" \
        --dataset "$ds" --mode training --runs 3 --no-memory \
        --json "$OUT/gnn/${model}_${ds#synthetic:}.json"
    done
  done
else
  echo "== gnn: SKIPPED (hector bench gnn does not take --device cuda)"
fi

echo "== done in $((SECONDS - start)) s, status $status; results in $OUT"
ls -l "$OUT"
exit $status
