#!/usr/bin/env bash
# The Python package's tests (python/tests) against real ps_server
# processes, with Debian's python3 (python3-numpy, python3-torch: tools/setup).
# Prints the Catch2-style summary line tools/test counts.
set -uo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/shardps
export SHARDPS_BIN=$runfiles
python=/usr/bin/python3
if ! "$python" -c 'import numpy, torch' 2>/dev/null; then
  echo "python_test: $python lacks numpy or torch; run tools/setup (python3-numpy, python3-torch)"
  echo "test cases: 1 | 0 passed | 1 failed"
  exit 1
fi
exec "$python" "$runfiles/python/tests/run_all.py"
