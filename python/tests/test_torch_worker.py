"""shardps.torch.Worker with real ps_server processes: two workers of a
sync job (threads of this process) end every step with the weights a local
reference computes from their averaged gradients; rank 1 starts from rank
0's values; a parameter without a gradient does not stall a sync step."""
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


class Tiny(nn.Module if torch else object):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.first = nn.Linear(3, 4)
        self.second = nn.Linear(4, 2)
        self.unused = nn.Parameter(torch.ones(2))  # never in forward: pushed as zeros

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def batch(rank, step):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(5, 3, generator=g), torch.randint(0, 2, (5,), generator=g)


def loss_of(model, rank, step):
    x, y = batch(rank, step)
    return torch.nn.functional.cross_entropy(model(x), y)


@unittest.skipIf(torch is None, "PyTorch is not installed")
class WorkerTest(unittest.TestCase):
    def setUp(self):
        self.servers = support.servers(2, "--num_workers=2", "--mode=sync", "--optimizer=sgd", "--lr=%g" % LR,
                                       "--partition_bytes=32")
        addresses = ",".join(s.address for s in self.servers)
        self.flagfile = support.tempfile.NamedTemporaryFile("w", suffix=".flags", delete=False)
        self.flagfile.write("--mode=sync\n--partition_bytes=32\n--server_timeout=30s\n--lr=%g\n" % LR)
        self.flagfile.close()
        self.jobs = [shardps.Job(addresses, r, 2, self.flagfile.name) for r in range(2)]

    def tearDown(self):
        for s in self.servers:
            s.close()
        support.os.unlink(self.flagfile.name)

    def test_two_sync_workers_match_a_local_reference_step_by_step(self):
        models = [Tiny(seed=1), Tiny(seed=2)]  # rank 1's own values must be replaced by rank 0's
        reference = Tiny(seed=1)
        steps = 4
        seen = [[None] * steps for _ in range(2)]

        def run(rank):
            worker = shardps.torch.Worker(models[rank], self.jobs[rank])
            step = worker.start()
            while step < steps:
                loss_of(models[rank], rank, step).backward()
                models[rank](batch(rank, step)[0])  # a forward after the step takes step + 1's weights
                seen[rank][step] = {n: p.detach().clone() for n, p in models[rank].named_parameters()}
                step = worker.step_done()
            worker.close()

        errors = support.run_ranks(run, 2)
        self.assertEqual(errors, [])
        for step in range(steps):
            grads = []
            for rank in range(2):
                reference.zero_grad()
                loss_of(reference, rank, step).backward()
                grads.append({n: p.grad.clone() for n, p in reference.named_parameters() if p.grad is not None})
            with torch.no_grad():
                for n, p in reference.named_parameters():
                    if n in grads[0]:
                        p -= LR * (grads[0][n] + grads[1][n]) / 2
            for rank in range(2):
                for n, p in reference.named_parameters():
                    self.assertTrue(torch.allclose(seen[rank][step][n], p, atol=1e-6),
                                    "rank %d step %d %s" % (rank, step, n))

    def test_start_without_a_launcher_says_what_is_missing(self):
        with self.assertRaisesRegex(shardps.ShardpsError, "SHARDPS_SERVERS"):
            shardps.torch.Worker(Tiny(seed=1), shardps.init_from_env())


class _Done:
    """A finished call; `on_wait` runs at its first wait()."""
    def __init__(self, on_wait=None):
        self.on_wait = on_wait

    def wait(self, rejoin=True):
        if self.on_wait is not None:
            on_wait, self.on_wait = self.on_wait, None
            on_wait()
        return True


class _LateClient:
    """A client whose pushes read their buffers only when waited for, as a
    real push may leave late (the transfer schedule encodes it when sent)."""
    def __init__(self):
        self.sent = []  # (step, name, values), in the order they left

    def register(self):
        return 0

    def init(self, values):
        return True

    def pull_async(self, step, weights):
        for buf in weights.values():
            buf.fill_(0.5)  # weights that give every layer a gradient
        return _Done()

    def push_then_pull(self, step, grads, weights):
        (name, buf), = grads.items()
        return _Done(lambda: self.sent.append((step, name, buf.clone()))), self.pull_async(step, weights)

    def push_rows_many_async(self, step, transfers):  # no tables: an empty push
        return _Done()

    def close(self):
        pass


class _LateJob:
    rank = 0

    def __init__(self):
        self.client = _LateClient()

    def flag(self, name, kind, default):
        return default

    def connect(self, layout, tables):
        return self.client


class TwoLayers(nn.Module if torch else object):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2, bias=False)
        self.b = nn.Linear(2, 2, bias=False)

    def forward(self, x, use_b):
        return self.b(self.a(x)) if use_b else self.a(x)


@unittest.skipIf(torch is None, "PyTorch is not installed")
class LatePushTest(unittest.TestCase):
    def test_a_push_keeps_its_gradient_until_it_leaves(self):
        job = _LateJob()
        model = TwoLayers()
        worker = shardps.torch.Worker(model, job)
        worker.start()
        model(torch.ones(1, 2), use_b=True).sum().backward()
        b_grad = model.b.weight.grad.clone()
        worker.step_done()
        model(torch.ones(1, 2), use_b=False).sum().backward()  # b has no gradient at step 1: zeros
        worker.step_done()
        sent = {(step, name): values for step, name, values in job.client.sent}
        self.assertIn((0, "b.weight"), sent)
        self.assertTrue(torch.equal(sent[(0, "b.weight")], b_grad), "step 0's push of b was overwritten before it left")
        self.assertTrue(bool(b_grad.abs().sum() > 0))


if __name__ == "__main__":
    unittest.main()
