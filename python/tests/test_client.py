"""shardps.Client against real ps_server processes: round trips of every
dtype and shape, async calls, and bad input that gets a clear exception while
the server keeps serving."""
import unittest

import numpy as np

import support
import shardps

try:
    import torch
except ImportError:
    torch = None

LAYOUT = [("scalar", ()), ("vector", (5,)), ("matrix", (3, 4)), ("conv", (2, 3, 3, 3))]
LR = 0.5


def config(servers, extra=""):
    return "--servers=%s --rank=0 --num_workers=1 --mode=sync --partition_bytes=16 --server_timeout=20s %s" % (
        ",".join(s.address for s in servers), extra)


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.servers = support.servers(2, "--num_workers=1", "--mode=sync", "--lr=%g" % LR, "--partition_bytes=16")
        self.client = shardps.Client(config(self.servers), LAYOUT)
        self.assertEqual(self.client.register(), 0)
        self.init = {n: np.arange(int(np.prod(s)), dtype=np.float32).reshape(s) for n, s in LAYOUT}
        self.assertTrue(self.client.init(self.init))

    def tearDown(self):
        self.client.close()
        for s in self.servers:
            s.close()

    def expected(self, name, steps, grad=2.0):
        return self.init[name] - steps * LR * grad

    def test_numpy_round_trip_in_every_float_dtype_and_shape(self):
        step = 0
        for dtype in (np.float32, np.float64, np.float16):
            grads = {n: np.full(s, 2.0, dtype=dtype) for n, s in LAYOUT}
            self.client.push(step, grads)
            out = {n: np.zeros(s, dtype=dtype) for n, s in LAYOUT}
            self.client.pull(step + 1, out)
            step += 1
            for n, _ in LAYOUT:
                np.testing.assert_array_equal(out[n], self.expected(n, step).astype(dtype), err_msg="%s %s" % (n, dtype))

    def test_non_contiguous_arrays_are_converted_and_pulled_back(self):
        grads = {n: np.full(s, 2.0, dtype=np.float32) for n, s in LAYOUT}
        self.client.push(0, grads)
        big = np.zeros((4, 3), dtype=np.float32)
        out = {"matrix": big.T}  # a (3, 4) view, not C-contiguous
        self.client.pull(1, out)
        np.testing.assert_array_equal(big.T, self.expected("matrix", 1))

    @unittest.skipIf(torch is None, "PyTorch is not installed")
    def test_torch_round_trip_in_every_float_dtype(self):
        step = 0
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            grads = {n: torch.full(s, 2.0, dtype=dtype) for n, s in LAYOUT}
            self.client.push(step, grads)
            out = {n: torch.zeros(s, dtype=dtype) for n, s in LAYOUT}
            self.client.pull(step + 1, out)
            step += 1
            for n, _ in LAYOUT:
                want = torch.as_tensor(np.asarray(self.expected(n, step), dtype=np.float32)).to(dtype)
                self.assertTrue(torch.equal(out[n], want), "%s %s" % (n, dtype))

    def test_async_calls_and_push_then_pull(self):
        grads = {n: np.full(s, 2.0, dtype=np.float32) for n, s in LAYOUT}
        out = {n: np.zeros(s, dtype=np.float32) for n, s in LAYOUT}
        ahead = self.client.pull_async(1, out)
        self.assertFalse(ahead.wait(timeout=0.2))  # step 1's weights need step 0's push
        push, pull = self.client.push_then_pull(0, grads, {n: np.zeros(s, np.float32) for n, s in LAYOUT})
        self.assertTrue(push.wait())
        self.assertTrue(pull.wait(timeout=10))
        self.assertTrue(ahead.wait(timeout=10))
        np.testing.assert_array_equal(out["conv"], self.expected("conv", 1))
        self.assertTrue(ahead.done())

    def test_calls_and_close_from_several_threads(self):
        import threading
        grads = {n: np.full(s, 2.0, dtype=np.float32) for n, s in LAYOUT}
        out = {n: np.zeros(s, dtype=np.float32) for n, s in LAYOUT}
        ahead = self.client.pull_async(1, out)  # waits for step 0's push
        waited = []
        waiters = [threading.Thread(target=lambda: waited.append(ahead.wait(timeout=20))) for _ in range(2)]
        for t in waiters:
            t.start()
        self.client.push_then_pull(0, grads, {n: np.zeros(s, np.float32) for n, s in LAYOUT})[0].wait()
        for t in waiters:
            t.join()
        self.assertEqual(waited, [True, True])  # both waits on one call end, neither on a freed handle
        np.testing.assert_array_equal(out["conv"], self.expected("conv", 1))

        stopped = []

        def poll_stats():
            try:
                while True:
                    self.client.stats()
            except shardps.ShardpsError as e:
                stopped.append(str(e))
        poller = threading.Thread(target=poll_stats)
        poller.start()
        barrier = threading.Barrier(3)

        def close():
            barrier.wait()
            self.client.close()
        closers = [threading.Thread(target=close) for _ in range(2)]
        for t in closers:
            t.start()
        barrier.wait()
        self.client.close()  # three closes at once: one frees, the others find it closed
        for t in closers + [poller]:
            t.join()
        self.assertEqual(stopped, ["the client is closed"])
        with self.assertRaisesRegex(shardps.ShardpsError, "the client is closed"):
            self.client.register()

    def test_bad_input_gets_a_clear_exception_and_the_server_keeps_serving(self):
        with self.assertRaisesRegex(ValueError, r"tensor 'matrix' has shape \(4, 3\); the layout says \(3, 4\)"):
            self.client.push(0, {"matrix": np.zeros((4, 3), np.float32)})
        with self.assertRaisesRegex(TypeError, "tensor 'vector' has dtype int64; want a floating dtype"):
            self.client.push(0, {"vector": np.zeros(5, np.int64)})
        with self.assertRaisesRegex(KeyError, "no tensor named 'nope'"):
            self.client.pull(0, {"nope": np.zeros(5, np.float32)})
        with self.assertRaisesRegex(ValueError, "read-only"):
            frozen = np.zeros(5, np.float32)
            frozen.flags.writeable = False
            self.client.pull(0, {"vector": frozen})
        with self.assertRaisesRegex(shardps.ShardpsError, "push for step 3 refused"):
            self.client.push(3, {"vector": np.zeros(5, np.float32)})  # the key is at step 0
        out = {"vector": np.zeros(5, np.float32)}
        self.client.pull(0, out)  # still serving
        np.testing.assert_array_equal(out["vector"], self.init["vector"])
        self.client.close()
        with self.assertRaisesRegex(shardps.ShardpsError, "the client is closed"):
            self.client.pull(0, out)

    def test_bad_configs_are_refused_by_name(self):
        with self.assertRaisesRegex(shardps.ShardpsError, "unknown client option '--colour=red'"):
            shardps.Client(config(self.servers, "--colour=red"), LAYOUT)
        with self.assertRaisesRegex(ValueError, "names a tensor twice"):
            shardps.Client(config(self.servers), [("a", (1,)), ("a", (2,))])
        wrong = shardps.Client(config(self.servers), [("vector", (6,))])  # another layout: refused at registration
        with self.assertRaisesRegex(shardps.ShardpsError, "layout"):
            wrong.register()
        wrong.close()


class CallRejoinTest(unittest.TestCase):
    def test_threads_waiting_on_a_rejoin_answer_register_again_once(self):
        import threading
        from shardps import _lib
        from shardps.client import Call

        class Client:
            registered = 0

            def _rejoin(self, message):
                Client.registered += 1
                return shardps.RejoinError(message, 7)
        call = Call(Client(), None, [])
        call._result = (_lib.SHARDPS_REJOIN, "server 1 restarted", 10)  # as the library answers a rejoin
        steps = []

        def wait():
            try:
                call.wait()
            except shardps.RejoinError as e:
                steps.append(e.step)
        waiters = [threading.Thread(target=wait) for _ in range(3)]
        for t in waiters:
            t.start()
        for t in waiters:
            t.join()
        self.assertEqual(steps, [7, 7, 7])
        self.assertEqual(Client.registered, 1)  # a second registration would replace the first one's session


if __name__ == "__main__":
    unittest.main()
