"""The PyTorch example (python/examples/fashion_mnist.py) as the workers of
real jobs launched by deploy/ps_launch --script: it trains to accuracy in
sync and in async mode without a change (async with mutual TLS, the job's
files under a path with a space), and a server killed with SIGKILL
and restarted mid-run makes the workers line up again and finish (with
--replicas=2: the restarted server joins again, and nothing is rewound)."""
import glob
import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

import support

try:
    import torch  # noqa: F401
except ImportError:
    torch = None

LAUNCH = os.path.join(support.ROOT, "deploy", "ps_launch")
EXAMPLE = os.path.join(support.ROOT, "python", "examples", "fashion_mnist.py")
DATA = "/usr/share/datasets/fashion-mnist"


def launch(out, *flags):
    cmd = [LAUNCH, "--script=" + EXAMPLE, "--python=" + support.sys.executable, "--out=" + out, "--servers=2",
           "--workers=2", "--model=mlp", "--epochs=1", "--log_every=50"] + list(flags)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def summaries(out):
    return [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "summary-*.json")))]


@unittest.skipIf(torch is None or not os.path.isdir(DATA), "needs PyTorch and Fashion-MNIST (tools/setup)")
class LaunchTest(unittest.TestCase):
    def run_job(self, *flags, prefix="shardps-launch."):
        out = tempfile.mkdtemp(prefix=prefix)
        proc = launch(out, *flags)
        log, _ = proc.communicate(timeout=600)
        self.assertEqual(proc.returncode, 0, log[-3000:])
        return out, log

    def test_the_example_trains_in_sync_mode(self):
        out, log = self.run_job("--mode=sync")
        s = summaries(out)
        self.assertEqual(len(s), 2)
        self.assertGreaterEqual(s[0]["final_test_accuracy"], 0.82, log[-2000:])
        self.assertEqual({x["steps"] for x in s}, {468})  # 60000 / 2 workers / 64 per step

    def test_the_same_script_trains_in_async_mode_with_mutual_tls_under_a_path_with_spaces(self):
        # The flag file, the certificates and the workers' own client flags
        # (SHARDPS_CLIENT_FLAGS) all lie under the space.
        out, log = self.run_job("--mode=async", "--tls=mutual", prefix="shardps launch.")
        self.assertIn(" ", out)
        self.assertGreaterEqual(summaries(out)[0]["final_test_accuracy"], 0.80, log[-2000:])

    def kill_server_1_past_step_100(self, out, *flags):
        """Launches a sync job with `flags`, kills server 1 with SIGKILL once
        worker 0 is past step 100, and waits for the job (ps_launch restarts
        the server). Returns the launcher's output and every log by name."""
        proc = launch(out, "--mode=sync", "--restart_servers=1", *flags)
        worker_log = os.path.join(out, "worker-0.log")
        deadline = time.time() + 120
        while time.time() < deadline:  # until the job is past step 100
            if os.path.exists(worker_log) and "step 100/" in open(worker_log).read():
                break
            time.sleep(0.1)
        os.kill(int(open(os.path.join(out, "server-1.pid")).read()), signal.SIGKILL)
        try:
            log, _ = proc.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            proc.kill()
            self.fail("the job did not finish within 150 s of the kill:\n" + "\n".join(
                "== %s\n%s" % (f, open(f).read()[-1500:]) for f in sorted(glob.glob(os.path.join(out, "*.log")))))
        logs = {}
        for f in glob.glob(os.path.join(out, "*.log")):
            with open(f) as text:
                logs[os.path.basename(f)] = text.read()
        self.assertEqual(proc.returncode, 0, (log + "".join(logs.values()))[-4000:])
        return log, logs

    def test_a_server_killed_mid_run_is_restarted_and_the_workers_finish(self):
        out = tempfile.mkdtemp(prefix="shardps-chaos.")
        log, logs = self.kill_server_1_past_step_100(out, "--checkpoint_dir=" + os.path.join(out, "ckpt"),
                                                     "--checkpoint_every=50")
        self.assertIn("restarting it", log)
        self.assertIn("rejoined the job at step", logs["worker-0.log"] + logs["worker-1.log"])
        self.assertGreaterEqual(summaries(out)[0]["final_test_accuracy"], 0.80)

    def test_a_replicated_server_killed_mid_run_joins_again_without_a_rewind(self):
        for tls in ("none", "mutual"):  # mutual TLS: the servers' own certificates between them
            with self.subTest(tls=tls):
                out = tempfile.mkdtemp(prefix="shardps-rejoin.")
                log, logs = self.kill_server_1_past_step_100(out, "--replicas=2", "--tls=" + tls)
                self.assertEqual({x["steps"] for x in summaries(out)}, {468})
                self.assertGreaterEqual(summaries(out)[0]["final_test_accuracy"], 0.80)
                self.assertIn("server 1 joins the running job", log)
                self.assertIn("has a copy of every key it holds", logs["server-1.log"])
                self.assertIn("server 1 is live again", logs["worker-0.log"])
                self.assertNotIn("rejoined the job at step", logs["worker-0.log"] + logs["worker-1.log"])

if __name__ == "__main__":
    unittest.main()
