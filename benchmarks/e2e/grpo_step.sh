#!/usr/bin/env bash
# The end-to-end GRPO step of issue 7's workload: a Qwen2.5-0.5B-shaped model (random weights,
# the tiny model's tokenizer), 64 prompts x n=8, 512-token responses (EOS ignored), KL loss
# against the reference, one `verlpp train` run of STEPS steps; prints the stage breakdown
# (timing_s/* of verl's metrics) and an MFU estimate, and writes grpo_step.json under $OUT.
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
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
rm -rf "$W"; mkdir -p "$W/src" "$OUT"
cp examples/tiny/tokenizer.json examples/tiny/tokenizer_config.json "$W/src/"
python3 - "$W" "$SHAPE" "$PROMPTS" <<'PY'
import json, random, sys
w, shape, prompts = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = json.load(open("examples/tiny/config.json"))
if shape == "qwen2.5-0.5b":  # Qwen/Qwen2.5-0.5B's shape-defining fields
    c.update(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
             num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6)
elif shape != "tiny":
    sys.exit(f"unknown SHAPE {shape} (qwen2.5-0.5b or tiny)")
json.dump(c, open(f"{w}/src/config.json", "w"), indent=2)
rng = random.Random(1)
with open(f"{w}/train.jsonl", "w") as f:
    for i in range(prompts * 4):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        f.write(json.dumps({"data_source": "arith", "prompt": [{"role": "user", "content": f"{a}+{b}="}],
                            "reward_model": {"ground_truth": str(a + b), "style": "rule"},
                            "extra_info": {"index": i, "split": "train"}}) + "\n")
PY
"$BIN/verlpp" model save "$W/src" "$W/model" --init-seed 1 > "$W/model_save.log"
cat > "$W/grpo.json" <<JSON
{
  "data": {"train_files": "$W/train.jsonl", "max_prompt_length": 32, "max_response_length": $RESP,
           "train_batch_size": $PROMPTS, "shuffle": false},
  "actor_rollout_ref": {
    "model": {"path": "$W/model"},
    "actor": {"ppo_mini_batch_size": $MINI, "ppo_micro_batch_size_per_gpu": $MICRO, "use_kl_loss": true,
              "optim": {"lr": 1e-6}},
    "rollout": {"n": $N, "dtype": "bfloat16", "ignore_eos": true, "gpu_memory_utilization": 0.4,
                "max_num_seqs": $((PROMPTS * N)), "max_num_batched_tokens": 65536,
                "log_prob_micro_batch_size_per_gpu": $MICRO}
  },
  "algorithm": {"adv_estimator": "grpo"},
  "trainer": {"device": "$DEVICE", "total_training_steps": $STEPS, "val_before_train": false, "test_freq": -1,
              "save_freq": -1, "default_local_dir": "$W/run", "resume_mode": "disable"}
}
JSON
start=$(date +%s)
VERL_HARDWARE_PLUGIN=${VERL_HARDWARE_PLUGIN:-$([ "$DEVICE" = cuda ] && echo cuda || echo cpu_ref)} \
  timeout "${TIMEOUT:-480}" "$BIN/verlpp" train "$W/grpo.json" > "$OUT/grpo_step.log" 2>&1
echo "verlpp train: $(( $(date +%s) - start )) s wall (setup and model load included)"
python3 - "$W" "$OUT" "$PEAK_TFLOPS" "$SHAPE" <<'PY'
import json, sys
w, out, peak, shape = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
info = open(f"{w}/model_save.log").read()
rows = [json.loads(l) for l in open(f"{w}/run/metrics.jsonl")]
c = json.load(open(f"{w}/src/config.json"))
h, l, v, i = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
params = v * h + l * (h * h * 2 + 2 * h * kv + 3 * h * i + 2 * h + 2 * kv + h) + h  # tied head once, q/k/v biases
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
                            "rollout_decode_steps": r.get("perf/rollout_decode_steps")})
json.dump(report, open(f"{out}/grpo_step.json", "w"), indent=2)
PY
