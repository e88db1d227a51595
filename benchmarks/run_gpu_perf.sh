#!/usr/bin/env bash
# Issue 7's figures in one run on a GPU host, side by side (docs/benchmarks.md): builds verlpp, the cuda
# plugin and the benchmark binaries against the PyTorch wheel's LibTorch (scripts/gpu_check.sh's
# recipe), checks the cuda plugin's kernels (conformance, no communicator), then runs
#   train:   verlpp-bench-train (bf16 mixed precision, and fp32) beside hf_train_step.py
#            (eager, and torch.compile), 16 x 512 tokens;
#   rollout: verlpp-bench-rollout with the cuda plugin (decode graphs on, then off) beside
#            hf_generate.py (HF=0 skips it), temperature 1;
#   profile: Kineto traces of rollout (PROFILE_SHAPES, PROFILE_GRAPHS=1 for graph replays) and of
#            two training steps, summarised;
#   tests:   the rollout engine's and the trainer's [gpu] test cases (decode graphs; the training path);
#   e2e:     benchmarks/e2e/grpo_step.sh (only with E2E=1: it needs a few minutes of its own).
# At most 8 files under $OUT (the device tool brings back 8): summary.txt, build.log,
# conformance.txt, train.jsonl, rollout.jsonl, and grpo_step.{json,log} with E2E=1.
#   OUT=/somewhere bash benchmarks/run_gpu_perf.sh     # .offline-deps beside it (docs/building.md)
# Variables: STAGES (default "conformance train rollout"; also agent (AGENT, RESUME, AGENT_SHAPES), profile, tests, and attn, sample, gemm:
# the kernel microbenchmarks and the GEMM experiment, CMake targets of the same build), E2E=1,
# HF=0, FP32=1 (train in fp32 too), TRAIN_LIBTORCH=0 (no bf16 run on LibTorch's ops), ROLLOUT_GRAPHS ("1 0": graphs on, then off), ROLLOUT_ENVS, TRAIN_ENVS, PROFILE_ENVS
# (environment settings to compare, e.g. "VERLPP_CUDA_PDL=0 -"; the benches' own switches as VERLPP_BENCH_*, e.g.
# VERLPP_BENCH_DECODE_OVERLAP=0, VERLPP_BENCH_SDPA_GQA=0: see their --help), PROFILE_TRAIN=0 (no training trace), STREAM_CHECK=0,
# SHAPES, BUILD_DIR, ARCHS, JOBS, SAMPLE_BASELINE (stage sample: a commit to time beside).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/verlpp-perf-out}
DEPS=${DEPS:-.offline-deps}
BUILD_DIR=${BUILD_DIR:-/tmp/verlpp-gpu}
ARCHS=${ARCHS:-90}
JOBS=${JOBS:-$(nproc)}
STAGES=${STAGES-conformance train rollout}  # set but empty (STAGES=""): build only, like STAGES=none
SHAPES=${SHAPES:-32:128:128,256:128:512}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # shared hosts
export PYTHONUNBUFFERED=1
step() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/summary.txt"; }
# ROLLOUT_ENVS / TRAIN_ENVS entries: "A=1,B=2" -> "A=1 B=2" for env; "-" -> nothing ("env -"
# would empty the environment).
assignments_of() { [ "$1" = - ] || echo "${1//,/ }"; }
# Appends the bench's JSON lines in $2 to $3, each tagged with the environment entry $1.
append_json() { sed "s/^{/{\"environment\":\"$1\",/" "$2" >> "$3" 2>/dev/null; rm -f "$2"; }

step "host"
{ nvidia-smi -L; git -c safe.directory='*' log -1 --format='commit %H %s' 2>/dev/null
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'; } \
  2>&1 | tee -a "$OUT/summary.txt"

if [ ! -x "$BUILD_DIR/bin/verlpp-bench-train" ] || [ "${REBUILD:-1}" = 1 ]; then
  step "unpack Debian dependencies, configure, build"
  bash "$DEPS/offline-deps.sh" unpack "$DEPS" /opt/deps > /tmp/verlpp-unpack.log 2>&1 || { echo "unpack failed" | tee -a "$OUT/summary.txt"; exit 1; }
fi
export LD_LIBRARY_PATH=/opt/deps/usr/lib:/opt/deps/usr/lib/x86_64-linux-gnu:/opt/deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
if [ ! -x "$BUILD_DIR/bin/verlpp-bench-train" ] || [ "${REBUILD:-1}" = 1 ]; then
  TP=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  start=$(date +%s)
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP;/opt/deps/usr" \
    -DVERLPP_CUDA_ARCHITECTURES="$ARCHS" -DVERLPP_BUILD_BENCHMARKS=ON > "$OUT/build.log" 2>&1 &&
    cmake --build "$BUILD_DIR" -j "$JOBS" --target verlpp_plugin_cuda verlpp_plugin_cpu_ref verlpp_plugin_check \
      verlpp_cli verlpp-bench-train verlpp-bench-rollout >> "$OUT/build.log" 2>&1
  rc=$?
  echo "build rc $rc after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
  [ $rc -eq 0 ] || { grep -E "error|FAILED|Error" "$OUT/build.log" | head -40 | tee -a "$OUT/summary.txt"; exit 1; }
fi
BIN=$BUILD_DIR/bin

if [[ " $STAGES " == *" conformance "* ]]; then
  step "verlpp-plugin-check cuda (kernels, memory, streams; no communicator)"
  timeout 240 "$BIN/verlpp-plugin-check" cuda --ranks '' > "$OUT/conformance.txt" 2>&1
  echo "rc $?" | tee -a "$OUT/summary.txt"
  grep -vE "  pass  " "$OUT/conformance.txt" | tail -30 | tee -a "$OUT/summary.txt"
fi

if [[ " $STAGES " == *" train "* ]]; then
  step "train step, 16 x 512 tokens: verlpp (bf16 mixed, fp32) beside HF (eager, compile)"
  : > "$OUT/train.jsonl"
  # bf16 with the cuda plugin's log-prob kernels (the RL trainer's path on a GPU), bf16 with
  # LibTorch's softmax path, then (FP32=1) fp32.
  # TRAIN_ENVS: as ROLLOUT_ENVS below, for the runs with the cuda plugin's kernels.
  variants=("bfloat16 --plugin cuda")
  [ "${TRAIN_LIBTORCH:-1}" = 1 ] && variants+=("bfloat16")
  [ -n "${FP32:-}" ] && variants+=("float32 --plugin cuda")
  for variant in "${variants[@]}"; do
    envs_list=-; [[ "$variant" == *--plugin* ]] && envs_list=${TRAIN_ENVS:--}
    for envs in $envs_list; do
      set -- $variant
      echo "-- param dtype $* (environment: $envs)" | tee -a "$OUT/summary.txt"
      env $(assignments_of "$envs") VERL_HARDWARE_PLUGIN=cuda timeout 240 "$BIN/verlpp-bench-train" --shape qwen2.5-0.5b --device cuda --param-dtype "$@" --batch 16 --seq 512 \
        --steps 7 --warmup 2 --json /tmp/t.json 2>&1 | grep -v "^\[verlpp" | tee -a "$OUT/summary.txt"
      append_json "$envs" /tmp/t.json "$OUT/train.jsonl"
    done
  done
  for mode in "" --compile; do
    timeout 300 python3 benchmarks/train/hf_train_step.py --batch 16 --seq 512 --steps 10 --warmup 3 $mode \
      --json /tmp/t.json 2>&1 | grep -vi warn | tail -3 | tee -a "$OUT/summary.txt"
    cat /tmp/t.json >> "$OUT/train.jsonl" 2>/dev/null; rm -f /tmp/t.json
  done
fi

if [[ " $STAGES " == *" agent "* ]]; then
  # The agent loop's overhead: each shape's response as AGENT=K:L (K turns, K-1 tool calls of L ms)
  # beside the same tokens single-turn, and a second turn resumed with its prefix kept beside the
  # whole context submitted again (RESUME=A:T), on the 0.5B shape with the cuda plugin.
  step "agent loop and kept prefix: qwen2.5-0.5b bf16, shapes ${AGENT_SHAPES:=64:128:384,256:128:384}"
  timeout 420 "$BIN/verlpp-bench-rollout" --shape qwen2.5-0.5b --device cuda --dtype bfloat16 --plugin cuda \
    --shapes "$AGENT_SHAPES" --repeat 2 --agent "${AGENT:-3:50}" --resume "${RESUME:-32:128}" \
    --json "$OUT/agent.jsonl" 2>&1 | tail -16 | tee -a "$OUT/summary.txt"
fi

if [[ " $STAGES " == *" rollout "* ]]; then
  step "rollout $SHAPES, temperature 1: verlpp + cuda plugin beside HF generate"
  : > "$OUT/rollout.jsonl"
  # ROLLOUT_ENVS: LibTorch GEMM settings to compare, each a comma-separated list of VAR=value
  # ("-" = as they are), e.g. "- TORCH_BLAS_PREFER_CUBLASLT=1 PYTORCH_TUNABLEOP_ENABLED=1".
  for envs in ${ROLLOUT_ENVS:--}; do
    echo "-- environment: $envs" | tee -a "$OUT/summary.txt"
    for graphs in ${ROLLOUT_GRAPHS:-1 0}; do  # decode steps as CUDA graphs, then eager
      env $(assignments_of "$envs") VERL_HARDWARE_PLUGIN=cuda timeout 200 "$BIN/verlpp-bench-rollout" --device-graphs $graphs \
        --shape qwen2.5-0.5b --device cuda --dtype bfloat16 --temperature 1 --repeat 2 --plugin cuda --shapes "$SHAPES" \
        --transitions --json /tmp/r.json 2>&1 | tee -a "$OUT/summary.txt"
      append_json "$envs" /tmp/r.json "$OUT/rollout.jsonl"
    done
  done
  [ "${STREAM_CHECK:-1}" = 1 ] && step "eager decode: greedy tokens with kernels on LibTorch's stream (ABI 1.1) vs the NULL stream: must be identical"
  [ "${STREAM_CHECK:-1}" = 1 ] && for streams in 1 0; do
    VERL_HARDWARE_PLUGIN=cuda timeout 100 "$BIN/verlpp-bench-rollout" --device-graphs 0 --shape qwen2.5-0.5b \
      --device cuda --dtype bfloat16 --temperature 0 --repeat 1 --plugin cuda --kernel-streams $streams --shapes 64:128:128,256:128:128 \
      --json /tmp/g$streams.json > /tmp/g$streams.txt 2>&1
    echo "--kernel-streams $streams: $(tail -2 /tmp/g$streams.txt | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
  done
  [ "${STREAM_CHECK:-1}" = 1 ] && python3 -c 'import json,sys; a=[json.loads(l) for l in open("/tmp/g1.json")]; b=[json.loads(l) for l in open("/tmp/g0.json")]; print("greedy tokens identical:", [x.get("tokens_fnv1a")==y.get("tokens_fnv1a") for x,y in zip(a,b)])' 2>&1 | tee -a "$OUT/summary.txt"
  if [ "${HF:-1}" = 1 ]; then
    timeout 200 python3 benchmarks/rollout/hf_generate.py --shapes "$SHAPES" --dtype bfloat16 --temperature 1 --repeat 2 \
      --json /tmp/r.json 2>&1 | grep -vi warn | tee -a "$OUT/summary.txt"
    cat /tmp/r.json >> "$OUT/rollout.jsonl" 2>/dev/null; rm -f /tmp/r.json
  fi
fi
if [[ " $STAGES " == *" profile "* ]]; then
  # PROFILE_GRAPHS=1 traces decode steps replayed from CUDA graphs (CUPTI sees their kernels).
  # PROFILE_ENVS: environment settings to trace one after another, as ROLLOUT_ENVS.
  for envs in ${PROFILE_ENVS:--}; do
  for shape in ${PROFILE_SHAPES:-256:128:16}; do
    step "profile (decode graphs ${PROFILE_GRAPHS:-0}, environment $envs): $shape (Kineto trace of the last generate, summarised)"
    env $(assignments_of "$envs") VERL_HARDWARE_PLUGIN=cuda timeout 120 "$BIN/verlpp-bench-rollout" \
      --device-graphs ${PROFILE_GRAPHS:-0} --shape qwen2.5-0.5b --device cuda --dtype bfloat16 --temperature 1 --repeat 1 --plugin cuda --shapes $shape \
      --profile /tmp/trace.json --profile-tokens ${shape##*:} > /dev/null 2>&1
    python3 benchmarks/rollout/trace_summary.py /tmp/trace.json --top ${PROFILE_TOP:-30} 2>&1 | tee -a "$OUT/summary.txt"
  done
  done
  if [ "${PROFILE_TRAIN:-1}" = 1 ]; then  # PROFILE_TRAIN=0: rollout traces only
  step "profile: training step 16 x 512, bf16 mixed precision (Kineto trace of 2 steps, summarised)"
  VERL_HARDWARE_PLUGIN=cuda timeout 200 "$BIN/verlpp-bench-train" --shape qwen2.5-0.5b --device cuda --param-dtype bfloat16 \
    --plugin cuda --batch 16 --seq 512 --steps 2 --warmup 2 --profile /tmp/train_trace.json 2>&1 | tail -2 | tee -a "$OUT/summary.txt"
  python3 benchmarks/rollout/trace_summary.py /tmp/train_trace.json --top ${PROFILE_TOP:-30} 2>&1 | tee -a "$OUT/summary.txt"
  fi
fi

if [[ " $STAGES " == *" tests "* ]]; then
  step "the rollout engine's and the trainer's GPU tests (decode graphs against eager steps and a full forward; the training path against LibTorch's)"
  cmake --build "$BUILD_DIR" -j "$JOBS" --target verlpp_rollout_tests verlpp_train_tests >> "$OUT/build.log" 2>&1 || echo "build failed" | tee -a "$OUT/summary.txt"
  for layer in rollout train; do
    timeout 300 "$BIN/verlpp_${layer}_tests" "[gpu]" > "$OUT/${layer}_gpu_tests.txt" 2>&1
    echo "$layer [gpu] tests: rc $?" | tee -a "$OUT/summary.txt"
    tail -40 "$OUT/${layer}_gpu_tests.txt" | tee -a "$OUT/summary.txt"
  done
  # The opt-in early launch behind library kernels (plugins/cuda/dependent_launch.cuh) changes
  # the captured graphs: the rollout cases again with it.
  VERLPP_GRAPH_EARLY_LAUNCH=1 timeout 300 "$BIN/verlpp_rollout_tests" "[gpu]" > /tmp/early_tests.txt 2>&1
  echo "rollout [gpu] tests, VERLPP_GRAPH_EARLY_LAUNCH=1: rc $?" | tee -a "$OUT/summary.txt"
  tail -8 /tmp/early_tests.txt | tee -a "$OUT/summary.txt"
fi

# The kernel microbenchmarks (benchmarks/kernels/) and the GEMM experiment (experiments/gemm_mma/)
# are CMake targets of this build tree, built with the cuda plugin; each stage builds its own
# (nothing when up to date). build_target TARGET...: builds them, or reports the failure.
build_target() {
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "$@" >> "$OUT/build.log" 2>&1 && return 0
  echo "build of $* failed:" | tee -a "$OUT/summary.txt"
  grep -E "error|FAILED" "$OUT/build.log" | tail -5 | tee -a "$OUT/summary.txt"
  return 1
}
# The decode attention kernels in isolation (verlpp-bench-attention-decode,
# benchmarks/kernels/attention_decode_bench.cu): a check against fp64 CPU loops, then the
# tensor-core launcher vs the CUDA-core one per call, eager and in a CUDA graph.
if [[ " $STAGES " == *" attn "* ]]; then
  step "paged attention decode microbench (tensor cores vs CUDA cores; verlpp-bench-attention-decode)"
  if build_target verlpp-bench-attention-decode; then
    for mode in check time; do timeout 150 "$BIN/verlpp-bench-attention-decode" $mode 2>&1 | tail -45 | tee -a "$OUT/summary.txt"; done
  fi
fi
# The sampler in isolation (verlpp-bench-sample, benchmarks/kernels/sample_bench.cu): a check
# against fp64 CPU loops, then per call at V = 151,936, eager and in a CUDA graph.
# SAMPLE_BASELINE=<commit>: the same bench also built against that commit's sample_kernel.cu
# (the target verlpp-bench-sample-baseline, configured for this stage only) and timed, for a
# before/after table.
if [[ " $STAGES " == *" sample "* ]]; then
  step "sample microbench (verlpp-bench-sample)"
  if build_target verlpp-bench-sample; then
    for mode in check time; do timeout 200 "$BIN/verlpp-bench-sample" $mode 2>&1 | tail -45 | tee -a "$OUT/summary.txt"; done
  fi
  if [ -n "${SAMPLE_BASELINE:-}" ]; then
    step "sample microbench timing, sample_kernel.cu of $SAMPLE_BASELINE"
    baseline=$BUILD_DIR/sample_kernel_baseline.cu
    if git -c safe.directory='*' show "$SAMPLE_BASELINE:plugins/cuda/sample_kernel.cu" > "$baseline" &&
       cmake -S . -B "$BUILD_DIR" -DVERLPP_SAMPLE_BENCH_BASELINE="$baseline" >> "$OUT/build.log" 2>&1 &&
       build_target verlpp-bench-sample-baseline; then
      timeout 200 "$BIN/verlpp-bench-sample-baseline" time 2>&1 | tail -15 | tee -a "$OUT/summary.txt"
    else
      echo "baseline $SAMPLE_BASELINE: not built" | tee -a "$OUT/summary.txt"
    fi
    cmake -S . -B "$BUILD_DIR" -DVERLPP_SAMPLE_BENCH_BASELINE= >> "$OUT/build.log" 2>&1  # the target goes again
  fi
fi

# The decode-GEMM experiment (verlpp-gemm-mma-experiment, experiments/gemm_mma/; not part of the
# plugin): a check of every configuration against fp64 loops, then cuBLAS vs each configuration
# per layer call in a CUDA graph (GEMM_ROWS: the row counts timed).
if [[ " $STAGES " == *" gemm "* ]]; then
  step "decode GEMM experiment beside cuBLAS (verlpp-gemm-mma-experiment)"
  if build_target verlpp-gemm-mma-experiment; then
    timeout 120 "$BIN/verlpp-gemm-mma-experiment" check 2>&1 | tail -3 | tee -a "$OUT/summary.txt"
    ROWS=${GEMM_ROWS:-256} timeout 120 "$BIN/verlpp-gemm-mma-experiment" time 2>&1 | tail -60 | tee -a "$OUT/summary.txt"
  fi
fi

if [ "${E2E:-0}" = 1 ]; then
  step "end-to-end GRPO step (benchmarks/e2e/grpo_step.sh)"
  BIN=$BIN OUT=$OUT bash benchmarks/e2e/grpo_step.sh 2>&1 | tail -12 | tee -a "$OUT/summary.txt"
fi
step "done"
