#!/usr/bin/env python3
"""bench/scaling_model.py and bench/scaling_points.py: the measured points the model calibrates on
are read as measured (the 16-core file's sections by their own labels, a row kept only in a
comment, bfloat16 apart from float32, the scaled-timeout runs as checks), the bfloat16 layout
halves the bytes and keeps the compute, and the fit finds the alpha that made its points. Prints
Catch2-style summary lines (tests/checks.sh's format)."""
import os
import sys
import tempfile

runfiles = os.path.join(os.environ.get("TEST_SRCDIR", os.path.join(os.getcwd(), "..")), "shardps")
sys.path.insert(0, os.path.join(runfiles, "bench"))
import scaling_model as m  # noqa: E402
import scaling_points as pts  # noqa: E402

checks = 0


def check(ok, what, detail=""):
    global checks
    if not ok:
        print(f"FAILED: {what}{': ' + str(detail) if detail else ''}")
        print(f"test cases: {checks + 1} | {checks} passed | 1 failed")
        sys.exit(1)
    checks += 1
    print(f"ok: {what}")


def key(p):
    return (p["n"], p["label"], p["value_bytes"], p["cores"], p["measured"], p["calibration"])


# The committed results: the 16-core session's float32 points calibrate, its bfloat16 ones do
# not, its loopback rows are not cluster points at all.
points = pts.read_measured(os.path.join(runfiles, "bench", "results"))
sixteen = sorted(key(p) for p in points if p["cores"] == 16)
want = sorted([(16, "x10", 4, 16, 0.883, True), (32, "x10", 4, 16, 0.802, True), (16, "x20", 4, 16, 0.878, True),
               (16, "x10", 2, 16, 0.980, False), (32, "x10", 2, 16, 0.941, False)])
check(sixteen == want, "the 16-core file gives its 5 cluster points, as measured", sixteen)

# The runs with TCP's timeout scaled check the model and never calibrate it: the scaled rows the
# machine ran at most 61% busy, not the kernel's-timeout rows, each at its own scale's link.
scaled = sorted((p["n"], p["label"], p["value_bytes"], p["mbit"], p["ms"], p["measured"])
                for p in points if p["timers"] == "scaled")
want = sorted([(16, "x40", 4, 25.0, 7600, 0.890), (16, "x40", 4, 25.0, 7600, 0.892), (16, "x40", 2, 25.0, 7600, 0.976),
               (16, "x80", 4, 12.5, 15200, 0.890), (32, "x160", 4, 6.25, 30400, 0.799),
               (32, "x160", 2, 6.25, 30400, 0.941)])  # not the bfloat16 run 71% busy, nor async or ssp
check(scaled == want, "the scaled-timeout file gives its 6 sync points under the CPU rule, at their scales' links",
      scaled)
check(all(not p["calibration"] and pts.kind(p).startswith("TCP") for p in points if p["timers"] == "scaled"),
      "a scaled-timeout point is a check, not fitted")

# A file laid out otherwise: bfloat16 first, a note line inside a section, a row kept only in a
# comment, loopback last.
text = """# header
## x10, bfloat16 on the wire: the x10 command with --wire_dtype=bfloat16
compute,mode,workers,efficiency,machine_cpu_pct
emulated,sync,1,1.000,1
emulated,sync,8,0.900,30
## x20: bench/scaling --netns --rate=50mbit (the csv did not come back;
## these rows are from the printed table
# N=1:  8.4 samples/s  efficiency 1.000  pull wait 0.6 ms  machine 1%
# N=16: 118.3 samples/s efficiency 0.555  pull wait 524.5 ms machine 15%; worker 230.9 ms
## loopback: bench/scaling --compute_ms=1900 --workers=1,8
compute,mode,workers,efficiency,machine_cpu_pct
emulated,sync,8,0.999,9
"""
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, pts.SIXTEEN_CORES[0]), "w") as f:
        f.write(text)
    got = sorted(key(p) for p in pts.read_sixteen_cores(d))
want = sorted([(8, "x10", 2, 16, 0.900, False), (16, "x20", 4, 16, 0.555, True)])
check(got == want, "sections are found by their labels; a note does not end one; a comment row counts; "
      "loopback is skipped", got)

sizes, weights = m.emulated(2)
full, same = m.emulated(4)
check(sizes == [s // 2 for s in full] and weights == same == full, "bfloat16 halves the bytes and keeps the compute")

# Points the model itself made at alpha 0.43 (off the fit's first grid), bfloat16 ones among them
# at a link slow enough for half the bytes to matter: the fit finds 0.43.
made = [dict(n=n, mbit=mbit, ms=ms, value_bytes=vb, measured=m.model(n, m.emulated(vb), mbit, ms, 0.43, 5))
        for n, mbit, ms, vb in ((4, 100, 1900, 4), (8, 50, 3800, 4), (8, 50, 1900, 2), (4, 25, 1900, 2))]
alpha, rms = m.fit(made, 5)
check(abs(alpha - 0.43) <= 0.005 and rms < 0.002, f"the fit recovers alpha 0.43 from its own points, bfloat16 ones "
      f"among them (got {alpha:.3f}, rms {rms:.4f})")
print(f"All tests passed ({checks} assertions in {checks} test cases)")
