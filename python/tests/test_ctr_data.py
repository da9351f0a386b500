"""The CTR example's data path: tools/criteo_synth.py writes Criteo-format
rows with a learnable teacher, python/examples/criteo.py reads them into
ids that are stable within a field and distinct across fields, and
python/examples/ctr.py --local learns something from them."""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy  # noqa: F401
    import torch
except ImportError:
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))


def source_root():
    """The tree holding tools/: two levels up, or, under Bazel, where the
    runfiles' symlinks lead (tools/ is not among python_test's data)."""
    for here in (HERE, os.path.dirname(os.path.realpath(__file__))):
        root = os.path.dirname(os.path.dirname(here))
        if os.path.exists(os.path.join(root, "tools", "criteo_synth.py")):
            return root
    return None


ROOT = source_root()
EXAMPLES = os.path.join(ROOT or os.path.dirname(os.path.dirname(HERE)), "python", "examples")
HEX8 = re.compile(r"^[0-9a-f]{8}$")


@unittest.skipIf(torch is None, "numpy or PyTorch is not installed")
@unittest.skipIf(ROOT is None, "tools/criteo_synth.py is not reachable from here")
class CtrDataTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ctr_data.")
        cls.train = os.path.join(cls.dir, "train.tsv")
        cls.test = cls.train + ".test"
        run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "criteo_synth.py"), "--rows=3000",
                              "--test_rows=2000", "--max_vocab=100000", "--seed=3", "--out=" + cls.train],
                             capture_output=True, text=True, timeout=120)
        cls.stderr = run.stderr
        if run.returncode != 0:
            raise RuntimeError("criteo_synth failed: " + run.stderr)
        sys.path.insert(0, EXAMPLES)
        import criteo
        cls.criteo = criteo

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def lines(self, path):
        with open(path) as f:
            return [line.rstrip("\n").split("\t") for line in f]

    def test_rows_are_in_criteo_format(self):
        rows = self.lines(self.train)
        self.assertEqual(len(rows), 3000)
        self.assertEqual(len(self.lines(self.test)), 2000)
        for fields in rows:
            self.assertEqual(len(fields), 40)
            self.assertIn(fields[0], ("0", "1"))
            for value in fields[1:14]:
                self.assertTrue(value == "" or value.isdigit(), value)
            for value in fields[14:]:
                self.assertTrue(value == "" or HEX8.match(value), value)
        rate = sum(f[0] == "1" for f in rows) / len(rows)
        self.assertTrue(0.1 <= rate <= 0.45, rate)
        self.assertTrue(any(f[1] == "" for f in rows) and any(f[33] == "" for f in rows), "no empty fields")

    def test_teacher_is_reported_and_informative(self):
        m = re.search(r"teacher: test AUC ([0-9.]+) log loss ([0-9.]+) \((\d+) rows\)", self.stderr)
        self.assertIsNotNone(m, self.stderr)
        self.assertGreater(float(m.group(1)), 0.6)
        self.assertEqual(int(m.group(3)), 2000)

    def test_generator_is_deterministic(self):
        # The same flags less the test rows: the training rows must not change.
        again = os.path.join(self.dir, "again.tsv")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "criteo_synth.py"), "--rows=3000",
                        "--max_vocab=100000", "--seed=3", "--out=" + again], check=True, capture_output=True,
                       timeout=120)
        with open(self.train) as a, open(again) as b:
            self.assertTrue(a.read() == b.read())

    def test_reader_shapes_and_values(self):
        labels, dense, sparse = self.criteo.read_tsv(self.train)
        self.assertEqual((labels.shape, dense.shape, sparse.shape), ((3000,), (3000, 13), (3000, 26)))
        self.assertEqual((labels.dtype, dense.dtype, sparse.dtype), (torch.float32, torch.float32, torch.int64))
        rows = self.lines(self.train)
        for i in random.Random(0).sample(range(3000), 50):
            self.assertEqual(labels[i].item(), float(rows[i][0]))
            for k in range(13):
                want = numpy.log1p(int(rows[i][1 + k])) if rows[i][1 + k] else 0.0
                self.assertAlmostEqual(dense[i, k].item(), want, places=4)
        self.assertEqual(len(self.criteo.read_tsv(self.train, limit=10)[0]), 10)

    def test_ids_are_stable_in_a_field_and_distinct_across_fields(self):
        _, _, sparse = self.criteo.read_tsv(self.train)
        rows = self.lines(self.train)
        owner = {}
        for f in range(26):
            seen = {}
            for i, fields in enumerate(rows):
                seen.setdefault(fields[14 + f], set()).add(sparse[i, f].item())
            for value, ids in seen.items():
                self.assertEqual(len(ids), 1, "field %d value %r has several ids" % (f, value))
                (only,) = ids
                self.assertNotIn(only, owner, "field %d value %r shares an id" % (f, value))
                owner[only] = (f, value)
        # One string in every field, and an empty line of fields.
        line = "\t".join(["1"] + ["7"] * 13 + ["deadbeef"] * 26) + "\n" + "\t".join(["0"] + [""] * 39) + "\n"
        _, dense, ids = self.criteo.parse(line.encode())
        self.assertEqual(len(set(ids[0].tolist())), 26)
        self.assertEqual(len(set(ids[1].tolist())), 26)
        self.assertEqual(dense[1].tolist(), [0.0] * 13)

    def test_auc_handles_ties(self):
        rng = random.Random(1)
        labels = [rng.random() < 0.3 for _ in range(200)]
        scores = [rng.randint(0, 5) for _ in range(200)]  # many ties
        pairs = [(p, n) for p, lp in zip(scores, labels) if lp for n, ln in zip(scores, labels) if not ln]
        brute = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs) / len(pairs)
        self.assertAlmostEqual(self.criteo.auc(labels, scores), brute, places=9)
        self.assertAlmostEqual(self.criteo.log_loss([1, 0], [0.5, 0.5]), numpy.log(2), places=9)

    def test_local_training_learns(self):
        summary_path = os.path.join(self.dir, "summary.json")
        run = subprocess.run([sys.executable, os.path.join(EXAMPLES, "ctr.py"), "--local", "--epochs=1",
                              "--data=" + self.train, "--test_data=" + self.test, "--hash_size=10000",
                              "--batch_size=64", "--threads=2", "--summary_json=" + summary_path],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        summary = json.loads(run.stdout.strip().splitlines()[-1])
        self.assertEqual(summary["worker"], "torch-local")
        self.assertGreater(summary["test_auc"], 0.55, run.stdout)
        self.assertGreater(summary["steps"], 0)
        with open(summary_path) as f:
            self.assertEqual(json.load(f), summary)

    def test_an_unknown_device_is_refused(self):
        run = subprocess.run([sys.executable, os.path.join(EXAMPLES, "ctr.py"), "--local", "--device=tpu",
                              "--data=" + self.train, "--test_data=" + self.test, "--hash_size=100"],
                             capture_output=True, text=True, timeout=120)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("--device=tpu; want cpu, cuda or auto", run.stderr)

    def test_shardps_workers_learn_with_tables_on_the_servers(self):
        import support
        servers = support.servers(2, "--num_workers=1", "--mode=async", "--optimizer=adagrad", "--lr=0.05")
        flags = os.path.join(self.dir, "job.flags")
        with open(flags, "w") as f:
            f.write("--mode=async\n--server_timeout=30s\n--row_optimizer=adagrad\n--row_lr=0.05\n"
                    "--row_init_scale=0.05\n--hash_embeddings=true\n--epochs=1\n--batch_size=64\n"
                    "--data=%s\n--test_data=%s\n" % (self.train, self.test))
        summary_path = os.path.join(self.dir, "worker.json")
        env = dict(os.environ, SHARDPS_SERVERS=",".join(s.address for s in servers), SHARDPS_RANK="0",
                   SHARDPS_NUM_WORKERS="1", SHARDPS_FLAGFILE=flags, SHARDPS_SUMMARY_JSON=summary_path,
                   PYTHONPATH=os.path.join(os.path.dirname(EXAMPLES)))
        try:
            run = subprocess.run([sys.executable, os.path.join(EXAMPLES, "ctr.py")], env=env, capture_output=True,
                                 text=True, timeout=240)
        finally:
            for s in servers:
                s.close()
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        with open(summary_path) as f:
            summary = json.load(f)
        self.assertGreater(summary["test_auc"], 0.55, run.stdout)


if __name__ == "__main__":
    unittest.main()
