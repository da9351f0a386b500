"""Sparse tables through shardps.torch with real ps_server processes: two
sync workers (threads) train a model with an nn.EmbeddingBag(sparse=True)
and a HashEmbeddingBag beside a dense layer, and end with the rows and
weights that a local reference computes from their averaged gradients."""
import unittest

import support
import shardps

try:
    import torch
    import torch.nn as nn
    import shardps.torch
except ImportError:
    torch = None

LR = 0.25
BIG = 10 ** 15  # hashed ids far beyond any table a worker could allocate


class Ctr(nn.Module if torch else object):
    def __init__(self, hashed):
        super().__init__()
        torch.manual_seed(3)
        self.top = nn.Linear(4, 1)  # first: the same values whichever tables follow
        self.emb = nn.EmbeddingBag(10, 2, mode="sum", sparse=True)
        self.hemb = shardps.torch.HashEmbeddingBag(2, mode="sum") if hashed else nn.EmbeddingBag(
            6, 2, mode="sum", sparse=True)
        self.unused = nn.EmbeddingBag(4, 2, sparse=True)  # never in forward: an empty push each step

    def forward(self, a, b):
        return self.top(torch.cat([self.emb(a), self.hemb(b)], 1)).squeeze(1)


def batch(rank, step):
    g = torch.Generator().manual_seed(10 * step + rank)
    a = torch.randint(0, 10, (3, 2), generator=g)
    b = torch.randint(0, 6, (3, 2), generator=g)
    return a, b, torch.randint(0, 2, (3,), generator=g).float()


def loss_of(model, a, b, y):
    return torch.nn.functional.binary_cross_entropy_with_logits(model(a, b), y)


@unittest.skipIf(torch is None, "PyTorch is not installed")
class TablesTest(unittest.TestCase):
    def setUp(self):
        self.servers = support.servers(2, "--num_workers=2", "--mode=sync", "--optimizer=sgd", "--lr=%g" % LR)
        addresses = ",".join(s.address for s in self.servers)
        self.flagfile = support.tempfile.NamedTemporaryFile("w", suffix=".flags", delete=False)
        self.flagfile.write("--mode=sync\n--server_timeout=30s\n--row_optimizer=sgd\n--row_lr=%g\n"
                            "--row_init_scale=0\n" % LR)
        self.flagfile.close()
        self.jobs = [shardps.Job(addresses, r, 2, self.flagfile.name) for r in range(2)]

    def tearDown(self):
        for s in self.servers:
            s.close()
        support.os.unlink(self.flagfile.name)

    def train(self, steps, prefetch=None):
        """prefetch: None; "exact" (Worker.prefetch_rows with the ids each
        forward sees); "wrong" (other ids for emb: its forward pulls itself)."""
        models = [Ctr(hashed=True), Ctr(hashed=True)]
        rows = {}

        def run(rank):
            worker = shardps.torch.Worker(models[rank], self.jobs[rank])
            step = worker.start()
            while step < steps:
                a, b, y = batch(rank, step)
                if prefetch:
                    model = models[rank]
                    worker.prefetch_rows({model.emb: a if prefetch == "exact" else a + 1, model.hemb: b * BIG})
                loss_of(models[rank], a, b * BIG, y).backward()
                step = worker.step_done()
            if rank == 0:
                for t, n, ids in ((0, "emb", torch.arange(10)), (1, "hemb", torch.arange(6) * BIG)):
                    rows[n] = torch.empty(len(ids), 2)
                    worker.client.pull_rows(step, t, ids, rows[n])
            worker.close()

        errors = support.run_ranks(run, 2)
        self.assertEqual(errors, [])
        return models, rows

    def reference(self, steps):
        ref = Ctr(hashed=False)
        with torch.no_grad():
            ref.emb.weight.zero_()
            ref.hemb.weight.zero_()
        for step in range(steps):
            grads = []
            for rank in range(2):
                ref.zero_grad()
                loss_of(ref, *batch(rank, step)).backward()
                grads.append({n: p.grad.to_dense().clone() for n, p in ref.named_parameters() if p.grad is not None})
            with torch.no_grad():
                for n, p in ref.named_parameters():
                    if n in grads[0]:
                        p -= LR * (grads[0][n] + grads[1][n]) / 2
        return ref

    def test_two_sync_workers_end_with_the_reference_rows_and_weights(self):
        steps = 4
        models, rows = self.train(steps)
        ref = self.reference(steps)
        self.assertTrue(torch.allclose(rows["emb"], ref.emb.weight, atol=1e-6), (rows["emb"], ref.emb.weight))
        self.assertTrue(torch.allclose(rows["hemb"], ref.hemb.weight, atol=1e-6), (rows["hemb"], ref.hemb.weight))
        self.assertGreater(rows["emb"].abs().sum().item(), 0)
        for model in models:  # close() left the servers' final dense weights in the model
            self.assertTrue(torch.allclose(model.top.weight, ref.top.weight, atol=1e-6))

    def test_prefetched_rows_give_the_same_training(self):
        ref = self.reference(3)
        for prefetch in ("exact", "wrong"):
            with self.subTest(prefetch=prefetch):
                if prefetch == "wrong":  # a second job on fresh servers
                    self.tearDown()
                    self.setUp()
                _, rows = self.train(3, prefetch)
                self.assertTrue(torch.allclose(rows["emb"], ref.emb.weight, atol=1e-6), (rows["emb"], ref.emb.weight))
                self.assertTrue(torch.allclose(rows["hemb"], ref.hemb.weight, atol=1e-6))

    def test_prefetch_of_a_module_that_is_no_table_is_refused(self):
        model = Ctr(hashed=True)
        worker = shardps.torch.Worker(model, self.jobs[0])
        try:
            with self.assertRaisesRegex(shardps.ShardpsError, "start"):
                worker.prefetch_rows({model.emb: torch.tensor([1])})
            worker.step = 0  # as if started: the argument is checked before any pull
            with self.assertRaisesRegex(ValueError, "Linear is not one of this model's sparse embedding modules"):
                worker.prefetch_rows({model.top: torch.tensor([1])})
        finally:
            worker.close()

    def test_the_worker_limits_openblas_to_the_jobs_blas_threads(self):
        from shardps.blas_threads import openblas_threads, set_openblas_threads
        if not openblas_threads():
            self.skipTest("PyTorch here does not run on OpenBLAS")
        set_openblas_threads(2)
        self.assertEqual(set(openblas_threads().values()), {2})
        shardps.torch.Worker(Ctr(hashed=True), self.jobs[0]).close()  # --blas_threads unset: 1
        self.assertEqual(set(openblas_threads().values()), {1})

    def test_hash_embedding_bag_outside_a_worker_says_so(self):
        with self.assertRaisesRegex(RuntimeError, "runs inside a shardps.torch.Worker"):
            shardps.torch.HashEmbeddingBag(4)(torch.tensor([[1, 2]]))


if __name__ == "__main__":
    unittest.main()
