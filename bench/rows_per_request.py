#!/usr/bin/env python3
"""What one request per server for every table saves against one request per
table: a CTR model's 26 tables (dim 16, a batch's ~500 distinct ids each)
pulled and pushed by one sync worker against one local ps_server, as
Client.pull_rows_many_async/push_rows_many_async (one request a server)
and as 26 pull_rows_async/push_rows_async calls (one request a table),
alternating in the same run. Prints microseconds per step of each, and the
ratio.

    bench/rows_per_request.py [--tables=26] [--steps=300] [--rounds=3]
Binaries: $SHARDPS_BIN, else bazel-bin."""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
import numpy as np  # noqa: E402
import support  # noqa: E402  (the tests' ps_server launcher; finds the binaries)
import shardps  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=26)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    server = support.Server("--server_id=0", "--num_servers=1", "--num_workers=1", "--mode=sync")
    tables = [shardps.Table("t%d" % i, 16, init_scale=0.05, optimizer="adagrad", lr=0.05) for i in range(a.tables)]
    client = shardps.Client("--servers=%s --rank=0 --num_workers=1 --mode=sync" % server.address, [("w", (4,))], tables)
    client.register()
    client.init({"w": np.zeros(4, np.float32)})
    rng = np.random.default_rng(1)
    ids = [np.unique(rng.integers(0, 200000, 512)) for _ in range(a.tables)]
    rows = [np.empty((len(i), 16), np.float32) for i in ids]
    grads = [np.full((len(i), 16), 1e-3, np.float32) for i in ids]
    step = 0

    def many():
        client.push_rows_many_async(step, [(t, ids[t], grads[t]) for t in range(a.tables)]).wait()
        client.pull_rows_many_async(step + 1, [(t, ids[t], rows[t]) for t in range(a.tables)]).wait()

    def each():
        for call in [client.push_rows_async(step, t, ids[t], grads[t]) for t in range(a.tables)]:
            call.wait()
        for call in [client.pull_rows_async(step + 1, t, ids[t], rows[t]) for t in range(a.tables)]:
            call.wait()

    print("# rows per request: 1 ps_server (sync) x 1 client on loopback, %d tables of dim 16, ~%d ids each, "
          "%d push+pull steps a measure; %s, %d cores" % (a.tables, int(np.mean([len(i) for i in ids])), a.steps,
                                                          time.strftime("%Y-%m-%d"), os.cpu_count()))
    print("round  one_request_per_server_us  one_request_per_table_us  ratio")
    for r in range(1, a.rounds + 1):
        us = {}
        for name, fn in (("many", many), ("each", each)):
            tick = time.perf_counter()
            for _ in range(a.steps):
                fn()
                step += 1
            us[name] = (time.perf_counter() - tick) / a.steps * 1e6
        print("%5d  %25.0f  %24.0f  %5.2f" % (r, us["many"], us["each"], us["each"] / us["many"]))
    client.close()
    server.close()


if __name__ == "__main__":
    main()
