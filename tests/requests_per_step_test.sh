#!/usr/bin/env bash
# bench/requests_per_step.py on real traces: bench/scaling runs sync jobs of 1
# and 2 workers (emulated compute of 1 s a step, so that a step's pushes
# group alike from run to run; --trace; pushes not coalesced, so that each
# holds one server's keys of one call), and the script counts worker 0's
# requests per step. Awaits are one per tensor's pull at any N; pushes grow
# with N; a request's time in line is not a second request; a trace of
# fewer than two steps, or not JSON, is refused with a one-line error.
# Prints a Catch2-style summary line.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
source "$runfiles/tests/checks.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
script=$runfiles/bench/requests_per_step.py

SHARDPS_BIN=$runfiles "$runfiles/bench/scaling" --compute_ms=1000 --steps=3 --workers=1,2 --modes=sync --trace --coalesce_pushes=false \
  --out="$work/runs" > "$work/scaling.txt" 2>&1 || fail "bench/scaling: $(tail -3 "$work/scaling.txt")"
python3 "$script" "$work/runs" > "$work/counts.txt" 2>&1 || fail "requests_per_step: $(cat "$work/counts.txt")"
cat "$work/counts.txt"
read -r steps1 push1 fetch1 await1 < <(awk '$1 == "sync-n1" {print $2, $3, $4, $5}' "$work/counts.txt")
read -r steps2 push2 fetch2 await2 < <(awk '$1 == "sync-n2" {print $2, $3, $4, $5}' "$work/counts.txt")
[ -n "${await2:-}" ] || fail "no row for N = 1 or 2"
[ "$steps1" -ge 3 ] && [ "$push1" -gt 0 ] && [ "$fetch1" -gt 0 ] && [ "$await1" -gt 0 ] \
  || fail "N = 1: want 3 steps or more and requests of each kind"
pass "N = 1: $push1 pushes, $fetch1 fetches, $await1 awaits a step over $steps1 steps"
[ "$await1" = "$await2" ] || fail "awaits differ between N = 1 ($await1) and 2 ($await2) on one layout"
pass "awaits the same at N = 1 and 2"
[ "$push2" -gt "$push1" ] || fail "pushes do not grow from N = 1 ($push1) to 2 ($push2)"
pass "pushes grow with N: $push1 to $push2"

# A request that waited in line: its wait and its flight, one request.
mkdir -p "$work/queued/sync-n1"
for step in 0 1 2; do
  echo "{\"ph\": \"b\", \"cat\": \"push queue\", \"name\": \"push t0 to server 0\", \"args\": {\"step\": $step}},"
  echo "{\"ph\": \"b\", \"cat\": \"push\", \"name\": \"push t0 to server 0\", \"args\": {\"step\": $step}},"
done | { echo '{"traceEvents": ['; sed '$ s/,$//'; echo ']}'; } > "$work/queued/sync-n1/worker-0.trace.json"
python3 "$script" "$work/queued" > "$work/queued.txt" 2>&1 || fail "requests_per_step: $(cat "$work/queued.txt")"
[ "$(awk '$1 == "sync-n1" {print $3}' "$work/queued.txt")" = 1 ] \
  || fail "a request that waited in line counted twice: $(cat "$work/queued.txt")"
pass "a request that waited in line counts once"

# A trace of one step: nothing to take a median of after the first.
mkdir -p "$work/short/sync-n1"
echo '{"traceEvents": [{"ph": "b", "cat": "push", "name": "push t0 to server 0", "args": {"step": 0}}]}' \
  > "$work/short/sync-n1/worker-0.trace.json"
python3 "$script" "$work/short" > "$work/short.txt" 2>&1 && fail "a one-step trace was counted: $(cat "$work/short.txt")"
grep -q "fewer than two traced steps" "$work/short.txt" || fail "unclear refusal: $(cat "$work/short.txt")"
pass "a one-step trace is refused, naming why"
echo '{"traceEvents": [' > "$work/short/sync-n1/worker-0.trace.json"
python3 "$script" "$work/short" > "$work/broken.txt" 2>&1 && fail "a broken trace was counted"
grep -q "^requests_per_step: " "$work/broken.txt" || fail "a broken trace gave no clear error: $(cat "$work/broken.txt")"
pass "a trace that is not JSON is refused with a one-line error"
all_passed
