#!/usr/bin/python3
"""Synthetic click logs in the Criteo Kaggle/Terabyte TSV format:

    label \\t I1 .. I13 \\t C1 .. C26

label is 0 or 1, I1..I13 are non-negative integers (some empty), C1..C26 are
8-hex-digit lowercase strings (some empty). Categorical values are drawn from
Zipf laws over vocabularies of Criteo-like sizes (a few values up to
--max_vocab, which the largest field reaches); a value's string is a hash of
(field, rank), so it is the same in every file. Labels are Bernoulli draws
from a hidden logistic teacher: per-(field, value) weights, a function of
log(1 + I_k), and a few factorised pairwise interactions, its bias set so that
the click rate is about --ctr. The teacher's AUC and log loss on the test rows
(on the training rows when there are none) are printed to stderr at the end:
the ceiling for any model trained on this data.

    tools/criteo_synth.py --rows=1000000 --test_rows=100000 --out=/tmp/train.tsv

The vocabularies and the teacher depend on --max_vocab, --zipf and
--world_seed only, not on --seed: files made with different seeds are
independent draws from one world (a test file can be made separately).
Uses numpy only.
"""
import argparse
import math
import sys
import time

import numpy as np

NUM_DENSE, NUM_CAT = 13, 26
CHUNK = 1 << 16
# Vocabulary sizes: an int is a fixed size (capped by --max_vocab), a float a
# fraction of --max_vocab. The spread follows Criteo's: tiny fields, 10^3-10^5
# fields, and five very large ones.
VOCAB = [1400, 560, 1.0, 0.22, 300, 24, 12000, 600, 3, 90000, 5600, 0.85, 3200,
         27, 15000, 0.55, 10, 5600, 2200, 4, 0.7, 18, 15, 0.03, 100, 0.014]
CAT_MISSING = [0.0, 0.0, 0.03, 0.03, 0.0, 0.12, 0.0, 0.0, 0.0, 0.0, 0.0, 0.03, 0.0,
               0.0, 0.0, 0.03, 0.0, 0.0, 0.44, 0.44, 0.03, 0.76, 0.0, 0.03, 0.44, 0.44]
DENSE_MISSING = [0.45, 0.0, 0.21, 0.22, 0.03, 0.23, 0.04, 0.0, 0.04, 0.45, 0.04, 0.77, 0.22]
# mu and sigma of the normal whose exp(), floored, minus one is I_k: mostly
# small counts with long tails, a few fields with large values (I5-like).
DENSE_MU = [0.8, 1.5, 2.0, 1.6, 7.5, 3.5, 1.8, 2.5, 3.8, 0.6, 1.2, 0.5, 1.5]
DENSE_SIGMA = [1.0, 1.4, 1.3, 1.0, 2.0, 1.6, 1.4, 0.9, 1.3, 0.6, 0.9, 1.1, 1.2]
# Factorised interactions between categorical fields (0-based), which a
# DLRM's dot products can represent, and dense x categorical crosses.
CAT_PAIRS = [(5, 13), (8, 16), (19, 22), (1, 7), (4, 24), (0, 10)]
DENSE_CROSS = [(1, 5), (6, 13), (10, 24)]
LATENT = 4
M1, M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix64(x):
    """A bijective 64-bit finaliser (splitmix64's): distinct keys stay distinct."""
    x = x ^ (x >> np.uint64(30))
    x = x * M1
    x = x ^ (x >> np.uint64(27))
    x = x * M2
    return x ^ (x >> np.uint64(31))


def unit(h):
    """Uniform in (0, 1) from a hash's top 53 bits."""
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / (1 << 53))


class ZipfSampler:
    """Ranks 1..n with P(r) ~ r^-s: the head's CDF exactly, the tail by the
    inverse of the continuous law, so a 10^7 vocabulary costs no 10^7 table."""

    def __init__(self, n, s, head=1 << 16):
        self.n, self.s, self.k = n, s, min(n, head)
        self.cdf = np.cumsum(np.arange(1, self.k + 1, dtype=np.float64) ** -s)
        self.head_mass = self.cdf[-1]
        self.tail_mass = self._integral(self.k + 0.5, n + 0.5) if n > self.k else 0.0

    def _integral(self, a, b):
        if abs(self.s - 1.0) < 1e-9:
            return math.log(b / a)
        return (b ** (1 - self.s) - a ** (1 - self.s)) / (1 - self.s)

    def sample(self, rng, size):
        u = rng.random(size) * (self.head_mass + self.tail_mass)
        ranks = np.searchsorted(self.cdf, np.minimum(u, self.head_mass), side="right") + 1
        tail = u >= self.head_mass
        if tail.any():
            t, a = u[tail] - self.head_mass, self.k + 0.5
            if abs(self.s - 1.0) < 1e-9:
                x = a * np.exp(t)
            else:
                x = (a ** (1 - self.s) + t * (1 - self.s)) ** (1 / (1 - self.s))
            ranks[tail] = np.clip(np.floor(x + 0.5), self.k + 1, self.n)
        return np.minimum(ranks, self.n).astype(np.int64)


class World:
    """The vocabularies, the strings of their values and the teacher."""

    def __init__(self, max_vocab, zipf, world_seed, ctr):
        rs = np.random.default_rng([world_seed, 7])
        self.vocab = [max(2, int(v * max_vocab)) if isinstance(v, float) else min(v, max_vocab) for v in VOCAB]
        lo, hi = zipf
        self.exponent = lo + (hi - lo) * rs.random(NUM_CAT)
        self.samplers = [ZipfSampler(n, s) for n, s in zip(self.vocab, self.exponent)]
        self.field_key = rs.integers(0, 1 << 63, NUM_CAT, dtype=np.uint64)
        self.field_scale = rs.uniform(0.1, 0.35, NUM_CAT)
        self.dense_weight = rs.normal(0.0, 0.35, NUM_DENSE)
        self.dense_missing = rs.normal(0.0, 0.25, NUM_DENSE)
        self.pair_gain = rs.uniform(0.15, 0.3, len(CAT_PAIRS))
        self.cross_gain = rs.normal(0.0, 0.3, len(DENSE_CROSS))
        self.bias = 0.0
        self.bias = self._calibrate(rs, ctr)

    def hash(self, field, ranks, salt):
        key = self.field_key[field] ^ np.uint64((salt * 0x9E3779B97F4A7C15) & ((1 << 64) - 1))
        return mix64(ranks.astype(np.uint64) ^ key)

    def normal(self, field, ranks, salt):
        u1, u2 = unit(self.hash(field, ranks, salt)), unit(self.hash(field, ranks, salt + 1))
        return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)

    def sample(self, rng, n):
        """dense [n, 13] (-1: empty) and ranks [n, 26] (0: empty)."""
        shared = rng.standard_normal(n)  # a row's "activity", so that the counts correlate
        z = 0.5 * shared[:, None] + 0.866 * rng.standard_normal((n, NUM_DENSE))
        dense = np.floor(np.exp(np.minimum(DENSE_MU + DENSE_SIGMA * z, 22.0))) - 1
        dense = np.maximum(dense, 0).astype(np.int64)
        dense[rng.random((n, NUM_DENSE)) < DENSE_MISSING] = -1
        ranks = np.empty((n, NUM_CAT), np.int64)
        for f, sampler in enumerate(self.samplers):
            ranks[:, f] = sampler.sample(rng, n)
        ranks[rng.random((n, NUM_CAT)) < CAT_MISSING] = 0
        return dense, ranks

    def logit(self, dense, ranks):
        # Frequent values carry heavier weights: the tail is seen too rarely to be learnt.
        amp = lambda r: 0.35 + 1.0 / (1.0 + 0.6 * np.log(np.maximum(r, 1)))
        out = np.full(len(dense), self.bias)
        for f in range(NUM_CAT):
            out += self.field_scale[f] * amp(ranks[:, f]) * self.normal(f, ranks[:, f], 1)
        shape = np.tanh((np.log1p(np.maximum(dense, 0)) - DENSE_MU) / DENSE_SIGMA)
        out += np.where(dense < 0, self.dense_missing, self.dense_weight * shape).sum(1)
        for gain, (f, g) in zip(self.pair_gain, CAT_PAIRS):
            dot = sum(self.normal(f, ranks[:, f], 10 + 2 * j) * self.normal(g, ranks[:, g], 30 + 2 * j)
                      for j in range(LATENT))
            out += gain / math.sqrt(LATENT) * amp(ranks[:, f]) * amp(ranks[:, g]) * dot
        for gain, (k, f) in zip(self.cross_gain, DENSE_CROSS):
            out += gain * np.where(dense[:, k] < 0, 0.0, shape[:, k]) * self.normal(f, ranks[:, f], 50)
        return out

    def _calibrate(self, rng, ctr):
        """The bias for which a pilot sample's mean click probability is `ctr`."""
        raw = self.logit(*self.sample(rng, 50000))
        lo, hi = -20.0, 20.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if np.mean(1.0 / (1.0 + np.exp(-(raw + mid)))) < ctr:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def hex_ids(self, ranks):
        return np.stack([self.hash(f, ranks[:, f], 0) & np.uint64(0xFFFFFFFF) for f in range(NUM_CAT)], 1)


DIGITS = 10  # counts are clipped below 10^10
HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def format_rows(labels, dense, ranks, hexes):
    """TSV bytes, built as a fixed-width byte matrix whose padding (zero bytes)
    is then dropped: no Python loop per row or field."""
    n = len(labels)
    dense = np.minimum(dense, 10 ** DIGITS - 1)
    width = 1 + NUM_DENSE * (1 + DIGITS) + NUM_CAT * 9 + 1
    m = np.zeros((n, width), np.uint8)
    m[:, 0] = 48 + labels
    powers = 10 ** np.arange(DIGITS - 1, -1, -1, dtype=np.int64)
    digits = (dense[:, :, None] // powers) % 10
    keep = (dense[:, :, None] >= powers) | (powers == 1)  # no leading zeros, but "0" stays
    keep &= dense[:, :, None] >= 0
    block = np.zeros((n, NUM_DENSE, 1 + DIGITS), np.uint8)
    block[:, :, 0] = 9
    block[:, :, 1:] = np.where(keep, 48 + digits, 0)
    m[:, 1:1 + NUM_DENSE * (1 + DIGITS)] = block.reshape(n, -1)
    shifts = np.arange(28, -1, -4, dtype=np.uint64)
    nibbles = ((hexes[:, :, None] >> shifts) & np.uint64(15)).astype(np.intp)
    cat = np.zeros((n, NUM_CAT, 9), np.uint8)
    cat[:, :, 0] = 9
    cat[:, :, 1:] = np.where((ranks > 0)[:, :, None], HEX[nibbles], 0)
    m[:, 1 + NUM_DENSE * (1 + DIGITS):-1] = cat.reshape(n, -1)
    m[:, -1] = 10
    return m[m != 0].tobytes()


def generate(world, rng, rows, out, keep_probs=False):
    """Writes `rows` rows to the binary stream `out`; returns (labels,
    probabilities) when keep_probs, for the teacher's scores."""
    labels_all, probs_all = [], []
    for start in range(0, rows, CHUNK):
        n = min(CHUNK, rows - start)
        dense, ranks = world.sample(rng, n)
        p = 1.0 / (1.0 + np.exp(-world.logit(dense, ranks)))
        labels = (rng.random(n) < p).astype(np.uint8)
        out.write(format_rows(labels, dense, ranks, world.hex_ids(ranks)))
        if keep_probs:
            labels_all.append(labels)
            probs_all.append(p)
    if not keep_probs:
        return None
    return np.concatenate(labels_all or [np.zeros(0, np.uint8)]), np.concatenate(probs_all or [np.zeros(0)])


def auc(labels, scores):
    """Mann-Whitney AUC; tied scores share their mean rank."""
    labels, scores = np.asarray(labels).astype(bool), np.asarray(scores, np.float64)
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    ranks = np.empty(len(s))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    pos = labels.sum()
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((ranks[labels].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def log_loss(labels, probs, eps=1e-7):
    p = np.clip(np.asarray(probs, np.float64), eps, 1 - eps)
    y = np.asarray(labels, np.float64)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def open_out(path):
    return sys.stdout.buffer if path == "-" else open(path, "wb")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100000, help="training rows")
    ap.add_argument("--out", default="-", help="training file, '-' for stdout")
    ap.add_argument("--test_rows", type=int, default=0, help="rows of a test file from the same world")
    ap.add_argument("--test_out", default=None, help="test file (default: <out>.test)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the draws")
    ap.add_argument("--world_seed", type=int, default=0, help="seed of the vocabularies and the teacher")
    ap.add_argument("--max_vocab", type=int, default=10 ** 7, help="the largest field's vocabulary")
    ap.add_argument("--zipf", default="1.05,1.2", help="Zipf exponent, or LO,HI: spread over the fields")
    ap.add_argument("--ctr", type=float, default=0.25, help="target click rate")
    args = ap.parse_args(argv)
    parts = [float(x) for x in args.zipf.split(",")]
    args.zipf = (parts[0], parts[-1])
    if args.test_rows > 0 and args.test_out is None:
        if args.out == "-":
            ap.error("--test_rows with --out=- needs --test_out")
        args.test_out = args.out + ".test"
    if args.max_vocab < 2 or min(args.zipf) <= 0:
        ap.error("--max_vocab must be >= 2 and --zipf > 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    begin = time.perf_counter()
    with np.errstate(over="ignore"):  # uint64 products wrap on purpose in mix64
        world = World(args.max_vocab, args.zipf, args.world_seed, args.ctr)
        out = open_out(args.out)
        kept = generate(world, np.random.default_rng([args.seed, 1]), args.rows, out, args.test_rows == 0)
        if out is not sys.stdout.buffer:
            out.close()
        if args.test_rows > 0:
            with open_out(args.test_out) as out:
                kept = generate(world, np.random.default_rng([args.seed, 2]), args.test_rows, out, True)
    labels, probs = kept
    which = "test" if args.test_rows > 0 else "train"
    print("criteo_synth: %d train + %d test rows in %.1f s; vocabularies %s; click rate %.4f"
          % (args.rows, args.test_rows, time.perf_counter() - begin, ",".join(map(str, world.vocab)),
             float(np.mean(labels)) if len(labels) else float("nan")), file=sys.stderr)
    print("teacher: %s AUC %.4f log loss %.4f (%d rows)" % (which, auc(labels, probs), log_loss(labels, probs),
                                                            len(labels)), file=sys.stderr)


if __name__ == "__main__":
    main()
