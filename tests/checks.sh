# Sourced by the shell tests: each check that holds calls pass, the first
# that does not calls fail (and the test ends); both print the Catch2-style
# summary lines that tools/test counts. A test may define on_fail to clean
# up before a failure ends it.
checks=0
fail() { echo "FAILED: $*"; ! declare -F on_fail > /dev/null || on_fail; echo "test cases: $((checks + 1)) | $checks passed | 1 failed"; exit 1; }
pass() { checks=$((checks + 1)); echo "ok: $*"; }
all_passed() { echo "All tests passed ($checks assertions in $checks test cases)"; }
