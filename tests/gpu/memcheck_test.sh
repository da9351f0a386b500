#!/usr/bin/env bash
# Runs the kernel tests under compute-sanitizer's memcheck: any out-of-bounds
# or misaligned access, or a leak, fails the test. Skipped (and says so) where
# there is no GPU or no compute-sanitizer.
set -uo pipefail
kernels_test="$1"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
# Where there is no GPU the test binary prints SKIPPED and exits 0. (Its exit
# status says nothing else here: Catch2 2.x's --list-test-names-only exits
# with the number of tests.)
if "$kernels_test" --list-test-names-only 2>&1 | grep -q '^SKIPPED'; then
  echo "SKIPPED (no GPU): memcheck: the kernel tests do not run here"
  exit 0
fi
if [ -z "$sanitizer" ]; then
  echo "SKIPPED (no compute-sanitizer): memcheck: install the CUDA toolkit's compute-sanitizer"
  exit 0
fi
exec "$sanitizer" --tool memcheck --leak-check full --error-exitcode 1 "$kernels_test"
