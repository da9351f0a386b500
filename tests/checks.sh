# Sourced by the shell tests: each check that holds calls pass, the first
# that does not calls fail (and the test ends); both print the Catch2-style
# summary lines that tools/test counts.
checks=0
fail() { echo "FAILED: $*"; echo "test cases: $((checks + 1)) | $checks passed | 1 failed"; exit 1; }
pass() { checks=$((checks + 1)); echo "ok: $*"; }
all_passed() { echo "All tests passed ($checks assertions in $checks test cases)"; }
