#!/usr/bin/env bash
# GPU check for a lent GPU machine as it really is: Python 3.12, torch 2.11 (CUDA 13),
# cuda-bindings, pytest, pytest-timeout, torch-geometric; no MLIR, no network, nothing installed.
# It runs from the checkout: PYTHONPATH points at a symlink layout of the package (the wheel
# layout of pyproject.toml), and what the GPU machine cannot build comes from the carry that
# scripts/build_carry.sh made here ($HECTOR_CARRY, default .carry/): the native runtime
# (through $HECTOR_RUNTIME_LIBRARY), prebuilt gather kernels ($HECTOR_PREBUILT_KERNELS) and
# ahead-of-time bundles. Device call: run(command="scripts/gpu_check.sh", carry=[".carry"],
# timeout_s=580), after scripts/build_carry.sh and scripts/gpu_check.sh --dry-run here.
#
# Sections, each under a timeout capped by the time left (GPU_CHECK_BUDGET_S, default 540 s),
# none stopping the others; GPU_CHECK_SECTIONS=a,b,... runs only those (the others are
# SKIPPED), e.g. GPU_CHECK_SECTIONS=machine,imports,offload-bench for issue 14 alone:
#   machine       GPU, driver, Python/torch/cuda-bindings versions, whether MLIR is importable;
#   imports       hector and its runtime layer import; the carried native runtime loads;
#   ptx-load      every carried PTX through ptxas -v and the driver (cuModuleLoadData), timed;
#   gather-tests  pytest -m gpu test_unified.py: zero-copy gather against index_select;
#   bundles       python3 -m hector_bench.bundle_check --bundles DIR --out FILE: RGCN/RGAT/HGT
#                 forward+backward through prebuilt bundles against PyG on CUDA (same weights)
#                 and a timing table (reported "not available" while that module is missing).
#                 Its contract: exit 0 only when every comparison holds; a human-readable
#                 report with the timing table on stdout (its first 80 lines go into
#                 summary.txt); JSON records in FILE. DIR is built by build_carry.sh through
#                 hector_bench.bundle_check.build_check_bundles(out_dir);
#   gather-bench  hector bench gather (zero-copy gather against index_select + copy);
#   tiled-gemm    the shared-memory tiled GEMMs (scheduled gemm_templates) against the untiled
#                 ones on RGCN's message product and weight gradient, same inputs, both
#                 checked against torch, timed (CUDA events), GFLOP/s and speed-up in
#                 tiled_gemm.json; for the bf16 message products also the tensor-core kernel
#                 (kind "mma": mma.sync m16n8k16, f32 accumulators) and torch.mm in bf16 on
#                 the gathered rows (kind "torch.mm", the rate to compare with). Its PTX comes
#                 from $CARRY/tiled_gemm/, written here after
#                 build_carry.sh by
#                 python3 -c "from hector_bench.tiled_gemm_kernels import write_bench_kernels as w;
#                 w('.carry/tiled_gemm')" (NOT-AVAILABLE without it);
#   gpu-tests     pytest -m gpu on the other test files (those needing MLIR reported as such),
#                 among them the offload cache on CUDA: bit-identical training through pinned
#                 staging, and torch.cuda's peak of allocated bytes falling with what it offloads;
#   offload-bench hector bench offload --device cuda on the heavier GPT (batch 8): keep-all,
#                 checkpoint, save_on_cpu, hector-all, hector-adaptive; step time and torch.cuda's
#                 peak of allocated bytes in offload_cuda.json (issue 14's CUDA half).
#   offload-models hector bench offload --device cuda on the models users bring (TransformerEncoder,
#                 ViT; Hugging Face GPT-2 and Llama where transformers imports): keep-all and
#                 hector-adaptive and hector-budget (memory_budget=0.5), records
#                 offload_cuda_<model>.json.
# pytest runs under pytest-timeout (--timeout per test) when installed.
#
# $OUT receives exactly two files: summary.txt (one line per section, then the bundle
# report) and gpu_check.tar.gz (every log, JUnit XML and JSON record). A section is PASSED,
# FAILED, TIMEOUT, SKIPPED (budget spent), ALL-SKIPPED (a test group that passed nothing),
# NEEDS-MLIR (failed only by importing the absent compiler) or NOT-AVAILABLE. Exit status: 0
# when none is FAILED, TIMEOUT or ALL-SKIPPED. A run's statuses and figures go into docs/gpu.md
# (every GPU run on record) in the same change.
#
# scripts/gpu_check.sh --dry-run (here, no GPU needed) reports the size of what a device call
# would carry (tracked + untracked-not-ignored files, shared/, the carry; at most 64 MiB), the
# files it would leave in $OUT (at most 8, found by packing a stand-in result), checks that this
# script installs nothing from a network and that the package imports from the layout with the
# carried runtime. Exit status 0 when all of that holds.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY="${HECTOR_CARRY:-.carry}"
[[ $CARRY = /* ]] || CARRY="$ROOT/$CARRY"
MAX_CARRY_BYTES=$((64 * 1024 * 1024))
MAX_OUT_FILES=8
TMPD=$(mktemp -d)

# ---- pieces shared by the real run and the dry run ----------------------------------------

# make_layout DIR: the package as the wheel lays it out (pyproject.toml's
# [tool.scikit-build.wheel.packages]), as symlinks into the checkout.
make_layout() {
  python3 - "$ROOT" "$1" <<'EOF'
import os, sys, tomllib
root, tree = sys.argv[1], sys.argv[2]
with open(os.path.join(root, "pyproject.toml"), "rb") as f:
    packages = tomllib.load(f)["tool"]["scikit-build"]["wheel"]["packages"]
for package, source in sorted(packages.items()):  # parents first
    target = os.path.join(tree, package)
    os.makedirs(target, exist_ok=True)
    for entry in sorted(os.listdir(os.path.join(root, source))):
        link = os.path.join(target, entry)
        if entry != "__pycache__" and not os.path.lexists(link):
            os.symlink(os.path.join(root, source, entry), link)
EOF
}

# use_layout: environment for running Hector from the checkout with the carry.
use_layout() {
  make_layout "$TMPD/site" || return 1
  export PYTHONPATH="$TMPD/site" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
  export HECTOR_RUNTIME_LIBRARY="$CARRY/lib/libhector_runtime.so"
  export HECTOR_PREBUILT_KERNELS="$CARRY/kernels"
  # ptxas (for the load logs) lives with nvcc, not always on PATH.
  if [[ -d /usr/local/cuda/bin ]]; then export PATH="$PATH:/usr/local/cuda/bin"; fi
}

# pack WORK OUT: every result in WORK into OUT's two files.
pack() {
  cp "$1/summary.txt" "$2/summary.txt"
  tar -czf "$2/gpu_check.tar.gz" -C "$1" .
}

# network_installs FILE: lines of FILE (comments aside) that would fetch from a network.
network_installs() {
  local pip='pip[0-9.]* +(install|download)' fetch='(curl|wget) |git +clone'
  grep -nE "$pip|$fetch" "$1" | grep -vE '^[0-9]+: *#' | grep -vE -- '--no-index' || true
}

# ---- dry run --------------------------------------------------------------------------------

dry_run() {
  local ok=0 bytes files
  echo "== what a device call would carry"
  read -r bytes files < <(python3 - "$ROOT" "$CARRY" <<'EOF'
import os, subprocess, sys
root, carry = sys.argv[1], sys.argv[2]
listed = subprocess.run(
    ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
    cwd=root, capture_output=True, check=True,
).stdout.decode().split("\0")
paths = {os.path.join(root, p) for p in listed if p}
for extra in (os.path.join(root, "shared"), carry):  # shared/ and the carry travel whole
    for folder, _, names in os.walk(extra):
        paths.update(os.path.join(folder, n) for n in names)
sizes = [os.lstat(p).st_size for p in paths if os.path.lexists(p)]
print(sum(sizes), len(sizes))
EOF
  )
  echo "carry: $bytes bytes in $files files (limit $MAX_CARRY_BYTES bytes = 64 MiB)"
  if ((bytes > MAX_CARRY_BYTES)); then
    echo "PROBLEM: what would travel exceeds 64 MiB"; ok=1
  fi
  if [[ -f $CARRY/lib/libhector_runtime.so ]]; then
    echo "carried: native runtime, $(find "$CARRY/kernels" -name '*.ptx' 2>/dev/null | wc -l)" \
      "gather kernels, $(find "$CARRY/bundles" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" \
      "bundles ($CARRY)"
  else
    echo "PROBLEM: $CARRY/lib/libhector_runtime.so is missing: run scripts/build_carry.sh"
    ok=1
  fi
  echo "tiled GEMM kernels carried: $(find "$CARRY/tiled_gemm" -name '*.ptx' 2>/dev/null | wc -l)"

  echo "== files left in \$OUT"
  mkdir -p "$TMPD/work/logs" "$TMPD/out"
  printf 'stand-in\n' | tee "$TMPD/work/summary.txt" "$TMPD/work/logs/a.log" >/dev/null
  pack "$TMPD/work" "$TMPD/out"
  local out_files bad_names
  out_files=$(find "$TMPD/out" -type f | wc -l)
  bad_names=$(find "$TMPD/out" -mindepth 1 | sed "s|^$TMPD/out/||" | grep -vE '^[A-Za-z0-9._-]+$')
  echo "out files: $out_files ($(ls "$TMPD/out" | tr '\n' ' ')) (limit $MAX_OUT_FILES)"
  if ((out_files > MAX_OUT_FILES)) || [[ -n $bad_names ]]; then
    echo "PROBLEM: more than $MAX_OUT_FILES files or names the device tool refuses"; ok=1
  fi

  echo "== network installs in $(basename "$0")"
  local found
  found=$(network_installs "$0")
  if [[ -n $found ]]; then
    echo "PROBLEM: this script would fetch from a network:"; echo "$found"; ok=1
  else
    echo "network installs: none"
  fi

  echo "== package layout"
  # As on the GPU machine: no site-packages hooks (an editable install here would win over
  # PYTHONPATH; -S drops it), and mlir / torch_mlir blocked by test/python/_no_mlir.py.
  if [[ -f $CARRY/lib/libhector_runtime.so && -f $ROOT/test/python/_no_mlir.py ]]; then
    local site_packages
    site_packages=$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    mkdir -p "$TMPD/block"
    python3 -c "import sys; sys.path.insert(0, 'test/python'); import _no_mlir
print(_no_mlir.sitecustomize_source())" >"$TMPD/block/sitecustomize.py"
    if (use_layout && cd "$TMPD" &&
      PYTHONPATH="$TMPD/block:$PYTHONPATH:$site_packages" python3 -S -c "
import sitecustomize
import hector, hector.data.graph, hector.runtime.launch, hector.data.unified
from hector.runtime import native
assert hector.__file__.startswith('$TMPD/site/'), hector.__file__
assert native.library_path() == '$CARRY/lib/libhector_runtime.so', native.library_path()
print('layout: hector imports from', hector.__file__, 'without MLIR; runtime ABI',
      native.abi_version())
"); then :; else echo "PROBLEM: the package does not import from the layout"; ok=1; fi
  else
    echo "layout: not checked (no carried runtime, or no test/python/_no_mlir.py)"
  fi
  echo "== dry run: $([[ $ok == 0 ]] && echo OK || echo PROBLEMS)"
  return $ok
}

if [[ ${1:-} == --dry-run ]]; then
  dry_run; rc=$?
  rm -rf "$TMPD"
  exit $rc
elif [[ $# -gt 0 ]]; then
  echo "usage: scripts/gpu_check.sh [--dry-run]" >&2; exit 2
fi

# ---- the real run ---------------------------------------------------------------------------

OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
WORK="$TMPD/work"
mkdir -p "$WORK"
BUDGET="${GPU_CHECK_BUDGET_S:-540}"
TEST_TIMEOUT="${GPU_CHECK_TEST_TIMEOUT_S:-90}"
start=$SECONDS
failed=0
: >"$WORK/sections.txt"
left() { echo $((BUDGET - (SECONDS - start))); }

# record NAME STATUS SECONDS DETAIL: one summary line; FAILED and TIMEOUT fail the check.
record() {
  printf '%-13s %-14s %4ss  %s\n' "$1" "$2" "$3" "$4" | tee -a "$WORK/sections.txt"
  if [[ $2 == FAILED || $2 == TIMEOUT || $2 == ALL-SKIPPED ]]; then failed=1; fi
  return 0
}

# run_capped NAME CAP CMD...: run CMD with a timeout of CAP seconds (less when the budget is
# short), its output appended to NAME.log; sets section_rc and section_took. Returns 1, having
# recorded SKIPPED, when too little time is left to start it.
run_capped() {
  local name=$1 cap=$2; shift 2
  if [[ -n ${GPU_CHECK_SECTIONS:-} && ",$GPU_CHECK_SECTIONS," != *",$name,"* ]]; then
    record "$name" SKIPPED 0 "not in GPU_CHECK_SECTIONS"; return 1
  fi
  local t; t=$(left)
  if ((t < 15)); then record "$name" SKIPPED 0 "time budget spent"; return 1; fi
  ((cap > t - 5)) && cap=$((t - 5))
  echo "== $name (timeout ${cap}s): $*" >>"$WORK/$name.log"
  local t0=$SECONDS
  timeout -k 5 "$cap" "$@" >>"$WORK/$name.log" 2>&1
  section_rc=$?
  section_took=$((SECONDS - t0))
  return 0
}

# status_of RC: PASSED, TIMEOUT or FAILED.
status_of() {
  if (($1 == 0)); then echo PASSED; elif (($1 == 124 || $1 == 137)); then echo TIMEOUT
  else echo FAILED; fi
}

# section NAME CAP CMD...: run_capped, then one summary line (detail: $DETAIL, or the exit).
# A failure that is the import of the compiler (absent on the GPU image) is NEEDS-MLIR.
section() {
  local name=$1
  run_capped "$@" || return 0
  local status detail=${DETAIL:-}
  status=$(status_of "$section_rc")
  if [[ $status == FAILED ]] && grep -qE "No module named '(torch_)?mlir'" "$WORK/$name.log"
  then status=NEEDS-MLIR; fi
  [[ $status == PASSED ]] || detail="exit $section_rc, see $name.log${detail:+; $detail}"
  record "$name" "$status" "$section_took" "$detail"
}

# pytest_section NAME CAP PYTEST-ARGS...: pytest under pytest-timeout, its JUnit XML kept and
# its counts in the summary. A run whose every failure is an import of the compiler (absent on
# the GPU image) is NEEDS-MLIR, not FAILED; one that passed nothing is ALL-SKIPPED, a failure.
pytest_section() {
  local name=$1 cap=$2; shift 2
  local per_test=()
  if python3 -c "import pytest_timeout" 2>/dev/null; then per_test=(--timeout "$TEST_TIMEOUT")
  else echo "pytest-timeout missing: no per-test timeout" >>"$WORK/$name.log"; fi
  run_capped "$name" "$cap" python3 -m pytest -q -rs -p no:cacheprovider "${per_test[@]}" \
    --junitxml="$WORK/$name.xml" "$@" || return 0
  local status passed=0 nbad=0 mlir=0 skipped=0
  status=$(status_of "$section_rc")
  if [[ -f $WORK/$name.xml ]]; then
    read -r passed nbad mlir skipped < <(python3 "$TMPD/junit_counts.py" "$WORK/$name.xml")
  fi
  if [[ $status == FAILED ]] && ((nbad > 0 && nbad == mlir)); then status=NEEDS-MLIR; fi
  # On a GPU machine a group that only skips has checked nothing (CUDA not seen, say).
  if [[ $status == PASSED ]] && ((passed == 0)); then status=ALL-SKIPPED; fi
  record "$name" "$status" "$section_took" \
    "$passed passed, $nbad failed or errors ($mlir need MLIR), $skipped skipped"
}

finish() {
  trap - EXIT INT TERM
  {
    echo "Hector GPU check, $(date -u +%FT%TZ), $((SECONDS - start)) s of a ${BUDGET} s budget"
    echo "carry: $(head -1 "$CARRY/MANIFEST.txt" 2>/dev/null || echo 'no manifest')"
    echo "status: $([[ $failed == 0 ]] && echo OK || echo FAILED)"
    echo
    cat "$WORK/sections.txt"
    if [[ -s $WORK/bundles.report ]]; then
      echo
      echo "== bundle check report (hector_bench.bundle_check)"
      head -80 "$WORK/bundles.report"
    fi
  } >"$WORK/summary.txt"
  pack "$WORK" "$OUT"
  cat "$WORK/summary.txt"
  echo "results: $OUT/summary.txt, $OUT/gpu_check.tar.gz"
  rm -rf "$TMPD"
  exit $failed
}
trap finish EXIT
trap 'record interrupted TIMEOUT 0 "stopped by a signal"; exit' INT TERM

# The Python pieces, as files (a heredoc cannot run under `timeout`).
cat >"$TMPD/junit_counts.py" <<'EOF'
import sys
import xml.etree.ElementTree as ET

cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
bad = [c for c in cases if c.find("failure") is not None or c.find("error") is not None]
skipped = sum(c.find("skipped") is not None for c in cases)


def needs_mlir(case):
    text = "".join((e.get("message") or "") + (e.text or "") for e in case)
    return "No module named 'mlir'" in text or "No module named 'torch_mlir'" in text


print(len(cases) - len(bad) - skipped, len(bad), sum(map(needs_mlir, bad)), skipped)
EOF

cat >"$TMPD/machine.py" <<'EOF'
import importlib.util, platform, sys

print("python", sys.version.split()[0], "glibc", platform.libc_ver()[1])
import torch

print("torch", torch.__version__, "cuda", torch.version.cuda, "available",
      torch.cuda.is_available())
for name in ("cuda.bindings", "torch_geometric", "pytest_timeout", "mlir", "torch_mlir"):
    try:
        found = importlib.util.find_spec(name) is not None
    except ImportError:
        found = False
    print(name, "importable" if found else "absent")
EOF

cat >"$TMPD/imports.py" <<'EOF'
import sys

import hector, hector.dialects, hector.data.graph, hector.runtime.launch, hector.data.unified
from hector.runtime import native

print("hector from", hector.__file__)
print("native runtime ABI", native.abi_version(), "at", native.library_path())
g = hector.random_graph(1000, 5000, 4, seed=0)
print("HeteroGraph", g)
print("compiler loaded:", sorted({m.split(".")[0] for m in sys.modules} & {"mlir", "torch_mlir"}))
EOF

# ptx-load: ptxas -v (registers, spills), the driver JIT's own info/error log, and the load of
# each carried PTX through the launcher's driver (cuModuleLoadData), timed.
cat >"$TMPD/ptx_load.py" <<'EOF'
import ctypes, glob, json, os, shutil, subprocess, sys, time

from hector.runtime import launch


def jit_log(ptx):
    """cuModuleLoadDataEx with the JIT's info and error logs (CUjit_option 3-6, verbose 12)."""
    cu = ctypes.CDLL("libcuda.so.1")
    info, err = ctypes.create_string_buffer(1 << 16), ctypes.create_string_buffer(1 << 16)
    opts = (ctypes.c_int * 5)(3, 4, 5, 6, 12)
    vals = (ctypes.c_void_p * 5)(ctypes.addressof(info), len(info), ctypes.addressof(err),
                                 len(err), 1)
    module = ctypes.c_void_p()
    rc = cu.cuModuleLoadDataEx(ctypes.byref(module), ctypes.c_char_p(ptx), 5, opts, vals)
    if rc == 0:
        cu.cuModuleUnload(module)
    return {"jit_rc": rc, "jit_info": info.value.decode(errors="replace"),
            "jit_error": err.value.decode(errors="replace")}


carry, work = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(f"{carry}/kernels/*.ptx"))
files += sorted(glob.glob(f"{carry}/bundles/**/*.ptx", recursive=True))
driver = launch.CudaDriver()
arch = driver.arch()
print("device", arch, "PTX files", len(files))
ptxas, records, bad = shutil.which("ptxas"), [], 0
for path in files:
    rec = {"file": os.path.relpath(path, carry), "arch": arch}
    with open(path, encoding="utf-8") as f:
        ptx = f.read()
    if ptxas:
        cmd = [ptxas, f"-arch={arch}", "-v", path, "-o", os.devnull]
        res = subprocess.run(cmd, capture_output=True, text=True)
        rec["ptxas_rc"], rec["ptxas_log"] = res.returncode, res.stderr.strip()
        bad += res.returncode != 0
    t0 = time.perf_counter()
    try:
        module = driver.load_module(ptx.encode() + b"\0")
        rec["entries"] = launch.ptx_entries(ptx)
        for entry in rec["entries"]:
            driver.get_function(module, entry)
        rec["load_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
    except launch.LaunchError as err:
        rec["load_error"] = str(err)
        bad += 1
    try:
        rec.update(jit_log(ptx.encode() + b"\0"))
    except Exception as err:  # diagnostics only: the load above is the check
        rec["jit_log_error"] = repr(err)
    logs = ("ptxas_log", "jit_info", "jit_error")
    print(json.dumps({k: v for k, v in rec.items() if k not in logs}))
    for key in logs:
        if rec.get(key):
            print(f"  {key}: " + rec[key].replace("\n", "\n  "))
    records.append(rec)
with open(f"{work}/ptx_load.json", "w") as f:
    json.dump(records, f, indent=1)
print(f"{len(files) - bad} of {len(files)} PTX files assembled and loaded")
sys.exit(1 if bad or not files else 0)
EOF

if ! use_layout; then record layout FAILED 0 "could not build the package layout"; exit 1; fi
echo "OUT=$OUT budget=${BUDGET}s layout=$PYTHONPATH carry=$CARRY"

DETAIL="$(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader \
  2>/dev/null | head -1)" section machine 20 bash -c '
nvidia-smi || echo "no nvidia-smi"
python3 "$1"
ls -l "$HECTOR_RUNTIME_LIBRARY"
cat "$2/MANIFEST.txt" 2>/dev/null || echo "no carry manifest"
' machine "$TMPD/machine.py" "$CARRY"

DETAIL="" section imports 30 python3 "$TMPD/imports.py"

DETAIL="$(find "$CARRY" -name '*.ptx' | wc -l) PTX files" \
  section ptx-load 60 python3 "$TMPD/ptx_load.py" "$CARRY" "$WORK"

pytest_section gather-tests 60 -m gpu test/python/test_unified.py

# bundles: the bundle executor's own check, once it exists (hector_bench.bundle_check).
has_bundle_check='import importlib.util as u, sys
sys.exit(u.find_spec("hector_bench.bundle_check") is None)'
if ! python3 -c "$has_bundle_check" 2>/dev/null; then
  record bundles NOT-AVAILABLE 0 "no hector_bench.bundle_check module in this checkout"
elif [[ ! -d $CARRY/bundles ]]; then
  record bundles NOT-AVAILABLE 0 "no bundles carried ($CARRY/bundles): run build_carry.sh"
else
  DETAIL="report below" section bundles 200 python3 -m hector_bench.bundle_check \
    --bundles "$CARRY/bundles" --out "$WORK/bundle_check.json"
  grep -v "^== bundles" "$WORK/bundles.log" >"$WORK/bundles.report" 2>/dev/null
fi

DETAIL="" section gather-bench 45 python3 -m hector.tools.cli bench gather --device cuda --runs 5 \
  --json "$WORK/gather_bench.json"

# tiled-gemm: the scheduled (shared-memory tiled) GEMM against the untiled kernel.
cat >"$TMPD/tiled_gemm.py" <<'EOF'
import json, os, sys

import torch

from hector.runtime.launch import Launcher, MemRef

folder, work = sys.argv[1], sys.argv[2]
with open(os.path.join(folder, "kernels.json"), encoding="utf-8") as f:
    kernels = json.load(f)
launcher, records, bad = Launcher(), [], 0
for shape in sorted({k["shape"] for k in kernels}):
    runs = [k for k in kernels if k["shape"] == shape]
    s = runs[0]
    xty = s["variant"] == "xty"
    half = torch.bfloat16 if s.get("dtype") == "bf16" else torch.float32
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, k, n, slices = s["rows"], s["k"], s["n"], s["slices"]
    a = torch.randn(s["nodes"], k, device="cuda", generator=gen).to(half)
    w = torch.randn(*((rows, n) if xty else (slices, k, n)), device="cuda", generator=gen)
    w = w if xty else w.to(half)
    gather = torch.randint(0, s["nodes"], (rows,), device="cuda", generator=gen)
    types = torch.randint(0, slices, (rows,), device="cuda", generator=gen).sort().values
    want = torch.zeros(*((slices, k, n) if xty else (rows, n)), device="cuda")
    bounds = torch.searchsorted(types, torch.arange(slices + 1, device="cuda")).tolist()
    for t in range(slices):  # in f32 on the stored values
        lo, hi = bounds[t], bounds[t + 1]
        if xty:
            want[t] = a[gather[lo:hi]].float().T @ w[lo:hi]
        else:
            want[lo:hi] = a[gather[lo:hi]].float() @ w[t].float()
    tensors = {"a": a, "weight": w, "gather_index": gather.int(), "weight_index": types.int()}
    times = {}
    for run in runs:
        with open(os.path.join(folder, run["file"]), encoding="utf-8") as f:
            ptx = f.read()
        tensors["out"] = torch.zeros_like(want)
        for name, dims in run["temps"].items():
            tensors[name] = torch.zeros(*dims, device="cuda")
        zeroed = [tensors[name] for name in ("out", *run["temps"])]
        mems = {name: MemRef.from_tensor(t) for name, t in tensors.items()}

        def launch():
            for z in zeroed:  # the weight gradient accumulates: every run starts from zeros
                z.zero_()
            for x in run["launches"]:
                launcher.launch(ptx, x["entry"], (x["grid"], 1, 1), (x["block"], 1, 1),
                                [mems[r] for r in x["args"]])

        launch()
        torch.cuda.synchronize()
        out = tensors["out"]
        err = ((out - want).abs().max() / want.abs().max().clamp(min=1)).item()
        for _ in range(3):
            launch()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            launch()
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / 20
        times[run["kind"]] = ms
        flops = 2 * rows * k * n
        rec = {key: v for key, v in run.items() if key != "file"}
        rec.update(ms=round(ms, 4), gflops=round(flops / ms / 1e6, 1), rel_err=err)
        bad += not err < 1e-4
        records.append(rec)
        print(json.dumps(rec))
    if half == torch.bfloat16:  # torch.mm's rate on the same product (rows gathered first)
        x, w0 = a[gather], w[0].contiguous()
        for _ in range(3):
            torch.mm(x, w0)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            torch.mm(x, w0)
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / 20
        times["torch.mm"] = ms
        rec = {"shape": shape, "kind": "torch.mm", "dtype": "bf16", "rows": rows, "k": k, "n": n}
        rec.update(ms=round(ms, 4), gflops=round(2 * rows * k * n / ms / 1e6, 1))
        records.append(rec)
        print(json.dumps(rec))
    if {"tiled", "untiled"} <= set(times):
        print(f"{shape}: tiled {times['tiled']:.3f} ms, untiled {times['untiled']:.3f} ms, "
              f"speed-up {times['untiled'] / times['tiled']:.2f}x")
    if {"mma", "tiled"} <= set(times):
        print(f"{shape}: tensor cores {times['mma']:.3f} ms, {times['tiled'] / times['mma']:.2f}x "
              f"the FMA tiled kernel, {times['torch.mm'] / times['mma']:.2f}x torch.mm's rate")
with open(os.path.join(work, "tiled_gemm.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "records": records}, f, indent=1)
sys.exit(1 if bad or not records else 0)
EOF
if [[ -f $CARRY/tiled_gemm/kernels.json ]]; then
  DETAIL="see tiled-gemm.log, tiled_gemm.json" section tiled-gemm 90 \
    python3 "$TMPD/tiled_gemm.py" "$CARRY/tiled_gemm" "$WORK"
else
  record tiled-gemm NOT-AVAILABLE 0 "no $CARRY/tiled_gemm/kernels.json (see the header)"
fi

# The other files with GPU tests (a file without any would only add its collection errors).
mapfile -t gpu_files < <(grep -l 'mark\.gpu' test/python/test_*.py | grep -v test_unified.py)
pytest_section gpu-tests 90 -m gpu --continue-on-collection-errors "${gpu_files[@]}"

# offload-bench: issue 14 on the GPU, the heavier GPT trained by every system, each in a fresh
# process: step time, torch.cuda's peak of allocated bytes, the store's bandwidth against this
# machine's disk; the adaptive plan made without MLIR (absent here), the same decisions.
DETAIL="record in offload_cuda.json" section offload-bench 120 \
  python3 -m hector.tools.cli bench offload --device cuda --model gpt --layers 4 --hidden 1024 \
  --heads 16 --seq 512 --batch 8 --steps 4 --warmup 2 --raw-probes 1 \
  --systems keep-all,checkpoint,save_on_cpu,hector-all,hector-adaptive \
  --json "$WORK/offload_cuda.json" --frontier "$WORK/offload_cuda_frontier.png"

# offload-models: the models users bring (issue 38) on the GPU, keep-all against the adaptive
# cache, each in a fresh process: nn.TransformerEncoder and the ViT always, Hugging Face's GPT-2
# and Llama where transformers imports (the image may lack it: then only the two).
user_models=torch-encoder,vit
if python3 -c "import transformers" 2>/dev/null; then user_models+=,hf-gpt2,hf-llama; fi
DETAIL="models $user_models; records offload_cuda_<model>.json" section offload-models 300 \
  bash -c 'for m in ${1//,/ }; do python3 -m hector.tools.cli bench offload --device cuda \
    --model "$m" --layers 4 --hidden 1024 --heads 16 --seq 512 --batch 2 --vocab 8192 \
    --steps 3 --warmup 1 --raw-probes 1 --systems keep-all,hector-adaptive,hector-budget \
    --json "$2/offload_cuda_$m.json" || exit 1; done' _ "$user_models" "$WORK"
