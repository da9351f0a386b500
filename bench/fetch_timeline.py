#!/usr/bin/env python3
"""Where a traced step's forward pass waits, and why: the weights it fetched
before and during it, and how far the fetches of the next step's weights
trailed their readiness during backward.

Reads the one-step cluster trace that `bench/scaling --trace --out=DIR` keeps
per run (DIR/<mode>-n<N>/trace.json). Per worker:
  forward   the forward pass's span and its compute (ms); the rest is waiting
  fetched   MB of the step's weights fetched from servers, and MB of the next
            step's fetched by the end of this step's backward pass (what the
            next forward pass then need not wait for; the trace's window
            starts shortly before this step's forward pass, so the same for
            this step cannot be read)
  behind    keys of the next step that were ready (their await answered) but
            not yet fetched, averaged over backward, and the bytes in flight
            meanwhile (KB)

    python3 bench/fetch_timeline.py DIR/sync-n16
"""
import json
import sys
from collections import defaultdict


def spans(events):
    """(category, step, bytes, begin ms, end ms) of one process's async events."""
    open_, out = {}, []
    for e in sorted((e for e in events if e.get("ph") in ("b", "e")), key=lambda e: e["ts"]):
        key = (e.get("cat"), e.get("id"))
        if e["ph"] == "b":
            open_[key] = e
        elif key in open_:
            b = open_.pop(key)
            args = b.get("args", {})
            out.append((key[0], args.get("step"), args.get("bytes", 0), b["ts"] / 1e3, e["ts"] / 1e3))
    return out


def worker_row(events):
    """The row of one worker, from its own events; None without forward or step marks."""
    marks = [e for e in events if e.get("ph") == "X"]
    fw = sorted((e for e in marks if e["name"].startswith("forward")), key=lambda e: e["ts"])
    if not fw:
        return None
    fw0, fw_end = fw[0]["ts"] / 1e3, (fw[-1]["ts"] + fw[-1]["dur"]) / 1e3
    bw = [e for e in marks if e["name"].startswith("backward") and e["ts"] / 1e3 >= fw_end]
    bw_end = max(((e["ts"] + e["dur"]) / 1e3 for e in bw), default=fw_end)
    this_step = fw[0].get("args", {}).get("step")  # the forward pass's weights; the next step's come during backward
    if this_step is None:
        return None
    ss = spans(events)
    pulls = [s for s in ss if s[0] == "pull" and s[1] == this_step]
    row = {
        "forward_span": fw_end - fw0,
        "forward_work": sum(e["dur"] for e in fw) / 1e3,
        "all_mb": sum(s[2] for s in pulls) / 1e6,
    }
    ready = [s[4] for s in ss if s[0] == "await" and s[1] == this_step + 1]
    fetched = [s for s in ss if s[0] == "pull" and s[1] == this_step + 1]
    row["ahead_mb"] = sum(f[2] for f in fetched if f[4] <= bw_end) / 1e6
    samples = [fw_end + i * (bw_end - fw_end) / 20 for i in range(1, 21)]
    behind = [sum(r <= t for r in ready) - sum(f[4] <= t for f in fetched) for t in samples]
    flight = [sum(f[2] for f in fetched if f[3] <= t < f[4]) for t in samples]
    row["behind_keys"] = sum(behind) / len(behind)
    row["in_flight_kb"] = sum(flight) / len(flight) / 1024
    return row


def worker_rows(events):
    """(worker name, row) of every worker with forward marks in the trace's events, by name."""
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    by_pid = defaultdict(list)  # each process's events, read once
    for e in events:
        by_pid[e.get("pid")].append(e)
    rows = []
    for pid, name in sorted(names.items(), key=lambda x: x[1]):
        row = worker_row(by_pid[pid]) if "worker" in name else None
        if row is not None:
            rows.append((name.split()[-1], row))
    return rows


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1].rstrip("/")
    try:
        with open(path if path.endswith(".json") else path + "/trace.json") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"fetch_timeline: cannot read a trace from {path}: {e}")
    try:
        rows = worker_rows(data["traceEvents"] if isinstance(data, dict) else data)
    except (KeyError, TypeError, AttributeError) as e:
        sys.exit(f"fetch_timeline: {path} is not a bench/scaling trace ({type(e).__name__}: {e})")
    if not rows:
        sys.exit(f"fetch_timeline: no worker with forward and pull events in {path}")
    print(f"{'worker':>8} {'forward ms':>11} {'compute':>8} {'MB':>6} {'next MB ahead':>14} "
          f"{'ready, unfetched':>17} {'KB in flight':>13}")
    for name, row in rows:
        print(f"{name:>8} {row['forward_span']:>11.0f} {row['forward_work']:>8.0f} "
              f"{row['all_mb']:>6.2f} {row['ahead_mb']:>14.2f} {row['behind_keys']:>17.0f} "
              f"{row['in_flight_kb']:>13.0f}")
    mean = {k: sum(r[k] for _, r in rows) / len(rows) for k in rows[0][1]}
    print(f"{'mean':>8} {mean['forward_span']:>11.0f} {mean['forward_work']:>8.0f} {mean['all_mb']:>6.2f} "
          f"{mean['ahead_mb']:>14.2f} {mean['behind_keys']:>17.0f} {mean['in_flight_kb']:>13.0f}")


if __name__ == "__main__":
    main()
