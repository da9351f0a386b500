#!/usr/bin/env bash
# bench/instructions_per_step.py on real runs: bench/scaling runs a sync job
# of 1 server and 1 worker twice (1 and 3 steps of 1 s) with both under
# callgrind, and the script prints instructions per step for each (the
# difference of the two runs) and the functions behind them. Bad --steps and
# a profile that is not callgrind's are refused with a one-line error.
# Prints a Catch2-style summary line.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
source "$runfiles/tests/checks.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
script=$runfiles/bench/instructions_per_step.py
command -v valgrind > /dev/null || fail "valgrind is not installed (tools/setup installs it)"

SHARDPS_BIN=$runfiles python3 "$script" --workers=1 --steps=1,3 --compute_ms=1000 --top=3 --out="$work/run" \
  > "$work/out.txt" 2>&1 || fail "instructions_per_step: $(tail -5 "$work/out.txt")"
cat "$work/out.txt"
read -r n worker wratio server sratio < <(awk '$1 == "1" && NF == 5' "$work/out.txt")
[ "${n:-}" = 1 ] || fail "no row for N = 1"
awk -v w="$worker" -v s="$server" 'BEGIN {exit !(w > 0.01 && s > 0.01)}' \
  || fail "want instructions a step from both the worker and the server: $worker and $server million"
[ "$wratio" = 1.00 ] && [ "$sratio" = 1.00 ] || fail "the first N is not its own baseline: $wratio, $sratio"
pass "N = 1: worker $worker, server $server million instructions a step"
[ "$(grep -c '^1,' "$work/run/instructions.csv")" = 1 ] || fail "instructions.csv has no row for N = 1"
grep -q "server: functions with the most instructions per step at N = 1" "$work/out.txt" || fail "no functions listed"
grep -A3 "server: functions" "$work/out.txt" | grep -q "shardps::\|grpc\|malloc\|mem" \
  || fail "the server's functions are not named: $(grep -A3 'server: functions' "$work/out.txt")"
pass "a table, a CSV row and the functions behind the counts"

python3 "$script" --steps=3,1 > "$work/bad.txt" 2>&1 && fail "--steps=3,1 was taken"
grep -q "^instructions_per_step: --steps is SHORT,LONG" "$work/bad.txt" || fail "unclear refusal: $(cat "$work/bad.txt")"
python3 "$script" --workers=two > "$work/bad.txt" 2>&1 && fail "--workers=two was taken"
grep -q "^instructions_per_step: --workers and --steps are comma-separated" "$work/bad.txt" \
  || fail "unclear refusal: $(cat "$work/bad.txt")"
pass "bad --steps and --workers are refused, naming why"

printf 'not a profile\n' > "$work/cg.1"
python3 -c "import sys; sys.path.insert(0, '$runfiles/bench'); import instructions_per_step as m
try:
    m.read_profile('$work/cg.1', lambda p: '')
except m.Failure as e:
    print(e); sys.exit(0)
sys.exit(1)" > "$work/broken.txt" 2>&1 || fail "a file that is not a profile was read"
grep -q "is not a complete callgrind profile" "$work/broken.txt" || fail "unclear refusal: $(cat "$work/broken.txt")"
pass "a file that is not a callgrind profile is refused"
all_passed
