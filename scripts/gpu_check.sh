#!/usr/bin/env bash
# Builds verlpp on a GPU host whose LibTorch is a PyTorch wheel's (no apt, no network) and runs
# the CUDA plugin's checks, writing every log under $OUT (default /tmp/verlpp-gpu-out): the
# recipe of docs/building.md in one command, so a short lease on a GPU machine is enough. At
# most 8 files land in $OUT (the device tool brings back 8); summary.txt is written as it
# goes, so a run cut short still says how far it got.
#   OUT=/somewhere bash scripts/gpu_check.sh            # needs .offline-deps/ (docs/building.md)
# Variables: DEPS (the .deb folder, default .offline-deps), BUILD_DIR (default /tmp/verlpp-gpu),
# ARCHS (VERLPP_CUDA_ARCHITECTURES, default 90), JOBS, FULL=1 to run the whole ctest too,
# SANITIZE=1 to run the single-process conformance cases under compute-sanitizer (memcheck).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/verlpp-gpu-out}
DEPS=${DEPS:-.offline-deps}
BUILD_DIR=${BUILD_DIR:-/tmp/verlpp-gpu}
ARCHS=${ARCHS:-90}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared hosts

step() { echo "== $*" | tee -a "$OUT/summary.txt"; }

step "host"
{ nvidia-smi -L; nvcc --version | tail -2; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'; } \
  2>&1 | tee -a "$OUT/summary.txt"

step "unpack Debian dependencies from $DEPS"
bash "$DEPS/offline-deps.sh" unpack "$DEPS" /opt/deps > /tmp/verlpp-unpack.log 2>&1 || { echo "unpack failed" | tee -a "$OUT/summary.txt"; exit 1; }
export LD_LIBRARY_PATH=/opt/deps/usr/lib:/opt/deps/usr/lib/x86_64-linux-gnu:/opt/deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
TP=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
# The wheel's NCCL, for processes that do not load torch's CUDA libraries themselves.
NCCL_LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
[ -n "$NCCL_LIB" ] && [ -f "$NCCL_LIB" ] && export VERLPP_NCCL_LIBRARY=$NCCL_LIB
echo "VERLPP_NCCL_LIBRARY=${VERLPP_NCCL_LIBRARY:-}" | tee -a "$OUT/summary.txt"

step "configure (VERLPP_CUDA_ARCHITECTURES=$ARCHS)"
start=$(date +%s)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP;/opt/deps/usr" \
  -DVERLPP_CUDA_ARCHITECTURES="$ARCHS" -DVERLPP_BUILD_BENCHMARKS=OFF > "$OUT/configure.log" 2>&1
rc=$?
grep -E "verlpp:|cuda plugin|cpu_ref" "$OUT/configure.log" | tee -a "$OUT/summary.txt"
[ $rc -eq 0 ] || { echo "configure failed (rc $rc)" | tee -a "$OUT/summary.txt"; tail -30 "$OUT/configure.log"; exit 1; }

step "build"
targets="verlpp_plugin_cuda verlpp_plugin_cpu_ref verlpp_plugin_check verlpp_cli"
[ "${FULL:-0}" = 1 ] && targets=all
cmake --build "$BUILD_DIR" -j "$JOBS" --target $targets > "$OUT/build.log" 2>&1
rc=$?
echo "build rc $rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
[ $rc -eq 0 ] || { grep -E "error|FAILED" "$OUT/build.log" | head -40 | tee -a "$OUT/summary.txt"; exit 1; }
ldd "$BUILD_DIR/bin/libverlpp-plugin-cuda.so" >> "$OUT/summary.txt" 2>&1

step "verlpp plugins"
"$BUILD_DIR/bin/verlpp" plugins 2>&1 | tee -a "$OUT/summary.txt"

step "verlpp-plugin-check cuda, all but the communicator"
start=$(date +%s)
timeout 240 "$BUILD_DIR/bin/verlpp-plugin-check" cuda --ranks '' --json "$OUT/conformance_cuda.json" \
  > "$OUT/conformance_cuda.txt" 2>&1
echo "verlpp-plugin-check cuda --ranks '': rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
grep -vE "  pass  " "$OUT/conformance_cuda.txt" | tail -40 | tee -a "$OUT/summary.txt"

# Separately, so that a communicator that hangs cannot cost the results above.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
ranks=1; [ "$gpus" -ge 2 ] && ranks=2; [ "$gpus" -ge 4 ] && ranks=2,4
step "verlpp-plugin-check cuda, communicator with --ranks $ranks"
start=$(date +%s)
timeout 240 "$BUILD_DIR/bin/verlpp-plugin-check" cuda --ranks "$ranks" --timeout-ms 60000 > "$OUT/conformance_comm.txt" 2>&1
echo "verlpp-plugin-check cuda --ranks $ranks: rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
grep -E "^communicator|passed" "$OUT/conformance_comm.txt" | grep -vE "  pass  " | tail -40 | tee -a "$OUT/summary.txt"

if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  step "compute-sanitizer memcheck on the kernels and copies (no communicator)"
  compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD_DIR/bin/verlpp-plugin-check" cuda --ranks '' \
    > "$OUT/sanitizer.txt" 2>&1
  echo "memcheck rc $?" | tee -a "$OUT/summary.txt"
  grep -E "ERROR SUMMARY|Invalid" "$OUT/sanitizer.txt" | head -20 | tee -a "$OUT/summary.txt"
fi

step "verlpp demo (cuda)"
VERL_HARDWARE_PLUGIN=cuda "$BUILD_DIR/bin/verlpp" demo 2>&1 | tail -20 | tee -a "$OUT/summary.txt"

if [ "${FULL:-0}" = 1 ]; then
  step "ctest (all but the npm peer test)"
  (cd "$BUILD_DIR" && ctest -LE peer --output-on-failure) > "$OUT/ctest.log" 2>&1
  tail -25 "$OUT/ctest.log" | tee -a "$OUT/summary.txt"
fi
