#!/usr/bin/env bash
# The docs' checks (docs/BUILD.bazel): the flag tables are what the programs'
# help says (tools/flag_tables --check, against the binaries built for this
# test), and every relative link and bench/results path of README.md and
# docs/*.md exists in the source tree (tools/check_links). Both run; each is
# one test case of the Catch2-style summary line that tools/test counts.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
# The pages in the runfiles are links into the source tree; the link check
# needs that tree (README.md, and the files the pages link to, are not data).
source_tree=$(dirname "$(dirname "$(readlink -f "$runfiles/docs/running.md")")")
[ -f "$source_tree/README.md" ] && [ -d "$source_tree/bench/results" ] ||
  { echo "FAILED: no source tree at $source_tree"; echo "test cases: 1 | 0 passed | 1 failed"; exit 1; }
passed=0 failed=0
check() {  # check NAME COMMAND...: runs it, prints its output and ok/FAILED
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then
    passed=$((passed + 1))
    echo "$out"
    echo "ok: $name"
  else
    failed=$((failed + 1))
    echo "$out"
    echo "FAILED: $name"
  fi
}

check "every flag table is what the programs' help says" \
  python3 "$runfiles/tools/flag_tables" --check --root="$runfiles" --bin="$runfiles"
check "every relative link and bench/results path of the pages exists (in $source_tree)" \
  python3 "$runfiles/tools/check_links" --root="$source_tree"

# The checker itself, on a tree of one page: a result path that is gone is
# broken, and the same path cited from git history ("git show COMMIT:...") is not.
checker_sees() {  # checker_sees WANT_RC LINE
  local tree
  tree=$(mktemp -d) && mkdir -p "$tree/docs" "$tree/bench/results" && touch "$tree/bench/results/kept.txt" &&
    printf '# Page\n\n%s\n' "$2" >"$tree/docs/page.md" && printf '# Readme\n' >"$tree/README.md"
  python3 "$runfiles/tools/check_links" --root="$tree"
  local rc=$?
  rm -rf "$tree"
  [ "$rc" -eq "$1" ]
}
check "the link check flags a result file that is not in the tree" \
  checker_sees 1 'see bench/results/gone.txt and bench/results/kept.txt'
check "the link check passes a result file cited from git history" \
  checker_sees 0 'see `git show 14e9266:bench/results/gone.txt` and bench/results/kept.txt'

if [ $failed -eq 0 ]; then
  echo "All tests passed ($passed assertions in $passed test cases)"
else
  echo "test cases: $((passed + failed)) | $passed passed | $failed failed"
  exit 1
fi
