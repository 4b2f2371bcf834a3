#!/usr/bin/env bash
# Build what scripts/gpu_check.sh carries to a GPU machine that has no MLIR, no compiler of
# Hector's and no network. Run it here (where `pip install -e .` works) before a device run:
#
#   scripts/build_carry.sh [--chip sm_90]
#
# It writes, under $HECTOR_CARRY (default .carry/, ignored by git, named in the run's `carry`):
#   lib/libhector_runtime.so   the native runtime, libstdc++/libgcc linked in statically, so it
#                              needs only glibc; checked to need no glibc newer than 2.36;
#   kernels/*.ptx              the zero-copy gather kernels (hector.data.unified) for the widths the
#                              GPU tests and `hector bench gather` use, read through
#                              $HECTOR_PREBUILT_KERNELS;
#   bundles/                   the ahead-of-time bundles the bundle check runs, when
#                              hector_bench.bundle_check provides build_check_bundles(out_dir);
#   tiled_gemm/                the shared-memory tiled GEMM kernels (and their untiled
#                              twins) the tiled-gemm section times;
#   MANIFEST.txt               what was built, from which commit, with sizes.
# Exit status: 0 when everything that exists to build was built and checked.
set -euo pipefail
cd "$(dirname "$0")/.."
chip=sm_90
while (($#)); do
  case $1 in
    --chip) chip=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "build_carry.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
CARRY="${HECTOR_CARRY:-.carry}"
MAX_GLIBC=2.36
# The gather widths of test_unified.py's GPU tests and of `hector bench gather`'s defaults.
GATHER_WIDTHS="1 8 64 100 128 129 256 500 512"
rm -rf "$CARRY"
mkdir -p "$CARRY/lib" "$CARRY/kernels"

echo "== native runtime"
build=build/carry-runtime
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_SHARED_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
cmake --build "$build" --target hector_runtime >/dev/null
cp "$build/libhector_runtime.so" "$CARRY/lib/"
strip --strip-unneeded "$CARRY/lib/libhector_runtime.so"
needed=$(objdump -T "$CARRY/lib/libhector_runtime.so" | grep -o 'GLIBC_[0-9.]*' | sort -uV \
  | tail -1 | cut -d_ -f2)
if [[ $(printf '%s\n%s\n' "$needed" "$MAX_GLIBC" | sort -V | tail -1) != "$MAX_GLIBC" ]]; then
  echo "libhector_runtime.so needs glibc $needed, newer than $MAX_GLIBC" >&2
  exit 1
fi
if objdump -p "$CARRY/lib/libhector_runtime.so" | grep -q 'NEEDED.*libstdc++'; then
  echo "libhector_runtime.so still needs libstdc++ (static linking failed)" >&2
  exit 1
fi
HECTOR_RUNTIME_LIBRARY="$CARRY/lib/libhector_runtime.so" \
  python3 -c "from hector.runtime import native; assert native.abi_version() == native.ABI_VERSION"
echo "glibc needed: $needed (at most $MAX_GLIBC), ABI $(
  HECTOR_RUNTIME_LIBRARY="$CARRY/lib/libhector_runtime.so" \
    python3 -c 'from hector.runtime import native; print(native.abi_version())')"

echo "== gather kernels ($chip)"
python3 - "$CARRY/kernels" "$chip" $GATHER_WIDTHS <<'EOF'
import os, sys
from hector.data import unified as U

folder, chip, widths = sys.argv[1], sys.argv[2], [int(w) for w in sys.argv[3:]]
os.environ.pop(U.PREBUILT_KERNELS_ENV, None)  # compile, never copy an older prebuilt kernel
for width in widths:
    for align in U.ALIGN_MODES:
        name = U.gather_kernel_file(width, align, 256, chip)
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(U.gather_kernel_ptx(width, align, 256, chip))
print(len(widths) * len(U.ALIGN_MODES), "kernels")
EOF

echo "== bundles"
python3 - "$CARRY/bundles" <<'EOF'
import importlib.util, sys
if importlib.util.find_spec("hector_bench.bundle_check") is None:
    print("not available: no hector_bench.bundle_check module; no bundles built")
    sys.exit(0)
from hector_bench.bundle_check import build_check_bundles
build_check_bundles(sys.argv[1])
print("built under", sys.argv[1])
EOF

echo "== tiled GEMM kernels ($chip)"
python3 -c "from hector_bench.tiled_gemm_kernels import write_bench_kernels as w; w('$CARRY/tiled_gemm', '$chip')"

{
  echo "built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty)"
  echo "chip $chip, glibc needed $needed"
  (cd "$CARRY" && find . -type f ! -name MANIFEST.txt -printf '%s %p\n' | sort -k2)
} >"$CARRY/MANIFEST.txt"
echo "== carry: $(du -sb "$CARRY" | cut -f1) bytes in $(find "$CARRY" -type f | wc -l) files"
