#!/usr/bin/env python3
"""Runs the Python tests (test_*.py here) and prints a Catch2-style summary
line, which tools/test counts: "All tests passed (N assertions in M test
cases)" or "test cases: M | P passed | F failed"."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
suite = unittest.defaultTestLoader.discover(here, pattern=sys.argv[1] if len(sys.argv) > 1 else "test_*.py")
result = unittest.TextTestRunner(verbosity=2).run(suite)
failed = len(result.failures) + len(result.errors)
ran = result.testsRun
if failed == 0 and ran > 0:
    print("All tests passed (%d assertions in %d test cases)" % (ran, ran))
else:
    print("test cases: %d | %d passed | %d failed" % (ran, ran - failed, max(failed, 1)))
sys.exit(0 if failed == 0 and ran > 0 else 1)
