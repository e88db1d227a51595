#!/usr/bin/env python3
"""Summarises a Kineto trace (verlpp-bench-rollout / verlpp-bench-train --profile): device time per kernel name, the
share of the traced span the device was busy, and the host ops launched.

  python3 trace_summary.py trace.json [--top 25]
"""
import argparse
import bisect
import collections
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    events = json.load(open(args.trace)).get("traceEvents", [])
    kernels = collections.defaultdict(lambda: [0.0, 0])
    spans = []  # (start, end, correlation) of every device activity, for the idle gaps between them
    ops = collections.Counter()
    launches = {}  # correlation id -> (host thread, timestamp) of the runtime call that launched it
    host_ops = collections.defaultdict(list)  # thread -> [(start, end, name)] of cpu ops
    start, end, busy = float("inf"), 0.0, 0.0
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            k = kernels[e["name"][:90]]
            k[0] += e.get("dur", 0.0)
            k[1] += 1
            busy += e.get("dur", 0.0)
            spans.append((e["ts"], e["ts"] + e.get("dur", 0.0), e.get("args", {}).get("correlation")))
        elif cat == "cpu_op":
            ops[e["name"]] += 1
            host_ops[e.get("tid")].append((e["ts"], e["ts"] + e.get("dur", 0.0), e["name"]))
        elif cat == "cuda_runtime" and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = (e.get("tid"), e["ts"])
        if cat in ("kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "gpu_memset"):
            start = min(start, e["ts"])
            end = max(end, e["ts"] + e.get("dur", 0.0))
    span = end - start if end > start else 0.0
    print(f"traced span {span / 1e3:.1f} ms; device busy {busy / 1e3:.1f} ms ({100 * busy / max(span, 1):.0f}%); "
          f"{sum(k[1] for k in kernels.values())} device activities; {sum(ops.values())} host ops")
    # Idle gaps of the device: in a decode run of graph replays, one gap per step is the host's
    # turnaround (read the tokens back, schedule, stage the next inputs, launch).
    # The short ones (< 10 us) are the launch latency between dependent kernels inside a step
    # (what programmatic dependent launch hides); with PDL a kernel may start before the one
    # before it ends (its blocks wait on the device), which counts as no gap.
    spans.sort(key=lambda x: (x[0], x[1]))
    for ops_of_thread in host_ops.values():
        ops_of_thread.sort()
    starts = {tid: [o[0] for o in v] for tid, v in host_ops.items()}

    def launching_op(correlation):
        """The host thread and the innermost cpu op around the runtime call that launched an activity."""
        tid, ts = launches.get(correlation, (None, None))
        if tid is None:
            return "unknown", "unknown"
        ops_of_thread, best = host_ops.get(tid, []), None
        # Ops nest, so the latest-starting op that still runs at the call is the innermost one.
        i = bisect.bisect_right(starts.get(tid, []), ts) - 1
        for j in range(i, max(i - 500, -1), -1):
            if ops_of_thread[j][1] >= ts:
                best = ops_of_thread[j][2]
                break
        return str(tid), best or "(no op)"

    gaps, short, reach = [], [], None
    by_thread, by_op = collections.Counter(), collections.Counter()
    for s0, s1, correlation in spans:
        if reach is not None and s0 - reach >= 10.0:
            gaps.append(s0 - reach)
            # Who the device was waiting for: the host thread (and op) that launched what came next.
            tid, op = launching_op(correlation)
            by_thread[tid] += s0 - reach
            by_op[op] += s0 - reach
        elif reach is not None and s0 > reach:
            short.append(s0 - reach)
        reach = s1 if reach is None else max(reach, s1)
    if gaps:
        gaps.sort()
        print(f"device idle gaps >= 10 us: {len(gaps)}, {sum(gaps) / 1e3:.1f} ms in all; median {gaps[len(gaps) // 2]:.0f} us, "
              f"90th percentile {gaps[int(len(gaps) * 0.9)]:.0f} us")
        # A training step's backward runs on the autograd engine's thread, the rest on the main one.
        print("  by the host thread that launched the next activity: " +
              ", ".join(f"thread {t} {v / 1e3:.1f} ms" for t, v in by_thread.most_common(4)))
        print("  by the host op that launched it: " +
              ", ".join(f"{n} {v / 1e3:.1f} ms" for n, v in by_op.most_common(8)))
    if short:
        short.sort()
        print(f"device idle gaps < 10 us (between kernels of a step): {len(short)} of {max(len(spans) - 1, 0)} "
              f"boundaries, {sum(short) / 1e3:.2f} ms in all; median {short[len(short) // 2]:.2f} us")
    print(f"{'device ms':>10} {'count':>7} {'us each':>8}  name")
    for name, (dur, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{dur / 1e3:>10.2f} {n:>7} {dur / max(n, 1):>8.1f}  {name}")
    print("host ops (most launched): " + ", ".join(f"{name} {n}" for name, n in ops.most_common(12)))


if __name__ == "__main__":
    main()
