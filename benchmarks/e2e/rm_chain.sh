#!/usr/bin/env bash
# The RLHF chain of examples/arith/ppo_rm_tiny.json on one device, timed, with the reward model
# read back by transformers where it is installed (docs/training.md, docs/models.md):
#   verlpp train-rm (SFT, then the reward model), rm_transformers_check.py, verlpp train (SFT,
#   then GRPO with the reward model, validated by the rule).
#   VERLPP=build/bin/verlpp OUT=/tmp/out bash benchmarks/e2e/rm_chain.sh [overrides ...]
# Overrides apply to both commands (e.g. trainer.device=cuda). Writes $OUT/rm_chain.json (the
# figures), and the two commands' logs.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERLPP=${VERLPP:-build/bin/verlpp}
OUT=${OUT:-/tmp/verlpp-rm-chain}
RUN=${RUN:-/tmp/verlpp-rm-chain-run}
mkdir -p "$OUT"
rm -rf "$RUN"
config=examples/arith/ppo_rm_tiny.json
t0=$(date +%s)
"$VERLPP" train-rm "$config" trainer.default_local_dir="$RUN" "$@" > "$OUT/train_rm.log" 2>&1
t1=$(date +%s)
check='{}'
if python3 -c 'import transformers' 2>/dev/null; then
  check=$(python3 benchmarks/e2e/rm_transformers_check.py "$VERLPP" "$RUN/reward_model/rm_model" \
    "$RUN/data/arith_pairs_val.jsonl" ${CHECK_PAIRS:-400})
fi
"$VERLPP" train "$config" trainer.default_local_dir="$RUN" "$@" > "$OUT/train.log" 2>&1
t2=$(date +%s)
python3 - "$RUN" "$t1" "$t0" "$t2" "$check" > "$OUT/rm_chain.json" <<'PY'
import json, sys
run, t1, t0, t2, check = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
rm = [json.loads(l) for l in open(run + "/reward_model/metrics.jsonl") if l.strip()]
rl = [json.loads(l) for l in open(run + "/metrics.jsonl") if l.strip()]
val = [(r["step"], r["val/acc"]) for r in rl if "val/acc" in r]
print(json.dumps({"rm_heldout_accuracy": [(r["step"], r["val/rm/accuracy"]) for r in rm if "val/rm/accuracy" in r],
                  "rm_seconds": t1 - t0, "rl_seconds": t2 - t1, "rl_val_accuracy": val,
                  "rl_score_mean_last": rl[-1].get("critic/score/mean"), "transformers_check": check}))
PY
cat "$OUT/rm_chain.json"
