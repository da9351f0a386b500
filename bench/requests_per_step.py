#!/usr/bin/env python3
"""Requests a worker sends per step, by kind, from the traces of a
`bench/scaling --trace --out=DIR` run: for each run directory DIR/<mode>-n<N>,
worker 0's push, fetch ("pull") and await requests per step (the median over
the steps after the first), as the client's transfer trace records them, one
event per request in the category of its kind. (A request that waited in line
has a second event of the same name in the category "<kind> queue": not a
request, not counted.)

  python3 bench/requests_per_step.py DIR [DIR...]
"""
import collections
import glob
import json
import os
import re
import statistics
import sys

KINDS = ("push", "pull", "await")


def per_step(trace_path):
    with open(trace_path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    counts = collections.defaultdict(collections.Counter)
    for e in events:
        kind = e.get("cat", "")
        step = e.get("args", {}).get("step")
        if kind in KINDS and e.get("ph") == "b" and step is not None:
            counts[step][kind] += 1
    steps = sorted(counts)[1:]  # the first step warms up (its pulls fetch every tensor)
    if not steps:
        raise ValueError("fewer than two traced steps")
    return {k: statistics.median(counts[s][k] for s in steps) for k in KINDS}, len(steps)


def main(dirs):
    if not dirs:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print(f"{'run':<16} {'steps':>5} {'push':>7} {'fetch':>7} {'await':>7} {'total':>7}")
    for d in dirs:
        runs = []  # (mode, N, path) of each run directory <mode>-n<N>
        for path in glob.glob(os.path.join(d, "*-n*")):
            m = re.fullmatch(r"(.+)-n(\d+)", os.path.basename(path))
            if m and os.path.exists(os.path.join(path, "worker-0.trace.json")):
                runs.append((m.group(1), int(m.group(2)), path))
        for _, _, run in sorted(runs):
            trace = os.path.join(run, "worker-0.trace.json")
            try:
                counts, steps = per_step(trace)
            except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
                print(f"requests_per_step: {trace}: {e}", file=sys.stderr)
                return 1
            print(f"{os.path.basename(run):<16} {steps:>5} {counts['push']:>7.0f} {counts['pull']:>7.0f} "
                  f"{counts['await']:>7.0f} {sum(counts.values()):>7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
