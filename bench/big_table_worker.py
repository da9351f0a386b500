#!/usr/bin/env python3
"""bench/big_table_worker.py: the worker of bench/big_table (run by
deploy/ps_launch --script=...). Trains HashEmbeddingBag(64, mode="sum") ->
Linear(64, 1) with BCE on random labels over batches of fresh ids: step i
uses the ids splitmix64([i*B, (i+1)*B)), one id per bag, so every id is new
and the servers' table grows by B rows a step, until --big_rows rows are
touched. Job flags (read from the job's flag file):

  --big_rows=50000000     distinct rows to touch
  --big_batch=65536       ids (bags) per step
  --big_log_every=50      steps between progress lines
  --big_mem_floor_mb=2560 stop early (gracefully) if MemAvailable drops below this

Every progress line has rows so far, rows/s, this worker's VmRSS, each
server's VmRSS (pids from ps_launch's DIR/server-<s>.pid) and MemAvailable.
At the end: the worker's VmHWM, each server's VmRSS/VmHWM and its
shardps_table_rows / shardps_table_bytes from /metrics (the port from
DIR/server-<s>.out, the job having --metrics_port=0), bytes per row against
the 256-byte payload (and payload + optimizer slot), time and rows/s. The
last line is a JSON summary (also written to the job's summary file).
"""
import json
import os
import re
import sys
import time
import urllib.request

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import shardps
import shardps.torch

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
SLOT_BYTES = {"sgd": 0, "rowwise_adagrad": 4, "adagrad": 256, "lazy_adam": 512}


def splitmix64(x):
    """A bijection on uint64: distinct inputs give distinct ids."""
    with np.errstate(over="ignore"):
        z = x + GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def proc_status(pid="self"):
    """{field: bytes} of VmRSS and VmHWM (0 where the process is gone)."""
    out = {"VmRSS": 0, "VmHWM": 0}
    try:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in out:
                    out[key] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def launch_dir(job):
    return os.path.dirname(job.summary_json) if job.summary_json else ""


def server_pids(job):
    pids = []
    d = launch_dir(job)
    for s in range(job.flag("num_servers", int, 0)):
        try:
            with open(os.path.join(d, "server-%d.pid" % s)) as f:
                pids.append(int(f.read().strip()))
        except (OSError, ValueError):
            pids.append(0)
    return pids


def metrics(job, s):
    """shardps_table_rows / shardps_table_bytes lines of server s's /metrics."""
    try:
        with open(os.path.join(launch_dir(job), "server-%d.out" % s)) as f:
            port = int(re.search(r"metrics_port=(\d+)", f.read()).group(1))
        if port <= 0:
            return None, {}
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30).read().decode()
    except (OSError, AttributeError, ValueError) as e:
        print("big_table: no /metrics for server %d: %s" % (s, e), flush=True)
        return None, {}
    values = {}
    lines = []
    for line in text.splitlines():
        if line.startswith("shardps_table_rows{") or line.startswith("shardps_table_bytes{"):
            lines.append(line)
            name, value = line.rsplit(" ", 1)
            values[name.split("{", 1)[0]] = values.get(name.split("{", 1)[0], 0) + float(value)
    return port, {"lines": lines, **values}


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.emb = shardps.torch.HashEmbeddingBag(dim, mode="sum", name="big")
        self.head = nn.Linear(dim, 1)

    def forward(self, ids):
        return self.head(self.emb(ids)).squeeze(1)


def mb(x):
    return x / 2 ** 20


def main():
    job = shardps.init_from_env()
    rows_target = job.flag("big_rows", int, 50_000_000)
    batch = job.flag("big_batch", int, 65536)
    log_every = job.flag("big_log_every", int, 50)
    floor = job.flag("big_mem_floor_mb", int, 2560) * 2 ** 20
    optimizer = job.flag("row_optimizer", str, "adagrad")
    dim = 64
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = Model(dim)
    worker = shardps.torch.Worker(model, job)
    pids = server_pids(job)
    print("big_table: rows %d batch %d row_optimizer %s servers %s (pids %s); worker pid %d"
          % (rows_target, batch, optimizer, job.servers, pids, os.getpid()), flush=True)
    steps = (rows_target + batch - 1) // batch
    labels_gen = torch.Generator().manual_seed(2)
    step = worker.start()
    first_step = step
    start = time.perf_counter()
    last_t, last_rows, stopped = start, 0, ""
    rows = 0
    i = 0
    while i < steps:
        base = np.arange(i * batch, min((i + 1) * batch, rows_target), dtype=np.uint64)
        ids = torch.from_numpy(splitmix64(base).view(np.int64)).view(-1, 1)
        labels = torch.randint(0, 2, (ids.shape[0],), generator=labels_gen).float()
        loss = F.binary_cross_entropy_with_logits(model(ids), labels)
        loss.backward()
        step = worker.step_done()
        rows += ids.shape[0]
        i += 1
        avail = mem_available()
        if i % log_every == 0 or i == steps or avail < floor:
            now = time.perf_counter()
            srv = [proc_status(p)["VmRSS"] for p in pids]
            print("step %4d rows %10d  %7.0f rows/s (last %d steps: %7.0f)  worker_rss %6.0f MB  server_rss %s MB"
                  "  sum %6.0f MB = %5.1f B/row  MemAvailable %6.0f MB  loss %.4f"
                  % (i, rows, rows / (now - start), log_every, (rows - last_rows) / max(now - last_t, 1e-9),
                     mb(proc_status()["VmRSS"]), "/".join("%.0f" % mb(x) for x in srv), mb(sum(srv)),
                     sum(srv) / max(rows, 1), mb(avail), loss.item()), flush=True)
            last_t, last_rows = now, rows
        if avail < floor:
            stopped = "MemAvailable %.0f MB < floor %.0f MB at step %d" % (mb(avail), mb(floor), i)
            print("big_table: STOPPING EARLY: " + stopped, flush=True)
            break
    worker.tables.wait()  # the last step's row pushes are applied
    seconds = time.perf_counter() - start
    me = proc_status()
    servers = []
    for s, pid in enumerate(pids):
        st = proc_status(pid)
        port, m = metrics(job, s)
        servers.append({"server": s, "pid": pid, "metrics_port": port, "vmrss": st["VmRSS"], "vmhwm": st["VmHWM"],
                        "table_rows": m.get("shardps_table_rows"), "table_bytes": m.get("shardps_table_bytes"),
                        "metrics_lines": m.get("lines", [])})
    worker.close()
    payload = dim * 4
    slot = SLOT_BYTES.get(optimizer, 0)
    total_rss = sum(s["vmrss"] for s in servers)
    total_rows = sum(s["table_rows"] or 0 for s in servers)
    total_tbytes = sum(s["table_bytes"] or 0 for s in servers)
    print("", flush=True)
    print("=== big_table result ===")
    print("rows touched by the worker: %d in %d steps of %d (steps %d..%d)%s"
          % (rows, i, batch, first_step, step, ("; " + stopped) if stopped else ""))
    print("time %.1f s, %.0f rows/s (%.3f s/step)" % (seconds, rows / seconds, seconds / max(i, 1)))
    print("worker: VmRSS %.0f MB, peak VmHWM %.0f MB (goal < 1536 MB)" % (mb(me["VmRSS"]), mb(me["VmHWM"])))
    for s in servers:
        r = s["table_rows"] or 0
        print("server %d (pid %d): VmRSS %.0f MB, VmHWM %.0f MB, shardps_table_rows %d, shardps_table_bytes %.0f MB;"
              " RSS %.1f B/row, table %.1f B/row"
              % (s["server"], s["pid"], mb(s["vmrss"]), mb(s["vmhwm"]), r, mb(s["table_bytes"] or 0),
                 s["vmrss"] / max(r, 1), (s["table_bytes"] or 0) / max(r, 1)))
        for line in s["metrics_lines"]:
            print("    " + line)
    print("both servers: %d rows (%.2f GB of 256-byte payload), VmRSS %.2f GB, table bytes %.2f GB"
          % (total_rows, total_rows * payload / 1e9, total_rss / 1e9, total_tbytes / 1e9))
    print("bytes/row: RSS %.1f, table %.1f; vs payload %d B: RSS %.2fx, table %.2fx; vs payload+slot %d B: RSS %.2fx,"
          " table %.2fx (goal <= 1.5x)"
          % (total_rss / max(total_rows, 1), total_tbytes / max(total_rows, 1), payload,
             total_rss / max(total_rows, 1) / payload, total_tbytes / max(total_rows, 1) / payload,
             payload + slot, total_rss / max(total_rows, 1) / (payload + slot),
             total_tbytes / max(total_rows, 1) / (payload + slot)), flush=True)
    summary = {"rows_touched": rows, "steps": i, "batch": batch, "row_optimizer": optimizer,
               "seconds": seconds, "rows_per_second": rows / seconds, "stopped_early": stopped or None,
               "worker_vmrss": me["VmRSS"], "worker_vmhwm": me["VmHWM"],
               "servers": [{k: v for k, v in s.items() if k != "metrics_lines"} for s in servers],
               "server_rows": total_rows, "server_rss": total_rss, "server_table_bytes": total_tbytes,
               "rss_bytes_per_row": total_rss / max(total_rows, 1),
               "table_bytes_per_row": total_tbytes / max(total_rows, 1), "payload_bytes": payload,
               "slot_bytes": slot}
    print(json.dumps(summary), flush=True)
    if job.summary_json:
        with open(job.summary_json, "w") as f:
            f.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    sys.exit(main())
