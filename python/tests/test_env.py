"""shardps.Job, the worker's place in its job (python/shardps/env.py): the
job's flag file read as absl reads one (a flag a line, leading spaces
dropped, '-' or '--'), and the client's options written so that a path with
spaces stays one word (client/client_config.h); a double quote, which those
options cannot carry, is refused by name."""
import os
import shutil
import tempfile
import unittest

import support  # noqa: F401  (puts python/ on the path)
import shardps


class JobTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="shardps env.")  # a space in every path below
        self.flagfile = os.path.join(self.dir, "job.flags")
        with open(self.flagfile, "w") as f:
            f.write("  --mode=ssp\n-row_lr=0.5\n# --mode=sync\n\n--data=/a dir/train.tsv\n--tls_mutual\n")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_the_flag_file_is_read_a_flag_a_line(self):
        job = shardps.Job("127.0.0.1:1", 0, 1, self.flagfile)
        self.assertEqual(job.flag("mode"), "ssp")
        self.assertEqual(job.flag("row_lr", float), 0.5)
        self.assertEqual(job.flag("data"), "/a dir/train.tsv")
        self.assertTrue(job.flag("tls_mutual", bool))
        self.assertIsNone(job.flag("epochs"))

    def test_the_client_options_keep_paths_with_spaces_whole(self):
        job = shardps.Job("127.0.0.1:1", 2, 3, self.flagfile, client_flags="'--tls_cert=/a dir/w.pem' --tls_key=/k")
        self.assertEqual(job.config(), '"--flagfile=%s" --servers=127.0.0.1:1 --rank=2 --num_workers=3 '
                         '"--tls_cert=/a dir/w.pem" --tls_key=/k' % self.flagfile)

    def test_a_double_quote_in_an_option_is_refused_by_name(self):
        job = shardps.Job("127.0.0.1:1", 0, 1, client_flags="'--tls_cert=/a\"b/w.pem'")
        with self.assertRaisesRegex(shardps.ShardpsError, 'tls_cert=/a"b/w.pem holds a double quote'):
            job.config()


if __name__ == "__main__":
    unittest.main()
