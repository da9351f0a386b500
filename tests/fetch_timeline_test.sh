#!/usr/bin/env bash
# bench/fetch_timeline.py on a real trace: bench/scaling runs sync jobs of 1
# and 2 workers on loopback (emulated compute of 1 s a step, --trace), and the
# script reads the one step of each that merge_traces keeps. Every worker has
# a row; a forward pass spans its compute at least; with one worker the whole
# layout (10.2 MB) of the next step is fetched during backward, with two some
# of it and never more (on loopback nothing holds a ready key back for long).
# A missing or broken trace, one with no worker, and one whose event lacks a
# field are refused with a one-line error.
# Prints a Catch2-style summary line.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
source "$runfiles/tests/checks.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
script=$runfiles/bench/fetch_timeline.py

SHARDPS_BIN=$runfiles "$runfiles/bench/scaling" --compute_ms=1000 --steps=4 --workers=1,2 --modes=sync --trace \
  --out="$work/runs" > "$work/scaling.txt" 2>&1 || fail "bench/scaling: $(tail -3 "$work/scaling.txt")"
for n in 1 2; do
  python3 "$script" "$work/runs/sync-n$n" > "$work/n$n.txt" 2>&1 || fail "fetch_timeline N = $n: $(cat "$work/n$n.txt")"
  cat "$work/n$n.txt"
  rows=$(awk '$1 ~ /^[0-9]+$/' "$work/n$n.txt" | wc -l)
  [ "$rows" = "$n" ] || fail "N = $n: $rows worker rows"
  awk '$1 ~ /^[0-9]+$/ && $2 < $3 {bad = 1} END {exit bad}' "$work/n$n.txt" \
    || fail "N = $n: a forward pass shorter than its compute"
done
pass "a row per worker, each forward pass at least its compute"
ahead1=$(awk '$1 == "mean" {print $5}' "$work/n1.txt")
awk -v a="$ahead1" 'BEGIN {exit !(a > 10 && a < 10.3)}' || fail "N = 1: $ahead1 MB fetched ahead, want the layout's 10.2"
pass "one worker fetches the whole next step (10.2 MB) during backward"
awk '$1 ~ /^[0-9]+$/ && ($5 < 1 || $5 > 10.3) {bad = 1} END {exit bad}' "$work/n2.txt" \
  || fail "N = 2: want 1 to 10.2 MB of the next step fetched ahead by each worker: $(cat "$work/n2.txt")"
pass "two workers fetch part of the next step during backward, never more than the layout"

python3 "$script" "$work/none" > "$work/missing.txt" 2>&1 && fail "a missing trace was read"
grep -q "^fetch_timeline: cannot read a trace" "$work/missing.txt" || fail "unclear error: $(cat "$work/missing.txt")"
mkdir -p "$work/broken" && echo '{"traceEvents": [' > "$work/broken/trace.json"
python3 "$script" "$work/broken" > "$work/broken.txt" 2>&1 && fail "a broken trace was read"
[ "$(wc -l < "$work/broken.txt")" = 1 ] && grep -q "^fetch_timeline: " "$work/broken.txt" \
  || fail "a broken trace gave no one-line error: $(cat "$work/broken.txt")"
mkdir -p "$work/empty" && echo '{"traceEvents": []}' > "$work/empty/trace.json"
python3 "$script" "$work/empty" > "$work/empty.txt" 2>&1 && fail "a trace with no worker was read"
grep -q "no worker" "$work/empty.txt" || fail "unclear error: $(cat "$work/empty.txt")"
mkdir -p "$work/fields" && echo '{"traceEvents": [{"name": "process_name", "pid": 1, "args": {"name": "worker 0"}},
  {"pid": 1, "ph": "X", "name": "forward 0"}]}' > "$work/fields/trace.json"
python3 "$script" "$work/fields" > "$work/fields.txt" 2>&1 && fail "a trace whose event lacks its time was read"
[ "$(wc -l < "$work/fields.txt")" = 1 ] && grep -q "^fetch_timeline: .* is not a bench/scaling trace" "$work/fields.txt" \
  || fail "an event without its time gave no one-line error: $(cat "$work/fields.txt")"
pass "a missing, a broken, an empty and a malformed trace are refused with a one-line error"
all_passed
