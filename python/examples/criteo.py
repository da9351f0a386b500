"""Reads click logs in the Criteo Kaggle/Terabyte TSV format (real ones, or
tools/criteo_synth.py's): label \\t I1..I13 \\t C1..C26 per line.

    labels, dense, sparse = criteo.read_tsv("train.tsv")

labels: float32 [B]; dense: float32 [B, 13], log(1 + max(I, 0)), empty -> 0;
sparse: int64 [B, 26], each categorical value hashed with its field into an
id that no other field's value shares, an empty field to its field's own
"missing" id. Parsing is vectorised over a whole block of lines with numpy:
no Python loop per line or per field. auc() and log_loss() score predictions.
"""
import gzip

import numpy as np
import torch

NUM_DENSE, NUM_CAT = 13, 26
NUM_FIELDS = 1 + NUM_DENSE + NUM_CAT
BLOCK = 8 << 20
VALUE_BITS = 56  # a value keeps its low 56 bits; the field takes the 8 above
VALUE_MASK = np.uint64((1 << VALUE_BITS) - 1)
MISSING = VALUE_MASK  # a real hex value never spans 14 digits of f
M1, M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
HEX_VALUE = np.full(256, 255, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    HEX_VALUE[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    HEX_VALUE[_c] = 10 + _i


def mix64(x):
    """splitmix64's finaliser. It is a bijection, so ids of distinct (field,
    value) keys are distinct, and it spreads them evenly for any modulus."""
    x = x ^ (x >> np.uint64(30))
    x = x * M1
    x = x ^ (x >> np.uint64(27))
    x = x * M2
    return x ^ (x >> np.uint64(31))


def categorical_ids(values, present):
    """int64 ids [n, 26] from hex values (uint64) and a mask of non-empty fields."""
    fields = (np.arange(1, NUM_CAT + 1, dtype=np.uint64) << np.uint64(VALUE_BITS))[None, :]
    keys = fields | np.where(present, values & VALUE_MASK, MISSING)
    return mix64(keys).view(np.int64)


def _gather(a, start, length, width):
    """Bytes [..., width] of each field from `start` (a strided window view, so
    the gather copies bytes, not an index per byte), and which are inside it."""
    windows = np.lib.stride_tricks.sliding_window_view(np.r_[a, np.zeros(width, np.uint8)], width)
    return windows[start], np.arange(width) < length[..., None]


def _parse_ints(a, begin, end):
    """Decimal integers (an optional '-') and which fields are non-empty."""
    length = end - begin
    neg = (length > 0) & (a[np.minimum(begin, len(a) - 1)] == ord("-"))
    begin = begin + neg
    length = end - begin
    width = int(length.max()) if length.size else 0
    if width > 18:
        raise ValueError("a dense field has more than 18 digits")
    chars, inside = _gather(a, begin, length, width)
    digits = np.where(inside, chars.astype(np.int64) - ord("0"), 0)
    if np.any((digits < 0) | (digits > 9)):
        raise ValueError("a dense field is not an integer")
    # Left-aligned digits read as a width-digit number, then the unused places dropped.
    scaled = digits @ 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    value = scaled // 10 ** (width - length)
    return np.where(neg, -value, value), length > 0


def _parse_hex(a, begin, end):
    """Hex values (uint64; past 16 digits only the last 16 count) and which
    fields are non-empty."""
    length = end - begin
    begin = begin + np.maximum(length - 16, 0)
    length = np.minimum(length, 16)
    width = int(length.max()) if length.size else 0
    chars, inside = _gather(a, begin, length, width)
    digits = HEX_VALUE[chars]
    if np.any(inside & (digits == 255)):
        raise ValueError("a categorical field is not hexadecimal")
    # Nibbles packed left-aligned into 8 bytes read as one big-endian word,
    # then shifted right past the unused places: no loop over the digits.
    nibbles = np.zeros(length.shape + (16,), np.uint8)
    nibbles[..., :width] = np.where(inside, digits, 0)
    word = np.ascontiguousarray((nibbles[..., 0::2] << 4) | nibbles[..., 1::2])
    value = word.view(">u8")[..., 0].astype(np.uint64)
    return value >> (4 * (16 - length)).astype(np.uint64), length > 0


def _field_bounds(a):
    """[n, 40] begin and end offsets of every field of every line in `a`."""
    seps = np.flatnonzero((a == 9) | (a == 10))
    newline = a[seps] == 10
    n = int(newline.sum())
    if len(seps) != NUM_FIELDS * n or not newline[NUM_FIELDS - 1::NUM_FIELDS].all():
        ends = np.flatnonzero(newline)
        count = np.diff(np.r_[-1, ends]) if n else np.array([len(seps) + 1])
        bad = int(np.flatnonzero(count != NUM_FIELDS)[0]) if np.any(count != NUM_FIELDS) else n
        raise ValueError("line %d of the block has %d fields, not %d"
                         % (bad + 1, int(count[min(bad, len(count) - 1)]), NUM_FIELDS))
    end = seps.reshape(n, NUM_FIELDS)
    begin = np.empty_like(end)
    begin[:, 1:] = end[:, :-1] + 1
    begin[:, 0] = np.r_[0, end[:-1, -1] + 1]
    last = end[:, -1]
    end[:, -1] -= (last > begin[:, -1]) & (a[np.maximum(last - 1, 0)] == 13)  # CRLF files
    return begin, end


def parse(data):
    """numpy (labels [n], dense [n, 13], sparse [n, 26]) of complete lines."""
    a = np.frombuffer(data, np.uint8)
    begin, end = _field_bounds(a)
    labels, has_label = _parse_ints(a, begin[:, 0], end[:, 0])
    if not has_label.all():
        raise ValueError("a line has no label")
    counts, present = _parse_ints(a, begin[:, 1:1 + NUM_DENSE], end[:, 1:1 + NUM_DENSE])
    dense = np.where(present, np.log1p(np.maximum(counts, 0).astype(np.float64)), 0.0)
    values, present = _parse_hex(a, begin[:, 1 + NUM_DENSE:], end[:, 1 + NUM_DENSE:])
    with np.errstate(over="ignore"):
        sparse = categorical_ids(values, present)
    return labels.astype(np.float32), dense.astype(np.float32), sparse


def _blocks(path):
    """Blocks of whole lines; a last line without its newline gets one."""
    opener = gzip.open if path.endswith(".gz") else open
    carry = b""
    with opener(path, "rb") as f:
        while True:
            chunk = f.read(BLOCK)
            if not chunk:
                break
            chunk = carry + chunk
            cut = chunk.rfind(b"\n") + 1
            carry = chunk[cut:]
            if cut:
                yield chunk[:cut]
    if carry.strip():
        yield carry + b"\n"


def read_tsv(path, limit=None):
    """(labels float32 [B], dense float32 [B, 13], sparse int64 [B, 26]) torch
    tensors of the file's first `limit` lines (all when None)."""
    parts, rows = [], 0
    for block in _blocks(path):
        part = parse(block)
        if limit is not None and rows + len(part[0]) >= limit:
            parts.append(tuple(x[:limit - rows] for x in part))
            break
        parts.append(part)
        rows += len(part[0])
    if not parts:
        return torch.zeros(0), torch.zeros(0, NUM_DENSE), torch.zeros(0, NUM_CAT, dtype=torch.int64)
    return tuple(torch.from_numpy(np.ascontiguousarray(np.concatenate(x))) for x in zip(*parts))


def _numpy(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, np.float64)


def auc(labels, scores):
    """Area under the ROC curve by the rank-sum formula; tied scores share their
    mean rank. nan when only one class is present."""
    y, s = _numpy(labels).ravel() > 0.5, _numpy(scores).ravel()
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    first = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    after = np.r_[first[1:], len(s)]
    ranks = np.empty(len(s))
    ranks[order] = np.repeat((first + after + 1) / 2.0, after - first)
    pos = int(y.sum())
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((ranks[y].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def log_loss(labels, probs, eps=1e-7):
    """Mean binary cross-entropy of probabilities (clipped to [eps, 1 - eps])."""
    y, p = _numpy(labels).ravel(), np.clip(_numpy(probs).ravel(), eps, 1 - eps)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))
