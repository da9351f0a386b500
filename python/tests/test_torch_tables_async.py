"""Sparse tables in async mode through shardps.torch, with a real ps_server:
a worker's row pulls leave only once its row pushes of the step before are
applied (read-your-writes, as its dense pulls), so one async worker trains
exactly as local SGD does; with --async_prefetch it does not wait. A
rejoin met while waiting for those pushes lines the worker up at its step."""
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


class Model(nn.Module if torch else object):
    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.top = nn.Linear(2, 1)
        self.emb = nn.EmbeddingBag(6, 2, mode="sum", sparse=True)

    def forward(self, ids):
        return self.top(self.emb(ids)).squeeze(1)


def batch(step):
    g = torch.Generator().manual_seed(step)
    ids = torch.cat([torch.tensor([[0, 1]]), torch.randint(0, 6, (2, 2), generator=g)])  # rows 0, 1 every step
    return ids, torch.randint(0, 2, (3,), generator=g).float()


def loss_of(model, ids, y):
    return torch.nn.functional.binary_cross_entropy_with_logits(model(ids), y)


class TwiceHashed(nn.Module if torch else object):
    """One HashEmbeddingBag run twice a step (one table for two fields)."""
    def __init__(self):
        super().__init__()
        self.h = shardps.torch.HashEmbeddingBag(2, mode="sum")
        self.top = nn.Linear(2, 1)

    def loss(self, a, b):
        return (self.h(a) + self.h(b)).sum() + 0 * self.top(torch.zeros(1, 2)).sum()


class Rejoining:
    """A call whose wait answers as when the job rewound to step 1."""
    def wait(self, rejoin=True):
        raise shardps.RejoinError("the job rewound", 1)


class Recording:
    """The worker's client, recording when row pushes start and are
    acknowledged and when row pulls start."""

    def __init__(self, client):
        self.client, self.events = client, []

    def __getattr__(self, name):
        return getattr(self.client, name)

    def push_rows_async(self, step, table, ids, grads):
        call, events = self.client.push_rows_async(step, table, ids, grads), self.events
        events.append(("push", step, table))

        class Acked:
            def wait(self, rejoin=True):
                result = call.wait(rejoin=rejoin)
                events.append(("acked", step, table))
                return result
        return Acked()

    def pull_rows_async(self, step, table, ids, out):
        self.events.append(("pull", step, table))
        return self.client.pull_rows_async(step, table, ids, out)

    def push_rows_many_async(self, step, transfers):
        call, events = self.client.push_rows_many_async(step, transfers), self.events
        tables = [t for t, _, _ in transfers]
        events.extend(("push", step, t) for t in tables)

        class Acked:
            def wait(self, rejoin=True):
                result = call.wait(rejoin=rejoin)
                events.extend(("acked", step, t) for t in tables)
                return result
        return Acked()

    def pull_rows_many_async(self, step, transfers):
        self.events.extend(("pull", step, t) for t, _, _ in transfers)
        return self.client.pull_rows_many_async(step, transfers)

    def pull_rows(self, step, table, ids, out):
        self.pull_rows_async(step, table, ids, out).wait()

    def pulls_before_their_pushes_were_acked(self):
        """Row pulls that started while a row push was not acknowledged."""
        unacked, early = set(), []
        for kind, step, table in self.events:
            if kind == "push":
                unacked.add((step, table))
            elif kind == "acked":
                unacked.discard((step, table))
            elif unacked:
                early.append((step, table, sorted(unacked)))
        return early


@unittest.skipIf(torch is None, "PyTorch is not installed")
class AsyncTablesTest(unittest.TestCase):
    def setUp(self):
        self.server = support.Server("--server_id=0", "--num_servers=1", "--num_workers=1", "--mode=async",
                                     "--optimizer=sgd", "--lr=%g" % LR)
        self.flagfile = support.tempfile.NamedTemporaryFile("w", suffix=".flags", delete=False)
        self.flagfile.close()

    def tearDown(self):
        self.server.close()
        support.os.unlink(self.flagfile.name)

    def write_flags(self, *flags):
        with open(self.flagfile.name, "w") as f:
            f.write("--mode=async\n--server_timeout=30s\n--row_optimizer=sgd\n--row_lr=%g\n--row_init_scale=0\n%s"
                    % (LR, "".join(flag + "\n" for flag in flags)))

    def train(self, steps, *flags):
        self.write_flags(*flags)
        model = Model()
        worker = shardps.torch.Worker(model, shardps.Job(self.server.address, 0, 1, self.flagfile.name))
        recording = Recording(worker.client)
        worker.tables.client = recording
        step = worker.start()
        while step < steps:
            ids, y = batch(step)
            worker.prefetch_rows({model.emb: ids})
            loss_of(model, ids, y).backward()
            step = worker.step_done()
        worker.tables.wait()
        rows = torch.empty(6, 2)
        worker.client.pull_rows(step, 0, torch.arange(6), rows)
        worker.close()
        return model, rows, recording

    def test_one_async_worker_reads_its_own_rows_and_trains_as_local_sgd(self):
        steps = 6
        model, rows, recording = self.train(steps)
        self.assertEqual(recording.pulls_before_their_pushes_were_acked(), [])
        ref = Model()
        with torch.no_grad():
            ref.emb.weight.zero_()
        for step in range(steps):
            ref.zero_grad()
            loss_of(ref, *batch(step)).backward()
            with torch.no_grad():
                for p in ref.parameters():
                    p -= LR * p.grad.to_dense()
        self.assertGreater(rows[:2].abs().sum().item(), 0)
        self.assertTrue(torch.allclose(rows, ref.emb.weight, atol=1e-6), (rows, ref.emb.weight))
        self.assertTrue(torch.allclose(model.top.weight, ref.top.weight, atol=1e-6))

    def worker_at_step_2(self):
        """A worker of Model that has trained steps 0 and 1."""
        self.write_flags()
        model = Model()
        worker = shardps.torch.Worker(model, shardps.Job(self.server.address, 0, 1, self.flagfile.name))
        step = worker.start()
        for _ in range(2):
            ids, y = batch(step)
            loss_of(model, ids, y).backward()
            step = worker.step_done()
        self.assertEqual(step, 2)
        return model, worker

    def train_on_to_step_4(self, model, worker):
        """After a rejoin: training goes on from the worker's step."""
        step = worker.step
        while step < 4:
            ids, y = batch(step)
            worker.prefetch_rows({model.emb: ids})
            loss_of(model, ids, y).backward()
            step = worker.step_done()
        worker.close()

    def test_a_rejoin_met_waiting_for_row_pushes_lines_the_worker_up(self):
        model, worker = self.worker_at_step_2()
        worker.tables.pushes.insert(0, Rejoining())  # as a push's wait answers when the job rewound to step 1
        ids, y = batch(worker.step)
        with self.assertRaises(shardps.RejoinError):
            worker.prefetch_rows({model.emb: ids})
        self.assertEqual((worker.step, worker.tables.pushes, worker.tables.prefetched), (1, [], {}))
        self.train_on_to_step_4(model, worker)

    def test_a_rejoin_met_by_a_row_pull_lines_the_worker_up(self):
        model, worker = self.worker_at_step_2()
        ids, y = batch(worker.step)
        worker.prefetch_rows({model.emb: ids})
        prefetched = worker.tables.prefetched[0]
        worker.tables.prefetched[0] = prefetched[:4] + (Rejoining(),)  # as the row pull's wait answers
        with self.assertRaises(shardps.RejoinError):
            loss_of(model, ids, y)
        self.assertEqual((worker.step, worker.tables.prefetched), (1, {}))
        self.train_on_to_step_4(model, worker)

    def test_a_hash_embedding_bag_run_twice_a_step_pushes_both_gradients(self):
        self.write_flags()
        model = TwiceHashed()
        worker = shardps.torch.Worker(model, shardps.Job(self.server.address, 0, 1, self.flagfile.name))
        step = worker.start()
        model.loss(torch.tensor([[1, 2]]), torch.tensor([[2, 3]])).backward()  # id 2 in both
        step = worker.step_done()
        worker.tables.wait()
        rows = torch.empty(3, 2)
        worker.client.pull_rows(step, 0, torch.tensor([1, 2, 3]), rows)
        worker.close()
        # sgd from zero rows, one worker: minus lr times each id's count over both runs
        expected = -LR * torch.tensor([[1.0, 1.0], [2.0, 2.0], [1.0, 1.0]])
        self.assertTrue(torch.allclose(rows, expected), rows)

    def test_with_async_prefetch_row_pulls_do_not_wait_for_the_pushes(self):
        _, _, recording = self.train(3, "--async_prefetch")
        self.assertNotEqual(recording.pulls_before_their_pushes_were_acked(), [])


if __name__ == "__main__":
    unittest.main()
