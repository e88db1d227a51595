#!/usr/bin/env python3
"""The loggers' files checked with the real readers, on a host that has them (the GPU host has
the tensorboard package; mlflow and numpy where installed): TensorBoard's EventAccumulator reads
the event folder, MLflow's client reads the file store, and every metric of metrics.jsonl must
be there at its step with its value. Also prints numpy's RandomState(42).shuffle of range(n),
the peer of verlpp's pick_val_generations.

  python3 check_with_python.py RUN_DIR/metrics.jsonl TB_DIR MLRUNS_DIR > result.json
"""
import json
import math
import sys


def rows_of(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    metrics_path, tb_dir, mlruns = sys.argv[1:4]
    rows = rows_of(metrics_path)
    expected = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                expected[(row["step"], key)] = float(value)
    result = {"expected_points": len(expected)}

    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(tb_dir, size_guidance={"scalars": 0})
        acc.Reload()
        got = {}
        for tag in acc.Tags()["scalars"]:
            for e in acc.Scalars(tag):
                got.setdefault((e.step, tag), []).append(e.value)
        bad = [f"{k}: {got.get(k)} != {v}" for k, v in expected.items()
               if k not in got or len(got[k]) != 1 or not math.isclose(got[k][0], v, rel_tol=1e-6, abs_tol=1e-30)]
        extra = [str(k) for k in got if k not in expected]
        result["tensorboard"] = {"points": sum(len(v) for v in got.values()), "mismatches": bad[:20],
                                 "unexpected": extra[:20], "ok": not bad and not extra}
    except ImportError as e:
        result["tensorboard"] = {"missing": str(e)}

    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri="file:" + mlruns)
        exps = client.search_experiments()
        runs = [r for e in exps for r in client.search_runs([e.experiment_id])]
        info = {"experiments": sorted(e.name for e in exps), "runs": len(runs)}
        if runs:
            run = runs[0]
            got = {}
            for key in run.data.metrics:
                for m in client.get_metric_history(run.info.run_id, key):
                    got.setdefault((m.step, key), []).append(m.value)
            bad = [f"{k}: {got.get(k)} != {v}" for k, v in expected.items() if got.get(k) != [v]]
            info.update({"status": run.info.status, "run_name": run.info.run_name,
                         "params": len(run.data.params), "tags": sorted(run.data.tags),
                         "points": sum(len(v) for v in got.values()), "mismatches": bad[:20],
                         "ok": not bad and len(got) == len(expected)})
        result["mlflow"] = info
    except ImportError as e:
        result["mlflow"] = {"missing": str(e)}

    try:
        import numpy as np

        shuffles = {}
        for n in range(0, 40):
            x = list(range(n))
            np.random.RandomState(42).shuffle(x)
            shuffles[n] = x
        result["numpy_shuffle_42"] = shuffles
    except ImportError as e:
        result["numpy_shuffle_42"] = {"missing": str(e)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
