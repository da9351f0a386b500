#!/usr/bin/env python3
"""scaling_model: bench/schedule_bound.py's fluid model, reduced by symmetry, calibrated on the
emulated cluster's measured sync efficiency (bench/scaling, N = 2-32) and run at real scale
(ResNet-50 and BERT-large, 10 and 25 Gbit/s, N = 8-256).

The model is schedule_bound's: N hosts, a worker and a server on each (S = N), sync; a worker's
forward pass (1/3 of the compute, spread over tensors by size) waits for each tensor's weights,
its backward pass (2/3) pushes each tensor's gradient as it ends; a server answers a tensor once
all N pushes of it arrived. Data flows as fluid: no latency, no CPU, no TCP dynamics. All hosts
do the same thing at the same time, so one host is simulated: its link carries (N - 1)/N of each
push and of each answer, the rest stays on the host. The "reduction check" below shows that this
gives schedule_bound's own figures (fair, and sender with the ring order the shipped schedule uses).

The link: rate x (1 - overhead), overhead 0.05 (schedule_bound's default). A share alpha of it is
shared fairly among the transfers in flight (FIFO queues, many TCP flows); the rest goes to the
most urgent transfer (the schedule). alpha = 0 is schedule_bound's "sender" (ring order; equal to
its "priority" once all hosts are alike), alpha = 1 its "fair". alpha is fitted by least squares on
the float32 points where the machine was under 60% busy: N = 2-8 on the 2-core VM, N = 16 and 32 on
16 cores (bench/results/scaling_16_cores.txt); the VM's CPU-bound points are shown, not fitted, and
the bfloat16 points (half the bytes) check the model out of sample, as do the runs with TCP's minimum
timeout scaled with the emulation (N = 16 at x40 and x80, N = 32 at x160). bench/scaling_points.py
reads the points. --resnet_ms and --bert_ms: forward+backward per step (defaults measured on an H200,
docs/scaling_model.md).

  python3 bench/scaling_model.py [--out=bench/results] [--resnet_ms=18] [--bert_ms=74]
                                 [--steps=10] [--no_plot]

Prints the reduction check, the calibration and the predictions; writes OUT/scaling_model_points.csv
and, with gnuplot, OUT/scaling_model.png. Progress goes to stderr. 3-8 minutes on the 2-core VM.
"""
import argparse
import csv
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import schedule_bound as sb  # noqa: E402
from scaling_points import CPU_BOUND_PCT, KINDS, kind, read_measured  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
OVERHEAD = 0.05
NS = [8, 16, 32, 64, 128, 256]
LINKS_GBIT = [10, 25]
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def resnet50():
    """ResNet-50's tensors in forward order, float32 bytes: schedule_bound's tenth, times ten."""
    sizes = [10 * b for b in sb.resnet50_tenth_bytes()]
    return sizes, sizes


def bert_large():
    """BERT-large (BertForMaskedLM, decoder tied to the word embedding) in forward order: float32
    bytes and compute weights (by size, as the emulated worker; the embedding lookups get none)."""
    h, ff, vocab = 1024, 4096, 30522
    t = [(vocab * h, 0), (512 * h, 0), (2 * h, 0), (h, 1), (h, 1)]  # word, position, type, norm
    for _ in range(24):
        t += [(h * h, 1), (h, 1)] * 4  # query, key, value, attention output
        t += [(h, 1), (h, 1), (h * ff, 1), (ff, 1), (ff * h, 1), (h, 1), (h, 1), (h, 1)]
    t += [(h * h, 1), (h, 1), (h, 1), (h, 1), (vocab, 1)]  # MLM transform, its norm, decoder bias
    return [4 * n for n, _ in t], [n * w for n, w in t]


def emulated(value_bytes=4):
    """The emulated cluster's layout, --layout=resnet50/10, with `value_bytes` a value on the wire
    (2: --wire_dtype=bfloat16; the compute stays spread by the float32 sizes)."""
    sizes = sb.resnet50_tenth_bytes()
    return [s * value_bytes // 4 for s in sizes], sizes


LAYOUTS = [("ResNet-50", resnet50), ("BERT-large", bert_large)]


class Host(sb.Fluid):
    """One host of the symmetric job: its transfers all leave on its link (source 0, destination 1;
    none when it holds everything, N = 1)."""

    def __init__(self, n, layout, link, compute, alpha, steps):
        super().__init__()
        sizes, weights = layout
        self.n, self.link, self.alpha, self.steps = n, link, alpha, steps
        self.bytes = [s * (n - 1) / n for s in sizes]
        self.share = [compute * w / sum(weights) for w in weights]
        self.compute = compute
        self.pulled, self.waiting, self.step_start = set(), {}, {}

    def send(self, nbytes, priority, done):
        self.transfer(0, 0 if nbytes <= 0 else 1, nbytes, priority, done)

    def pushed(self, step, b):  # every host's push of b arrived: the answers leave
        self.send(self.bytes[b], (step + 1, b, 1), lambda: self.pull_arrived(step + 1, b))

    def pull_arrived(self, step, b):
        self.pulled.add((step, b))
        if (step, b) in self.waiting:
            self.waiting.pop((step, b))()

    def forward(self, step, b):
        if b == 0:
            self.step_start[step] = self.now
        if b == len(self.bytes):
            self.backward(step, b - 1)
            return

        def compute():
            self.at(self.now + self.share[b] / 3, lambda: self.forward(step, b + 1))

        if step == 0 or (step, b) in self.pulled:
            compute()
        else:
            self.waiting[(step, b)] = compute

    def backward(self, step, b):
        def push():
            self.send(self.bytes[b], (step + 1, b, 0), lambda: self.pushed(step, b))
            if b > 0:
                self.backward(step, b - 1)
            elif step + 1 < self.steps:
                self.forward(step + 1, 0)

        self.at(self.now + self.share[b] * 2 / 3, push)

    def rates(self):
        fair = self.alpha * self.link / len(self.flows)
        rates = {f: fair for f in self.flows}
        top = min(self.flows, key=lambda f: (self.flows[f][3], f))
        rates[top] += (1 - self.alpha) * self.link
        return rates

    def efficiency(self):
        self.forward(0, 0)
        self.run()
        s = [self.step_start[i] for i in range(self.steps)]
        return self.compute / ((s[-1] - s[2]) / (self.steps - 3))  # steps 0-1 warm the pipeline


def model(n, layout, mbit, compute_ms, alpha, steps, overhead=OVERHEAD):
    if n == 1:
        return 1.0
    link = mbit * 1e6 / 8 * (1 - overhead)
    return Host(n, layout, link, compute_ms / 1000, alpha, steps).efficiency()


class Ring(sb.Cluster):
    """schedule_bound's cluster, each worker walking the servers from its own place in the ring."""

    def transfer(self, src, dst, nbytes, priority, done):
        super().transfer(src, dst, nbytes, priority + ((dst - src) % self.n,), done)


def reduction_check():
    """schedule_bound's full model against the one-host reduction, its layout, 512 KB buckets (N = 2-16)
    and one tensor a bucket (N = 4, 8: the unit used below)."""
    link, compute = 100e6 / 8 * (1 - OVERHEAD), 1.9
    print("== reduction check: schedule_bound (all N hosts) against one host, ResNet-50/10, "
          "100 Mbit/s, 1900 ms, 8 steps")
    print(f"{'bucket':>8} {'N':>4} {'fair: full':>11} {'one host':>9} {'sender (ring): full':>20} "
          f"{'one host':>9}")
    for bucket, n in [(512 << 10, n) for n in (2, 4, 8, 16)] + [(1, 4), (1, 8)]:
        grouped = sb.buckets(sb.resnet50_tenth_bytes(), bucket)
        full_fair = sb.Cluster(n, "fair", link, compute, bucket, 8).efficiency(compute)
        full_ring = Ring(n, "sender", link, compute, bucket, 8).efficiency(compute)
        one = [model(n, (grouped, grouped), 100, 1900, a, 8) for a in (1.0, 0.0)]
        print(f"{'512 KB' if bucket > 1 else 'tensor':>8} {n:>4} {full_fair:>11.4f} {one[0]:>9.4f} "
              f"{full_ring:>20.4f} {one[1]:>9.4f}", flush=True)
    print()


def fit(cal, steps, overhead=OVERHEAD, grid=(0.0, 1.0, 0.02)):
    """alpha that minimises the squared error over the points `cal`: a grid, then finer."""

    def sse(a):
        return sum((model(p["n"], emulated(p["value_bytes"]), p["mbit"], p["ms"], a, steps, overhead)
                    - p["measured"]) ** 2 for p in cal)

    lo, hi, step = grid
    best = min((lo + i * step for i in range(round((hi - lo) / step) + 1)), key=sse)
    best = min((min(hi, max(lo, best + i * step / 20)) for i in range(-20, 21)), key=sse)
    return best, math.sqrt(sse(best) / len(cal))


def fit_both(cal, steps):
    """overhead and alpha together (reported, not used): overhead on a grid, alpha fitted at each."""
    fits = []
    for overhead in [i * 0.01 for i in range(11)]:
        print(f"  two-parameter fit: overhead {overhead:.2f}", file=sys.stderr, flush=True)
        fits.append(fit(cal, steps, overhead, (0.0, 1.0, 0.05))[::-1] + (overhead,))
    return min(fits)


def calibrate(points, steps):
    """alpha fitted on the float32 points under CPU_BOUND_PCT at N <= 8 (the first calibration) and
    at every N (used); each point's error under the second, with sender and fair beside it."""
    t = time.time()
    small, _ = fit([p for p in points if p["calibration"] and p["n"] <= 8], steps)
    cal = [p for p in points if p["calibration"]]
    alpha, rms = fit(cal, steps)
    print(f"  fitted alpha {small:.3f} (N <= 8), {alpha:.3f} (all; {time.time() - t:.0f} s)", file=sys.stderr,
          flush=True)
    rms2, alpha2, overhead2 = fit_both(cal, steps)
    print(f"== calibration: overhead {OVERHEAD} (fixed: headers), alpha fitted by least squares on the "
          f"{len(cal)} float32 points under {CPU_BOUND_PCT}% machine CPU (2-core VM, and 16 cores at N = 16, 32)")
    print(f"   alpha = {alpha:.3f}: {alpha:.1%} of each link shared fairly among the transfers in flight, "
          f"the rest in the schedule's order; rms error {rms:.4f}")
    print(f"   (on the points at N <= 8 alone, the first calibration: alpha {small:.3f}; "
          f"overhead fitted too: overhead {overhead2:.2f}, alpha {alpha2:.3f}, rms {rms2:.4f}; not used)")
    print(f"{'N':>4} {'scale':>5} {'wire':>5} {'cores':>5} {'link':>8} {'compute':>8} {'measured':>9} {'model':>6} "
          f"{'error':>7} {'N<=8 fit':>8} {'sender':>7} {'fair':>6} {'machine CPU':>12}  point")
    for p in points:
        layout = emulated(p["value_bytes"])
        p["model"] = model(p["n"], layout, p["mbit"], p["ms"], alpha, steps)
        p["small"] = model(p["n"], layout, p["mbit"], p["ms"], small, steps)
        p["sender"] = model(p["n"], layout, p["mbit"], p["ms"], 0.0, steps)
        p["fair"] = model(p["n"], layout, p["mbit"], p["ms"], 1.0, steps)
        print(f"{p['n']:>4} {p['label']:>5} {'bf16' if p['value_bytes'] == 2 else 'f32':>5} {p['cores']:>5} "
              f"{p['mbit']:>4} Mb/s {p['ms']:>5} ms {p['measured']:>9.3f} {p['model']:>6.3f} "
              f"{p['model'] - p['measured']:>+7.3f} {p['small']:>8.3f} {p['sender']:>7.3f} {p['fair']:>6.3f} "
              f"{p['cpu']:>11.0f}%  {kind(p)}")
    for label in KINDS:
        e = [p["model"] - p["measured"] for p in points if kind(p) == label]
        if not e:  # no point of this kind in bench/results
            continue
        print(f"   {label}: mean error {sum(e) / len(e):+.4f}, largest {max(e, key=abs):+.4f}")
    print()
    return alpha


def predict(alpha, steps, compute_ms):
    """Efficiency per layout, link, N, compute (base, half, double) and policy."""
    rows, t0 = [], time.time()
    runs = [(1, "calibrated", alpha), (1, "sender", 0.0), (1, "fair", 1.0), (0.5, "calibrated", alpha),
            (2, "calibrated", alpha)]
    for (name, layout), base in zip(LAYOUTS, compute_ms):
        for gbit in LINKS_GBIT:
            for n in NS:
                rows += [dict(layout=name, gbit=gbit, n=n, ms=base * f, factor=f, policy=pol,
                              efficiency=model(n, layout(), gbit * 1000, base * f, al, steps))
                         for f, pol, al in runs]
                print(f"  {name} {gbit} Gbit/s N = {n}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return rows


def print_predictions(rows, compute_ms):
    e = {(r["layout"], r["gbit"], r["n"], r["factor"], r["policy"]): r["efficiency"] for r in rows}
    print(f"== predictions: sync, S = N, float32, compute per step ResNet-50 {compute_ms[0]:g} ms, "
          f"BERT-large {compute_ms[1]:g} ms")
    print("   calibrated: the fitted alpha; sender: alpha 0 (schedule kept perfectly); "
          "fair: alpha 1 (no schedule)")
    print(f"{'layout':>10} {'link':>8} {'N':>4} {'calibrated':>11} {'sender':>7} {'fair':>6} "
          f"{'calibrated at half compute':>27} {'at double':>10}")
    for (layout, _), gbit, n in ((l, g, n) for l in LAYOUTS for g in LINKS_GBIT for n in NS):
        v = [e[(layout, gbit, n) + k] for k in ((1, "calibrated"), (1, "sender"), (1, "fair"),
                                                 (0.5, "calibrated"), (2, "calibrated"))]
        print(f"{layout:>10} {gbit:>3} Gb/s {n:>4} {v[0]:>11.3f} {v[1]:>7.3f} {v[2]:>6.3f} "
              f"{v[3]:>27.3f} {v[4]:>10.3f}")
    print()


def break_even(alpha, steps, target=0.9):
    """The compute per step at which the calibrated model reaches `target`: bisection on its log."""
    out = []
    for (name, layout), gbit, n in ((l, g, n) for l in LAYOUTS for g in LINKS_GBIT for n in (64, 256)):
        lo, hi = 1.0, 1e5  # ms
        while hi / lo > 1.01:
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if model(n, layout(), gbit * 1000, mid, alpha, steps) < target else (lo, mid)
        out.append(dict(layout=name, gbit=gbit, n=n, ms=hi, factor=None, policy=f"calibrated, reaches {target}",
                        efficiency=target))
    print(f"== compute per step at which the calibrated model reaches efficiency {target} (within 1%)")
    for r in out:
        print(f"{r['layout']:>10} {r['gbit']:>3} Gb/s N = {r['n']:>3}: {r['ms']:>6.0f} ms")
    print()
    return out


def write_csv(path, points, curve, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["section", "layout", "link_mbit", "compute_ms", "workers", "policy", "model",
                    "measured", "error", "machine_cpu_pct", "calibration_point", "wire_dtype", "machine_cores",
                    "tcp_min_timeout"])
        for p in points:
            w.writerow(["measured", "resnet50/10", p["mbit"], p["ms"], p["n"], "calibrated",
                        f"{p['model']:.4f}", p["measured"], f"{p['model'] - p['measured']:+.4f}",
                        f"{p['cpu']:.0f}", int(p["calibration"]), "bfloat16" if p["value_bytes"] == 2 else "float32",
                        p["cores"], p["timers"]])
        for n, policy, e in curve:
            w.writerow(["emulated_model", "resnet50/10", 100, 1900, n, policy, f"{e:.4f}", "", "", "", "",
                        "bfloat16" if policy.endswith("bfloat16") else "float32", "", ""])
        for r in rows:
            w.writerow(["prediction" if r["factor"] else "break_even", r["layout"], r["gbit"] * 1000,
                        f"{r['ms']:.4g}", r["n"], r["policy"],
                        f"{r['efficiency']:.4f}", "", "", "", "", "float32", "", ""])


def plot(path, points, curve, rows):
    """Left: the emulated cluster, measured and model. Right: the predictions, calibrated and fair."""
    def block(name, lines):
        return f"${name} << EOD\n" + "".join(f"{x} {y}\n" for x, y in lines) + "EOD\n"

    data, left, right = [], [], []
    for i, (pol, style) in enumerate((("calibrated", "lw 2 lc rgb 'black'"), ("sender", "dt 2 lc rgb 'gray40'"),
                                      ("fair", "dt 3 lc rgb 'gray40'"))):
        data.append(block(f"c{i}", [(n, e) for n, p, e in curve if p == pol]))
        left.append(f"$c{i} with lines {style} title 'model, {pol}'")
    data.append(block("c3", [(n, e) for n, p, e in curve if p == "calibrated, bfloat16"]))
    left.append("$c3 with lines lw 1 lc rgb '#ff7f0e' title 'model, calibrated, bfloat16'")
    groups = [(lab, cores, vb, cal) for vb in (4, 2) for cores in (2, 16) for lab in ("x10", "x20", "x40")
              for cal in (True, False)]
    for i, (lab, cores, vb, cal) in enumerate(groups):
        pts = [(p["n"], p["measured"]) for p in points if p["timers"] == "kernel" and
               (p["label"], p["cores"], p["value_bytes"], p["calibration"]) == (lab, cores, vb, cal)]
        if pts:
            shape = 9 if vb == 2 else (5 if cores == 16 else (7 if cal else 6))
            colour = "#ff7f0e" if vb == 2 else COLOURS[("x10", "x20", "x40").index(lab)]
            data.append(block(f"m{i}", pts))
            left.append(f"$m{i} with points pt {shape} ps 1.4 lc rgb '{colour}' title 'measured {lab}, "
                        f"{'bfloat16, ' if vb == 2 else ''}{cores} cores{'' if cal or vb == 2 else ', CPU-bound'}'")
    for vb in (4, 2):  # TCP's timeout scaled with the emulation
        pts = [(p["n"], p["measured"]) for p in points if p["timers"] == "scaled" and p["value_bytes"] == vb]
        if pts:
            data.append(block(f"t{vb}", pts))
            left.append(f"$t{vb} with points pt 13 ps 1.4 lc rgb '{'#ff7f0e' if vb == 2 else '#8c564b'}' "
                        f"title 'measured x40-x160, {'bfloat16, ' if vb == 2 else ''}TCP timeout scaled, 2 cores'")
    for i, (lay, g) in enumerate((lay, g) for lay, _ in LAYOUTS for g in LINKS_GBIT):
        for pol, dt in (("calibrated", 1), ("fair", 2)):
            data.append(block(f"p{i}{dt}", [(r["n"], r["efficiency"]) for r in rows if r["factor"] == 1 and
                                            (r["layout"], r["gbit"], r["policy"]) == (lay, g, pol)]))
            right.append(f"$p{i}{dt} with linespoints lw 2 dt {dt} pt 7 ps 0.7 lc rgb '{COLOURS[i]}' "
                         f"title '{lay} {g} Gbit/s{' (fair)' if pol == 'fair' else ''}'")
    ms = [next(r["ms"] for r in rows if r["layout"] == lay and r["factor"] == 1) for lay, _ in LAYOUTS]
    script = "".join(data) + f"""set terminal pngcairo size 1400,560 font 'sans,10'
set output '{path}'
set multiplot layout 1,2
set logscale x 2
set grid
set xlabel 'N (workers = servers)'
set ylabel 'scaling efficiency'
set key bottom right
set title 'Emulated cluster, ResNet-50/10, sync (model: 100 Mbit/s, 1900 ms = x20 = x40)'
set xrange [1.5:300]
set yrange [0.3:1.01]
plot {", ".join(left)}
set title 'Predicted, sync, float32, compute ResNet-50 {ms[0]:g} ms, BERT-large {ms[1]:g} ms a step'
set xrange [6:300]
set yrange [0:1]
set key top right
plot {", ".join(right)}
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def emulated_curve(alpha, steps):
    """The model of the emulated cluster out to N = 256, printed."""
    curve = [(n, pol, model(n, emulated(vb), 100, 1900, al, steps)) for n in [2, 4, 8, 16, 32, 64, 128, 256]
             for pol, al, vb in (("calibrated", alpha, 4), ("sender", 0.0, 4), ("fair", 1.0, 4),
                                 ("calibrated, bfloat16", alpha, 2))]
    print("== the emulated cluster beyond 32 (model): ResNet-50/10, 100 Mbit/s, 1900 ms")
    print(f"{'N':>20} " + " ".join(f"{n:>5}" for n in sorted({c[0] for c in curve})))
    for pol in ("calibrated", "sender", "fair", "calibrated, bfloat16"):
        print(f"{pol:>20} " + " ".join(f"{e:>5.3f}" for n, p, e in curve if p == pol))
    print()
    return curve


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--resnet_ms", type=float, default=18, help="ResNet-50 compute per step")
    ap.add_argument("--bert_ms", type=float, default=74, help="BERT-large compute per step")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--no_plot", action="store_true")
    a = ap.parse_args()
    t0 = time.time()
    print("scaling_model: schedule_bound's fluid model on one host of a symmetric sync job, S = N, "
          f"link overhead {OVERHEAD}, tensors as the unit of dependency, {a.steps} steps\n")
    reduction_check()
    points = read_measured(RESULTS)
    alpha = calibrate(points, a.steps)
    curve = emulated_curve(alpha, a.steps)
    rows = predict(alpha, a.steps, (a.resnet_ms, a.bert_ms))
    print_predictions(rows, (a.resnet_ms, a.bert_ms))
    even = break_even(alpha, a.steps)
    os.makedirs(a.out, exist_ok=True)
    write_csv(os.path.join(a.out, "scaling_model_points.csv"), points, curve, rows + even)
    if not a.no_plot:
        plot(os.path.join(a.out, "scaling_model.png"), points, curve, rows)
    print(f"wrote {os.path.relpath(os.path.join(a.out, 'scaling_model_points.csv'))}"
          f"{'' if a.no_plot else ' and scaling_model.png'}; {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
