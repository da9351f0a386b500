#!/usr/bin/env python3
"""Instructions a worker and a server execute per step, against N.

CPU-seconds per step on a 2-core machine that runs 2N processes grow with N
for two reasons: the processes do more work per step, or the same work costs
more cycles among more processes (scheduling, cache and TLB misses). This
bench tells them apart. It runs bench/scaling with server 0 and worker 0
under callgrind (valgrind), which counts the instructions they execute: a
count that is blind to how busy the machine is.

For each N it runs the job twice, with --steps=SHORT and --steps=LONG, and
takes the difference over LONG - SHORT steps, so that start-up and shut-down
cancel. Prints per N the worker's and the server's instructions per step and
their ratio to the first N; then, between the first and the last N, the
functions whose instructions per step grew most. Writes instructions.csv and
instructions.png (gnuplot) to --out.

  python3 bench/instructions_per_step.py [--workers=2,8,16,32] [--mode=sync] [--steps=2,6]
                                        [--compute_ms=7600] [--top=12] [--out=DIR] [-- bench/scaling flags...]

The workers' heartbeat interval is stretched with the step (2 s x
compute_ms / 190 ms) unless the scaling flags set one. Needs valgrind.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROLES = (("worker", "emulated_worker"), ("server", "ps_server"))
FUNCTION_LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.+?)(?:\s+\[[^\]]*\])?$")


class Failure(Exception):
    pass


def read_profile(path, annotate):
    """(role, total instructions, {function: instructions}) of one callgrind file."""
    binary, total = None, None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if binary is None and line.startswith("cmd:") and len(line.split()) > 1:
                binary = line.split()[1]
            elif line.startswith("totals:") or line.startswith("summary:"):
                total = int(line.split()[1])
    if binary is None or total is None:
        raise Failure(f"{path} is not a complete callgrind profile")
    role = next((r for r, b in ROLES if binary.endswith("/" + b)), None)
    if role is None:
        raise Failure(f"{path} profiles {binary}, neither a worker nor a server")
    return role, total, parse_functions(annotate(path))


def parse_functions(text):
    """{function: instructions} from callgrind_annotate's listing (self cost)."""
    functions = {}
    for line in text.splitlines():
        m = FUNCTION_LINE.match(line)
        if m and "PROGRAM TOTALS" not in m.group(2):
            name = m.group(2).split(":", 1)[1] if ":" in m.group(2) else m.group(2)
            functions[name] = functions.get(name, 0) + int(m.group(1).replace(",", ""))
    return functions


def callgrind_annotate(path):
    run = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=99.9", path],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise Failure(f"callgrind_annotate {path}: {run.stderr.strip()[-300:]}")
    return run.stdout


def per_step(short, long, steps):
    """Instructions per step, and per function, from two runs' profiles."""
    span = steps[1] - steps[0]
    out = {}
    for role in ("worker", "server"):
        (t0, f0), (t1, f1) = short[role], long[role]
        if t1 <= t0:
            raise Failure(f"the {role} ran fewer instructions in {steps[1]} steps than in {steps[0]}")
        names = set(f0) | set(f1)
        out[role] = ((t1 - t0) / span, {n: (f1.get(n, 0) - f0.get(n, 0)) / span for n in names})
    return out


def run_job(args, n, steps, work, extra):
    """Runs one bench/scaling job under callgrind; {role: (total, functions)}."""
    profiles = os.path.join(work, f"n{n}-s{steps}")
    os.makedirs(profiles)
    wrap = f"valgrind --tool=callgrind --callgrind-out-file={profiles}/cg.%p"
    cmd = [os.path.join(ROOT, "bench", "scaling"), f"--workers={n}", f"--modes={args.mode}",
           f"--compute_ms={args.compute_ms}", f"--steps={steps}", f"--wrap_first={wrap}",
           f"--out={profiles}/run"] + extra
    print(f"instructions_per_step: N = {n}, {steps} steps ...", flush=True)
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise Failure(f"bench/scaling failed for N = {n}: {(run.stdout + run.stderr).strip()[-500:]}")
    found = {}
    for name in sorted(os.listdir(profiles)):
        if name.startswith("cg."):
            role, total, functions = read_profile(os.path.join(profiles, name), callgrind_annotate)
            found[role] = (total, functions)
    if set(found) != {"worker", "server"}:
        raise Failure(f"N = {n}: want a worker's and a server's profile in {profiles}, found {sorted(found)}")
    return found


def report(rows, top):
    """Prints the table and the functions that grew most; returns CSV lines."""
    first_n, first = rows[0]
    print(f"\n{'N':>3} {'worker Minstr/step':>19} {'x first':>8} {'server Minstr/step':>19} {'x first':>8}")
    csv = ["workers,worker_instructions_per_step,server_instructions_per_step"]
    for n, r in rows:
        w, s = r["worker"][0], r["server"][0]
        print(f"{n:>3} {w / 1e6:>19.1f} {w / first['worker'][0]:>8.2f} {s / 1e6:>19.1f} {s / first['server'][0]:>8.2f}")
        csv.append(f"{n},{w:.0f},{s:.0f}")
    last_n, last = rows[-1]
    for role in ("worker", "server"):
        # One N: where its instructions go; more: what grew most from the first to the last.
        names = set(first[role][1]) | set(last[role][1])
        key = (lambda f: last[role][1].get(f, 0)) if len(rows) == 1 else \
            (lambda f: last[role][1].get(f, 0) - first[role][1].get(f, 0))
        grown = sorted(((key(f), f) for f in names), reverse=True)[:top]
        what = f"the most instructions per step at N = {last_n}" if len(rows) == 1 else \
            f"instructions per step that grew most from N = {first_n} to {last_n}"
        print(f"\n{role}: functions with {what} (Minstr/step at N = {first_n} -> {last_n})")
        for delta, f in grown:
            print(f"  {first[role][1].get(f, 0) / 1e6:8.2f} -> {last[role][1].get(f, 0) / 1e6:8.2f}  {f[:150]}")
    return csv


def plot(out):
    if not shutil.which("gnuplot"):
        print("instructions_per_step: gnuplot not installed; no plot")
        return
    script = f"""set datafile separator ','
set terminal pngcairo size 800,450 noenhanced
set output '{out}/instructions.png'
set title 'Instructions per step (callgrind), server 0 and worker 0'
set xlabel 'workers (N)'
set ylabel 'million instructions per step'
set yrange [0:*]
set key top left
set grid
plot '{out}/instructions.csv' using 1:($2/1e6) skip 1 with linespoints title 'worker', \\
     '' using 1:($3/1e6) skip 1 with linespoints title 'server'
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=False)
    print(f"instructions_per_step: plot {out}/instructions.png")


def main(argv):
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="2,8,16,32")
    p.add_argument("--mode", default="sync")
    p.add_argument("--steps", default="2,6")
    p.add_argument("--compute_ms", type=int, default=7600)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    try:
        workers = [int(n) for n in args.workers.split(",")]
        steps = [int(s) for s in args.steps.split(",")]
    except ValueError:
        raise Failure("--workers and --steps are comma-separated integers")
    if len(steps) != 2 or not 1 <= steps[0] < steps[1]:
        raise Failure("--steps is SHORT,LONG with 1 <= SHORT < LONG")
    if not shutil.which("valgrind"):
        raise Failure("valgrind is not installed (tools/setup installs it)")
    if not any(a.startswith("--heartbeat_interval") for a in extra):
        extra.append(f"--heartbeat_interval={max(2, round(2 * args.compute_ms / 190))}s")
    out = args.out or tempfile.mkdtemp(prefix="shardps-instructions.")
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="profiles.", dir=out)
    rows = []
    for n in workers:
        short = run_job(args, n, steps[0], work, extra)
        long = run_job(args, n, steps[1], work, extra)
        rows.append((n, per_step(short, long, steps)))
    csv = report(rows, args.top)
    with open(os.path.join(out, "instructions.csv"), "w") as f:
        f.write("\n".join(csv) + "\n")
    plot(out)
    print(f"instructions_per_step: table {out}/instructions.csv; profiles in {work}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Failure as e:
        print(f"instructions_per_step: {e}", file=sys.stderr)
        sys.exit(1)
