#!/usr/bin/env bash
# The rollout benchmark on a GPU host, side by side in one run (docs/benchmarks.md): builds the
# cuda plugin and verlpp-bench-rollout against the PyTorch wheel's LibTorch (the recipe of
# scripts/gpu_check.sh), then runs, on a Qwen2.5-0.5B-shaped model in bf16, greedy:
#   1. verlpp with the cuda plugin's kernels (+ the hybrid-engine transition times),
#   2. HF transformers generate (sdpa) on the same shapes,
#   3. verlpp on the LibTorch reference path, on a smaller set (it loops over sequences).
# Each run is time-boxed, so a slow or stuck one costs only its own figures. Writes under $OUT
# (at most 8 files: the device tool brings back 8): summary.txt (the side-by-side table at the
# end), ours_cuda.json, ours_reference.json, hf.json, table.md, build.log.
#   OUT=/somewhere bash benchmarks/rollout/run_gpu.sh      # needs .offline-deps/ (docs/building.md)
# Variables: SHAPES, REF_SHAPES, REPEAT, DEPS, BUILD_DIR, ARCHS, JOBS, TEMPERATURE.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/verlpp-rollout-out}
DEPS=${DEPS:-.offline-deps}
BUILD_DIR=${BUILD_DIR:-/tmp/verlpp-gpu}
ARCHS=${ARCHS:-90}
JOBS=${JOBS:-$(nproc)}
SHAPES=${SHAPES:-1:128:128,32:128:128,256:128:512}
REF_SHAPES=${REF_SHAPES:-1:128:128,32:128:128}
REPEAT=${REPEAT:-2}
TEMPERATURE=${TEMPERATURE:-0}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # shared hosts
export PYTHONUNBUFFERED=1

step() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/summary.txt"; }

step "host"
{ nvidia-smi -L; nvcc --version | tail -1; git -c safe.directory='*' log -1 --format='commit %H %s' 2>/dev/null
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'; } \
  2>&1 | tee -a "$OUT/summary.txt"

step "unpack Debian dependencies from $DEPS"
bash "$DEPS/offline-deps.sh" unpack "$DEPS" /opt/deps > /tmp/verlpp-unpack.log 2>&1 || { echo "unpack failed" | tee -a "$OUT/summary.txt"; exit 1; }
export LD_LIBRARY_PATH=/opt/deps/usr/lib:/opt/deps/usr/lib/x86_64-linux-gnu:/opt/deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
TP=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')

step "configure + build verlpp_plugin_cuda verlpp-bench-rollout"
start=$(date +%s)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP;/opt/deps/usr" \
  -DVERLPP_CUDA_ARCHITECTURES="$ARCHS" > "$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD_DIR" -j "$JOBS" --target verlpp_plugin_cuda verlpp-bench-rollout >> "$OUT/build.log" 2>&1
rc=$?
echo "build rc $rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
[ $rc -eq 0 ] || { grep -E "error|FAILED|Error" "$OUT/build.log" | head -40 | tee -a "$OUT/summary.txt"; exit 1; }
BENCH="$BUILD_DIR/bin/verlpp-bench-rollout"
COMMON=(--shape qwen2.5-0.5b --device cuda --dtype bfloat16 --temperature "$TEMPERATURE" --repeat "$REPEAT")

step "verlpp, cuda plugin kernels: $SHAPES (+ transitions)"
VERL_HARDWARE_PLUGIN=cuda timeout 180 "$BENCH" "${COMMON[@]}" --plugin cuda --shapes "$SHAPES" \
  --json "$OUT/ours_cuda.json" --transitions 2>&1 | tee -a "$OUT/summary.txt"
echo "rc ${PIPESTATUS[0]}" | tee -a "$OUT/summary.txt"

step "HF transformers generate (sdpa): $SHAPES"
timeout 150 python3 benchmarks/rollout/hf_generate.py --shapes "$SHAPES" --dtype bfloat16 \
  --temperature "$TEMPERATURE" --repeat "$REPEAT" --json "$OUT/hf.json" 2>&1 | grep -v Warning | tee -a "$OUT/summary.txt"
echo "rc ${PIPESTATUS[0]}" | tee -a "$OUT/summary.txt"

step "verlpp, LibTorch reference path: $REF_SHAPES"
VERL_HARDWARE_PLUGIN=none timeout 100 "$BENCH" "${COMMON[@]}" --repeat 1 --shapes "$REF_SHAPES" \
  --json "$OUT/ours_reference.json" 2>&1 | tee -a "$OUT/summary.txt"
echo "rc ${PIPESTATUS[0]}" | tee -a "$OUT/summary.txt"

step "side by side"
python3 - "$OUT" <<'EOF' | tee "$OUT/table.md" | tee -a "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
def rows(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return {}
    got = {}
    for line in open(path):
        j = json.loads(line)
        if "batch" in j:
            got[(j["batch"], j["prompt"], j["response"])] = j
    return got
ours, ref, hf = rows("ours_cuda.json"), rows("ours_reference.json"), rows("hf.json")
def cell(d, k):
    return f"{d[k]['tokens_per_s']:.0f}" if k in d else "-"
print("| batch | prompt | response | verlpp + cuda plugin (tok/s) | verlpp reference (tok/s) | HF generate sdpa (tok/s) | verlpp+plugin / HF |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for k in sorted(set(ours) | set(ref) | set(hf)):
    ratio = f"{ours[k]['tokens_per_s'] / hf[k]['tokens_per_s']:.2f}x" if k in ours and k in hf else "-"
    print(f"| {k[0]} | {k[1]} | {k[2]} | {cell(ours, k)} | {cell(ref, k)} | {cell(hf, k)} | {ratio} |")
for line in open(os.path.join(out, "ours_cuda.json")) if os.path.exists(os.path.join(out, "ours_cuda.json")) else []:
    j = json.loads(line)
    if "transitions" in j:
        t = j["transitions"]
        print(f"\ntransitions (bf16 engine, s, best of {os.environ.get('REPEAT', '2')}): update_weights shared {t['update_weights_shared_s']:.4f}, "
              f"cast from {t['cast_from']} {t['update_weights_cast_s']:.4f} (first {t['update_weights_cast_first_s']:.4f}), "
              f"sleep {t['sleep_s']:.4f}, wake {t['wake_s']:.4f}, pool {t['pool_bytes'] / 2**20:.0f} MiB")
EOF
step "done"
