"""shardps.Client's row calls for several tables at once against real
ps_server processes: the rows come back where each table's own call would
put them, and a bad transfer refuses the whole call before any leaves."""
import ctypes
import unittest

import numpy as np

import support
import shardps
from shardps import _lib

TABLES = [shardps.Table("users", 3, init_scale=0.0, optimizer="sgd", lr=1.0),
          shardps.Table("items", 2, init_scale=0.0, optimizer="sgd", lr=1.0)]


class ManyRowsTest(unittest.TestCase):
    def setUp(self):
        self.servers = support.servers(2, "--num_workers=1", "--mode=sync", "--lr=0.5")
        config = "--servers=%s --rank=0 --num_workers=1 --mode=sync --server_timeout=20s" % ",".join(
            s.address for s in self.servers)
        self.client = shardps.Client(config, [("w", (4,))], TABLES)
        self.assertEqual(self.client.register(), 0)
        self.assertTrue(self.client.init({"w": np.zeros(4, np.float32)}))

    def tearDown(self):
        self.client.close()
        for s in self.servers:
            s.close()

    def test_several_tables_push_and_pull_in_one_call(self):
        users = np.array([7, -2, 7, 1 << 40], np.int64)  # a repeat, both servers
        items = np.array([3, 1], np.int64)
        out_u, out_i = np.full((4, 3), 9, np.float32), np.full((2, 2), 9, np.float32)
        self.client.pull_rows_many_async(0, [("users", users, out_u), (1, items, out_i)]).wait()
        np.testing.assert_array_equal(out_u, np.zeros((4, 3)))
        np.testing.assert_array_equal(out_i, np.zeros((2, 2)))
        grads_u = np.arange(12, dtype=np.float32).reshape(4, 3)
        grads_i = np.ones((0, 2), np.float32)  # no items touched: the step still completes
        self.client.push_rows_many_async(0, [(0, users, grads_u), (1, items[:0], grads_i)]).wait()
        self.client.pull_rows_many_async(1, [(0, users, out_u), (1, items, out_i)]).wait()
        seven = -(grads_u[0] + grads_u[2])  # sgd at lr 1, one worker: minus the summed gradient
        np.testing.assert_array_equal(out_u, np.stack([seven, -grads_u[1], seven, -grads_u[3]]))
        np.testing.assert_array_equal(out_i, np.zeros((2, 2)))
        single = np.zeros((4, 3), np.float32)
        self.client.pull_rows(1, 0, users, single)  # the same rows one table at a time
        np.testing.assert_array_equal(single, out_u)

    def test_a_bad_transfer_refuses_the_whole_call(self):
        ids = np.array([1, 2], np.int64)
        rows = np.zeros((2, 3), np.float32)
        handle = ctypes.c_void_p()
        tables = (ctypes.c_int * 2)(0, 7)
        ns = (ctypes.c_int64 * 2)(2, 2)
        ptrs = (ctypes.c_void_p * 2)(ids.ctypes.data, ids.ctypes.data)
        outs = (ctypes.c_void_p * 2)(rows.ctypes.data, rows.ctypes.data)
        rc = self.client._c("ShardpsPullRowsManyAsync", 0, 2, tables, ns, ptrs, outs, ctypes.byref(handle))
        self.assertEqual(rc, _lib.SHARDPS_ERROR)
        self.assertIn("transfer 1 of 2: table index 7 is not in the layout of 2 tables", _lib.last_error()[0])
        self.assertFalse(handle.value)
        with self.assertRaisesRegex(ValueError, r"want a C-contiguous float32 array of shape \(2, 2\)"):
            self.client.pull_rows_many_async(0, [(0, ids, rows), (1, ids, rows)])  # items have dim 2
        frozen = np.full((2, 3), 9, np.float32)
        frozen.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "the array is read-only"):
            self.client.pull_rows(0, 0, ids, frozen)  # would write through a read-only buffer
        np.testing.assert_array_equal(frozen, np.full((2, 3), 9))
        with self.assertRaisesRegex(KeyError, "no table named 'nope'"):
            self.client.push_rows_many_async(0, [("nope", ids, rows)])
        self.client.pull_rows_many_async(0, [(0, ids, rows)]).wait()  # still serving
        np.testing.assert_array_equal(rows, np.zeros((2, 3)))


if __name__ == "__main__":
    unittest.main()
