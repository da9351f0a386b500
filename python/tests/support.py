"""What the Python tests share: where the built binaries are, and real
ps_server processes to talk to."""
import os
import re
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the source tree, or the runfiles' workspace
sys.path.insert(0, os.path.join(ROOT, "python"))
# Built binaries: $SHARDPS_BIN (tests under Bazel set it to the runfiles), else bazel-bin.
BIN = os.environ.get("SHARDPS_BIN") or os.path.join(ROOT, "bazel-bin")
os.environ.setdefault("SHARDPS_LIB", os.path.join(BIN, "client", "libshardps.so"))


class Server:
    """A ps_server process on a free port; killed when closed."""

    def __init__(self, *flags):
        self.log = tempfile.NamedTemporaryFile(prefix="ps_server.", suffix=".log", delete=False)
        self.proc = subprocess.Popen([os.path.join(BIN, "server", "ps_server"), "--port=0"] + list(flags),
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"LISTENING port=(\d+)", line)
        if not m:
            raise RuntimeError("ps_server did not start: %r" % line)
        self.port = int(m.group(1))
        self.address = "127.0.0.1:%d" % self.port

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


def servers(n, *flags):
    return [Server("--server_id=%d" % i, "--num_servers=%d" % n, *flags) for i in range(n)]


def run_ranks(fn, n, timeout=120):
    """Runs fn(rank) for ranks 0..n-1 on threads and returns the exceptions
    they raised (a test asserts on its main thread that there were none)."""
    errors = []

    def run(rank):
        try:
            fn(rank)
        except Exception as e:  # reported on the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return errors
