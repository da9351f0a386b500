#!/usr/bin/env bash
# bench/push_pull_bench --replicas on real servers: a plain job and a job
# with --replicas=2 side by side, in sync with 2 clients (each round a step:
# both clients' pushes summed, then the step's version pulled from both
# servers) and in async with 1 client. Each prints its table, the
# replicated/plain ratio per size and the servers' CPU; a mode the rounds
# cannot follow (ssp) or does not know is refused with exit 2 and a message.
# Prints a Catch2-style summary line.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
source "$runfiles/tests/checks.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bench=$runfiles/bench/push_pull_bench
export SHARDPS_BIN=$runfiles
small=(--servers=2 --replicas --sizes_mb=1,2 --repeats=4 --warmup=1 --block=2)

# The ratio column of size $2 MB in the comparison table of file $1.
ratio() { awk -v size="$2" '/^--compare_servers/ {table = 1} table && $1 == size && NF == 4 {print $4}' "$1"; }

for run in "sync 2" "async 1"; do
  read -r mode clients <<< "$run"
  out=$work/$mode.txt
  timeout 300 "$bench" "${small[@]}" --mode="$mode" --clients="$clients" > "$out" 2>&1 \
    || fail "$mode, $clients clients: exit $?: $(tail -3 "$out")"
  for size in 1 2; do
    r=$(ratio "$out" "$size")
    awk -v r="${r:-0}" 'BEGIN { exit !(r > 0) }' || fail "$mode: no replicated/plain ratio for $size MB: $(cat "$out")"
  done
  grep -q "^servers' CPU-seconds over the run: plain [0-9.]*, replicated [0-9.]*" "$out" \
    || fail "$mode: no servers' CPU line: $(tail -3 "$out")"
  pass "$mode, $clients clients: ratios $(ratio "$out" 1) and $(ratio "$out" 2) at 1 and 2 MB; $(tail -1 "$out")"
done

# Fused rounds (one PushThenPull each): a row of GB/s for the size.
out=$work/fused.txt
timeout 300 "$bench" --sizes_mb=1 --repeats=3 --warmup=1 --pull_with_push --socket_baseline=false --tcp_baseline_mb=0 \
  > "$out" 2>&1 || fail "--pull_with_push: exit $?: $(tail -3 "$out")"
awk '$1 == 1 && NF >= 6 && $6 > 0 {found = 1} END {exit !found}' "$out" || fail "--pull_with_push: no GB/s row: $(cat "$out")"
pass "--pull_with_push: $(awk '$1 == 1 {print $6 " GB/s at 1 MB"}' "$out")"
"$runfiles/bench/push_pull" --servers=127.0.0.1:1 --mode=sync --pull_with_push > "$work/refused.txt" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q -- "--pull_with_push" "$work/refused.txt" \
  || fail "--pull_with_push in sync: exit $rc, want 2 naming the flag: $(cat "$work/refused.txt")"
pass "--pull_with_push in sync refused: $(head -1 "$work/refused.txt")"

# Refused before any server starts: by the script, and by push_pull itself.
for cmd in "$bench --mode=ssp" "$bench --mode=bogus" "$runfiles/bench/push_pull --servers=127.0.0.1:1 --mode=ssp"; do
  $cmd > "$work/refused.txt" 2>&1
  rc=$?
  [ "$rc" = 2 ] || fail "${cmd#"$runfiles/"}: exit $rc, want 2: $(tail -3 "$work/refused.txt")"
  grep -q -- "--mode" "$work/refused.txt" || fail "${cmd#"$runfiles/"}: the message does not name --mode: $(cat "$work/refused.txt")"
  pass "${cmd#"$runfiles/"} refused: $(head -1 "$work/refused.txt")"
done
all_passed
