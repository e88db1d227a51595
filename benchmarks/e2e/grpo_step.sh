#!/usr/bin/env bash
# The end-to-end GRPO step: a Qwen2.5-0.5B-shaped model (SHAPE=qwen2.5-7b: the 7B shape; random
# weights, the tiny model's tokenizer), 64 prompts x n=8, 512-token responses (EOS ignored), KL
# loss against the reference, one `verlpp train` run of STEPS steps; prints the stage breakdown
# (timing_s/* of verl's metrics), each stage's peak device memory beside `verlpp plan`'s
# prediction for it, and an MFU estimate, and writes grpo_step.json under $OUT. EXTRA: more
# overrides (e.g. actor_rollout_ref.actor.fsdp_config.optimizer_offload=true); GPU_MEM:
# rollout.gpu_memory_utilization (0.4); SAVE_DTYPE: the dtype the random model is written in;
# CHECKPOINTING: model.enable_gradient_checkpointing (true, verl's default; the figures before
# 2026-12-03 ran without it, the default then).
#   BIN=/tmp/verlpp-gpu/bin OUT=/tmp/out bash benchmarks/e2e/grpo_step.sh     (GPU host, after scripts/gpu_check.sh)
#   SHAPE=tiny DEVICE=cpu PROMPTS=4 N=2 RESP=16 MINI=2 MICRO=2 BIN=build/bin bash benchmarks/e2e/grpo_step.sh   (a smoke run here)
# MFU counts 2*P FLOPs per token for each forward (generation, old log-probs, reference) and
# 6*P per token for the update (P = parameters, the tied head once; attention's own FLOPs left
# out), against PEAK_TFLOPS (default 989: H200 dense bf16).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin}; OUT=${OUT:-/tmp/verlpp-grpo-step-out}; W=${WORK:-/tmp/verlpp-grpo-step}
SHAPE=${SHAPE:-qwen2.5-0.5b}; DEVICE=${DEVICE:-cuda}; STEPS=${STEPS:-2}
PROMPTS=${PROMPTS:-64}; N=${N:-8}; RESP=${RESP:-512}; MINI=${MINI:-16}; MICRO=${MICRO:-16}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}; GPU_MEM=${GPU_MEM:-0.4}; EXTRA=${EXTRA:-}; SAVE_DTYPE=${SAVE_DTYPE:-float32}
CHECKPOINTING=${CHECKPOINTING:-true}
# KEEP_MODEL=1 keeps the random model of an earlier run of the same SHAPE (a 7B one takes minutes).
if [ "${KEEP_MODEL:-0}" = 1 ] && [ -f "$W/model/config.json" ]; then rm -rf "$W/run"; else rm -rf "$W"; fi
mkdir -p "$W/src" "$OUT"
cp examples/tiny/tokenizer.json examples/tiny/tokenizer_config.json "$W/src/"
python3 - "$W" "$SHAPE" "$PROMPTS" <<'PY'
import json, random, sys
w, shape, prompts = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = json.load(open("examples/tiny/config.json"))
if shape == "qwen2.5-0.5b":  # Qwen/Qwen2.5-0.5B's shape-defining fields
    c.update(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
             num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6)
elif shape == "qwen2.5-7b":  # Qwen/Qwen2.5-7B's
    c.update(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
             num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768, rope_theta=1e6,
             tie_word_embeddings=False)
elif shape != "tiny":
    sys.exit(f"unknown SHAPE {shape} (qwen2.5-0.5b, qwen2.5-7b or tiny)")
json.dump(c, open(f"{w}/src/config.json", "w"), indent=2)
rng = random.Random(1)
with open(f"{w}/train.jsonl", "w") as f:
    for i in range(prompts * 4):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        f.write(json.dumps({"data_source": "arith", "prompt": [{"role": "user", "content": f"{a}+{b}="}],
                            "reward_model": {"ground_truth": str(a + b), "style": "rule"},
                            "extra_info": {"index": i, "split": "train"}}) + "\n")
PY
[ -f "$W/model/config.json" ] ||
  "$BIN/verlpp" model save "$W/src" "$W/model" --init-seed 1 --dtype "$SAVE_DTYPE" > "$W/model_save.log"
cat > "$W/grpo.json" <<JSON
{
  "data": {"train_files": "$W/train.jsonl", "max_prompt_length": 32, "max_response_length": $RESP,
           "train_batch_size": $PROMPTS, "shuffle": false},
  "actor_rollout_ref": {
    "model": {"path": "$W/model", "enable_gradient_checkpointing": $CHECKPOINTING},
    "actor": {"ppo_mini_batch_size": $MINI, "ppo_micro_batch_size_per_gpu": $MICRO, "use_kl_loss": true,
              "optim": {"lr": 1e-6}},
    "rollout": {"n": $N, "tensor_model_parallel_size": 1, "dtype": "bfloat16", "ignore_eos": true, "gpu_memory_utilization": $GPU_MEM,
                "max_num_seqs": $((PROMPTS * N)), "max_num_batched_tokens": 65536,
                "log_prob_micro_batch_size_per_gpu": $MICRO}
  },
  "algorithm": {"adv_estimator": "grpo"},
  "trainer": {"device": "$DEVICE", "total_training_steps": $STEPS, "val_before_train": false, "test_freq": -1,
              "save_freq": -1, "default_local_dir": "$W/run", "resume_mode": "disable"}
}
JSON
export VERL_HARDWARE_PLUGIN=${VERL_HARDWARE_PLUGIN:-$([ "$DEVICE" = cuda ] && echo cuda || echo cpu_ref)}
# shellcheck disable=SC2086  # EXTRA is a list of overrides
"$BIN/verlpp" plan "$W/grpo.json" $EXTRA > "$OUT/grpo_plan.txt" 2>&1 || true
start=$(date +%s)
# shellcheck disable=SC2086
timeout "${TIMEOUT:-480}" "$BIN/verlpp" train "$W/grpo.json" $EXTRA > "$OUT/grpo_step.log" 2>&1
echo "verlpp train: $(( $(date +%s) - start )) s wall (setup and model load included)"
python3 - "$W" "$OUT" "$PEAK_TFLOPS" "$SHAPE" <<'PY'
import json, sys
w, out, peak, shape = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
info = open(f"{w}/model_save.log").read()
rows = [json.loads(l) for l in open(f"{w}/run/metrics.jsonl")]
c = json.load(open(f"{w}/src/config.json"))
h, l, v, i = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
params = v * h + l * (h * h * 2 + 2 * h * kv + 3 * h * i + 2 * h + 2 * kv + h) + h  # q/k/v biases
if not c.get("tie_word_embeddings", True):
    params += v * h  # the LM head of its own (the tied one is counted once)
stages = ["gen", "gen_graph_capture", "reward", "ref", "old_log_prob", "adv", "update_actor", "sync", "step"]
report = {"shape": shape, "parameters": params, "steps": []}
print(f"{'step':>4} " + " ".join(f"{s:>12}" for s in stages) + f" {'tokens':>9} {'MFU %':>6}")
for r in rows:
    t = {s: r.get(f"timing_s/{s}", 0.0) for s in stages}
    # Tokens: every sequence's prompt + response tokens (perf/total_num_tokens), responses alone for generation.
    total = r["perf/total_num_tokens"]
    resp = r["response_length/mean"] * (r["perf/total_num_tokens"] / (r["response_length/mean"] + r["prompt_length/mean"]))
    flops = 2 * params * resp + 2 * params * total * 2 + 6 * params * total
    mfu = flops / (t["step"] * peak * 1e12) * 100
    print(f"{r['step']:>4} " + " ".join(f"{t[s]:>12.3f}" for s in stages) + f" {int(total):>9} {mfu:>6.2f}")
    report["steps"].append({"step": r["step"], "timing_s": t, "tokens": total, "response_tokens": resp, "mfu_percent": mfu,
                            "peak_tflops": peak, "throughput_tokens_per_s": r.get("perf/throughput"),
                            "rollout_graph_steps": r.get("perf/rollout_graph_steps"),
                            "rollout_decode_steps": r.get("perf/rollout_decode_steps"),
                            "memory_gib": {k[len("memory/"):-len("_gib")]: v for k, v in r.items() if k.startswith("memory/")},
                            "max_memory_allocated_gb": r.get("perf/max_memory_allocated_gb"),
                            "max_memory_rss_gib": r.get("perf/max_memory_rss_gib"),
                            "weight_sync_gib": r.get("perf/weight_sync_gib"),
                            "actor_optimizer_s": r.get("perf/actor_optimizer_s")})
# Each stage's measured peak beside the plan's prediction (verlpp plan, same config).
plan = {}
try:
    for line in open(f"{out}/grpo_plan.txt"):
        parts = line.split()
        if len(parts) >= 3 and parts[1].replace(".", "", 1).isdigit() and parts[2] == "GiB" and line.startswith("  ") \
                and not line.startswith("   "):
            plan[parts[0]] = float(parts[1])
except OSError:
    pass
names = {"gen": "generation", "ref": "reference", "old_log_prob": "old_log_probs", "update_actor": "actor_update",
         "sync": "sync", "values": "values", "update_critic": "critic_update"}
if rows:
    last = report["steps"][-1]["memory_gib"]
    print(f"{'stage':>14} {'measured GiB':>13} {'planned GiB':>12} {'planned/measured':>17}")
    comparison = {}
    for metric, stage in names.items():
        if metric in last and stage in plan:
            ratio = plan[stage] / last[metric] if last[metric] else float("nan")
            comparison[stage] = {"measured_gib": last[metric], "planned_gib": plan[stage], "ratio": ratio}
            print(f"{stage:>14} {last[metric]:>13.2f} {plan[stage]:>12.2f} {ratio:>17.3f}")
    report["plan_vs_measured"] = comparison
json.dump(report, open(f"{out}/grpo_step.json", "w"), indent=2)
PY
