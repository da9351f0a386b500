#!/usr/bin/env bash
# tools/fuzz_wire, the longer fuzz campaign: two short seeds pass and each
# prints the requests it sent; a test binary that fails stops the campaign
# with the seed and the command that repeats it; a flag it does not know is
# refused. Prints a Catch2-style summary line.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
source "$runfiles/tests/checks.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tool=$runfiles/tools/fuzz_wire
bin=$runfiles/tests/wire_fuzz_test

"$tool" --seeds=2 --first=7 --rounds=3 --bin="$bin" > "$work/out.txt" 2>&1 || fail "two seeds: $(tail -5 "$work/out.txt")"
grep -q "^seed 7: 84 requests, .* passed$" "$work/out.txt" || fail "no line for seed 7 (3 rounds x 14 methods x 2 modes): $(cat "$work/out.txt")"
grep -q "^seed 8: 84 requests" "$work/out.txt" || fail "no line for seed 8: $(cat "$work/out.txt")"
grep -q "2 seeds passed (3 rounds" "$work/out.txt" || fail "no summary: $(cat "$work/out.txt")"
pass "two seeds of 84 requests each, and the summary"

printf '#!/bin/sh\necho "FAILED: on purpose"\nexit 1\n' > "$work/failing" && chmod +x "$work/failing"
if "$tool" --seeds=3 --first=5 --rounds=3 --bin="$work/failing" > "$work/fail.txt" 2>&1; then
  fail "a failing test binary passed the campaign"
fi
grep -q "seed 5 failed" "$work/fail.txt" || fail "the failing seed is not named: $(cat "$work/fail.txt")"
grep -q "SHARDPS_FUZZ_SEED=5 SHARDPS_FUZZ_ROUNDS=3 " "$work/fail.txt" || fail "no command to repeat it: $(cat "$work/fail.txt")"
! grep -q "seed 6" "$work/fail.txt" || fail "the campaign went on past the failure"
pass "a failing seed stops the campaign and is named, with the command that repeats it"

"$tool" --sedes=2 > "$work/bad.txt" 2>&1 && fail "an unknown flag was taken"
grep -q "unknown argument --sedes=2" "$work/bad.txt" || fail "unknown flag: $(cat "$work/bad.txt")"
pass "an unknown flag is refused, named"
all_passed
