#!/usr/bin/env python3
"""scaling_points: the measured sync efficiencies bench/scaling_model.py calibrates on and checks
against, read from bench/results: the 2-core VM's bench/scaling csvs (MEASURED), the 16-core
session's sections (SIXTEEN_CORES) and the runs with TCP's minimum timeout scaled (RTO_SCALED).
Each point is a dict: n, mbit, ms (the link and compute it ran at), label (the scale), value_bytes
(4 float32, 2 bfloat16 on the wire), cores, cpu (machine %), measured, timers ("kernel" or
"scaled") and calibration (whether the fit uses it); kind() names its role."""
import csv
import os
import re

CPU_BOUND_PCT = 60
# (file under bench/results, link Mbit/s, compute ms, label, wire bytes per value): bench/scaling
# --netns on the 2-core VM, sync rows
MEASURED = [("scaling_netns_scaled_chunks.csv", 100, 1900, "x10", 4),
            ("scaling_netns_scaled_chunks_n16.csv", 100, 1900, "x10", 4),
            ("cpu_per_step_netns_x20.csv", 50, 3800, "x20", 4),
            ("cpu_per_step_netns_x40.csv", 25, 7600, "x40", 4),
            ("scaling_netns_scaled_chunks_bf16.csv", 100, 1900, "x10", 2)]
# The same commands on 16 cores (the lent GPU machine's CPUs, 2026-11-27): its sections, by the
# label after "## ", as (link Mbit/s, compute ms, label, wire bytes per value).
SIXTEEN_CORES = ("scaling_16_cores.txt", {"x10": (100, 1900, "x10", 4), "x20": (50, 3800, "x20", 4),
                                          "x10, bfloat16 on the wire": (100, 1900, "x10", 2)})
# N = 16 and 32 with TCP's minimum retransmission timeout scaled with the emulation (x20-x160, 2-core VM):
# an out-of-sample check, not fitted (the calibration's points ran with the kernel's 200 ms).
# Only runs with the machine at most "about 60%" busy (x40 N = 16 ran at 60-61%) count.
RTO_SCALED = "scaling_n16_n32_rto_scaled.csv"
RTO_SCALED_CPU_PCT = 61


def point(n, measured, cpu, where, cores, timers="kernel"):
    """A measured point of N > 1 workers (None for N = 1, the baseline); float32 ones under
    CPU_BOUND_PCT machine CPU with the kernel's TCP timers calibrate, the others check."""
    if int(n) <= 1:
        return None
    mbit, ms, label, value_bytes = where
    cpu = float(cpu)
    return dict(n=int(n), mbit=mbit, ms=ms, label=label, value_bytes=value_bytes, cores=cores, cpu=cpu,
                measured=float(measured), timers=timers,
                calibration=value_bytes == 4 and cpu < CPU_BOUND_PCT and timers == "kernel")


def row_point(row, where, cores, timers="kernel"):
    """point() of a bench/scaling csv row (a dict by its header)."""
    return point(row["workers"], row["efficiency"], row["machine_cpu_pct"], where, cores, timers)


def read_sixteen_cores(results):
    """The sync rows of scaling_16_cores.txt's sections: csv rows, or '# N=16: ... efficiency E ...
    machine C%' lines where the csv did not come back."""
    name, sections = SIXTEEN_CORES
    points, where, header = [], None, None
    with open(os.path.join(results, name)) as f:
        for line in f:
            label = line[3:].split(":")[0] if line.startswith("## ") else None
            if label in sections or (label and ": bench/scaling " in line):  # a section begins
                where, header = sections.get(label), None
            elif where and line.startswith("compute,"):
                header = line.strip().split(",")
            elif where and header and line.startswith("emulated,sync,"):
                points.append(row_point(dict(zip(header, line.strip().split(","))), where, 16))
            elif where and (m := re.match(r"# N=(\d+):.*efficiency ([\d.]+).*machine (\d+)%", line)):
                points.append(point(m[1], m[2], m[3], where, 16))
    return [p for p in points if p is not None]


def read_rto_scaled(results):
    """The sync rows of RTO_SCALED with the scaled timeout (not its "kernel" rows), as check points;
    the scale k from the compute (190 ms x k) gives the link (1000 / k Mbit/s)."""
    with open(os.path.join(results, RTO_SCALED)) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    points = []
    for row in rows:
        if row["mode"] != "sync" or "kernel" in row["variant"]:
            continue
        k = round(float(row["compute_ms"]) / 190)
        where = (1000 / k, 190 * k, f"x{k}", 2 if row["variant"].endswith("bf16") else 4)
        p = row_point(row, where, 2, timers="scaled")
        if p is not None and p["cpu"] <= RTO_SCALED_CPU_PCT:
            points.append(p)
    return points


def read_measured(results):
    points = []
    for name, mbit, ms, label, value_bytes in MEASURED:
        with open(os.path.join(results, name)) as f:
            points += [row_point(row, (mbit, ms, label, value_bytes), 2) for row in csv.DictReader(f)
                       if row["mode"] == "sync"]
    points = [p for p in points if p is not None] + read_sixteen_cores(results) + read_rto_scaled(results)
    return sorted(points, key=lambda p: (p["value_bytes"] != 4, p["n"], p["mbit"], p["cores"]))


KINDS = ("calibration", "CPU-bound, not fitted", "bfloat16: check, not fitted", "TCP's timeout scaled: check, not fitted")


def kind(p):
    if p["timers"] == "scaled":
        return KINDS[3]
    if p["value_bytes"] == 2:
        return KINDS[2]
    return KINDS[0] if p["calibration"] else KINDS[1]
