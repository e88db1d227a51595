#!/usr/bin/env bash
# HF transformers parity, on a host with a PyTorch wheel (torch + transformers), from the
# repository root with .offline-deps beside it (docs/building.md, "A GPU host"):
#   bash tests/model/hf_parity/run_on_gpu_host.sh OUTDIR
# Builds only what it needs (verlpp, the verlpp command, the model tests) against the wheel's
# LibTorch, runs hf_parity.py, then the model layer's own tests (LibTorch 2.x build check).
# Logs and parity.json go to OUTDIR. Exit status: the parity script's.
set -uo pipefail
OUTDIR=${1:-/tmp/verlpp_parity}
BUILD=${BUILD:-/tmp/verlpp_parity_build}
mkdir -p "$OUTDIR"
start=$(date +%s)
stamp() { echo "[$(( $(date +%s) - start )) s] $*"; }

bash .offline-deps/offline-deps.sh unpack .offline-deps /opt/deps >/dev/null
export LD_LIBRARY_PATH=/opt/deps/usr/lib:/opt/deps/usr/lib/x86_64-linux-gnu:/opt/deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
stamp "configure"
if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP;/opt/deps/usr" \
     -DVERLPP_BUILD_BENCHMARKS=OFF >"$OUTDIR/configure.log" 2>&1; then
  tail -40 "$OUTDIR/configure.log"; exit 2
fi
stamp "build"
cmake --build "$BUILD" -j16 --target verlpp_cli verlpp_model_tests -- -k 0 >"$OUTDIR/build.log" 2>&1
build_rc=$?
grep -E "error|FAILED" "$OUTDIR/build.log" | head -30
stamp "build rc $build_rc"
[ -x "$BUILD/bin/verlpp" ] || { tail -40 "$OUTDIR/build.log"; exit 2; }

stamp "parity"
PYTHONUNBUFFERED=1 timeout 300 python3 tests/model/hf_parity/hf_parity.py --verlpp "$BUILD/bin/verlpp" \
  --work /tmp/verlpp_parity_work --tiny examples/tiny --json "$OUTDIR/parity.json" 2>&1 | tee "$OUTDIR/parity.log"
parity_rc=${PIPESTATUS[0]}

stamp "model tests (LibTorch $(python3 -c 'import torch;print(torch.__version__)'))"
if [ -x "$BUILD/bin/verlpp_model_tests" ]; then
  (cd "$BUILD" && timeout 120 ./bin/verlpp_model_tests "[decoder],[safetensors],[checkpoint],[config]" 2>&1 | tail -5)
fi
stamp "done: parity rc $parity_rc"
exit "$parity_rc"
