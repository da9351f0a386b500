#!/usr/bin/env python3
"""Click-through-rate prediction on Criteo-format data with a DLRM-style
model: a bottom MLP over the 13 dense features, one embedding bag per
categorical field, the pairwise dot products of those 27 vectors, a top MLP.

A local single-process PyTorch baseline (Adagrad on every parameter, sparse
gradients for the embeddings):

    python/examples/ctr.py --local --data=train.tsv --test_data=test.tsv --epochs=1

Workers of a ShardPS job (the servers run the optimizers: --optimizer and
--lr for the MLPs, --row_optimizer and --row_lr for the tables; job flags
data, test_data, epochs, batch_size, seed, dim, hash_size, log_every,
hash_embeddings, prefetch_rows (default true: all tables' rows pulled
together before each forward), whose defaults are the script's own --flags):

    deploy/ps_launch --script=python/examples/ctr.py --servers=2 --workers=2 \\
        --optimizer=adagrad --epsilon=1e-10 --lr=0.05 --lr_schedule=constant \\
        --row_optimizer=adagrad --row_lr=0.05 --row_init_scale=0.05 \\
        --data=train.tsv --test_data=test.tsv

(ps_launch's job recipe otherwise adds --epochs=10, a cosine schedule and a
warm-up; the servers' Adagrad eps defaults to 1e-8, torch's to 1e-10.)

Comparable runs (bench/ctr_accuracy): with --row_init=server (the default)
--local starts every row the data names from the value the servers would
give it (common/table_spec.cc InitialRow: table "bags.<field>", --seed,
--init_scale), and its dense layers from the same torch seed as rank 0's, so
--local at --batch_size=N*B is the same computation as a sync job of N
workers at batch B: worker r takes rows [(i*N + r)*B, (i*N + r + 1)*B) of
the epoch's shuffle at step i, which together are --local's step i.

The tables are sparse tables on the servers: --hash_size rows per field
(ids modulo it), or, with --hash_embeddings, shardps.torch.HashEmbeddingBag
over the raw ids, with no table on the worker at all.

Data: tools/criteo_synth.py makes it, or real Criteo day files. The last
line printed is a JSON summary (also written to --summary_json, or the job's
summary file): test AUC and log loss, samples_per_second over the time spent
training (evaluation excluded), steps, wall_seconds of the whole loop.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import criteo  # noqa: E402  (beside this file)

NUM_DENSE, NUM_FIELDS = criteo.NUM_DENSE, criteo.NUM_CAT


class DLRM(nn.Module):
    """bags: one module per categorical field, each mapping ids [B, 1] to [B, dim].
    hash_size: ids are taken modulo it first (None: raw ids)."""

    def __init__(self, dim, bags, hash_size=None):
        super().__init__()
        self.hash_size = hash_size
        self.bottom = nn.Sequential(nn.Linear(NUM_DENSE, 64), nn.ReLU(), nn.Linear(64, dim), nn.ReLU())
        self.bags = nn.ModuleList(bags)
        vectors = NUM_FIELDS + 1
        below = torch.tril_indices(vectors, vectors, offset=-1)
        self.register_buffer("pair_rows", below[0], persistent=False)
        self.register_buffer("pair_cols", below[1], persistent=False)
        self.top = nn.Sequential(nn.Linear(dim + vectors * (vectors - 1) // 2, 64), nn.ReLU(), nn.Linear(64, 1))

    def bag_inputs(self, sparse):
        """What each bag's forward sees: field f's ids [B, 1] (modulo hash_size)."""
        if self.hash_size is not None:
            sparse = torch.remainder(sparse, self.hash_size)
        return [sparse[:, f:f + 1] for f in range(len(self.bags))]

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        vectors = [x] + [bag(ids) for bag, ids in zip(self.bags, self.bag_inputs(sparse))]
        t = torch.stack(vectors, 1)  # [B, 27, dim]
        dots = torch.bmm(t, t.transpose(1, 2))[:, self.pair_rows, self.pair_cols]
        return self.top(torch.cat([x, dots], 1)).squeeze(1)


def make_model(dim, hash_size, hashed=False):
    """Tables of nn.EmbeddingBag(sparse=True) over ids modulo hash_size: with
    --local Adagrad updates their rows from sparse gradients, in a ShardPS
    worker they live on the servers and only each batch's rows move. hashed:
    shardps.torch.HashEmbeddingBag over the raw ids, no table on the worker."""
    if hashed:
        import shardps.torch  # lazily: --local runs without the native library
        bags = [shardps.torch.HashEmbeddingBag(dim, mode="sum", name="C%d" % (f + 1)) for f in range(NUM_FIELDS)]
        return DLRM(dim, bags)
    bags = [nn.EmbeddingBag(hash_size, dim, mode="sum", sparse=True) for _ in range(NUM_FIELDS)]
    for bag in bags:
        # N(0, 1), EmbeddingBag's default, makes the first dot products of
        # size dim and saturates the top MLP; small uniform rows do not.
        # (Drawn in both modes, so that the dense layers' draws that follow
        # are the same in --local and in a worker.)
        nn.init.uniform_(bag.weight, -0.05, 0.05)
    return DLRM(dim, bags, hash_size)


GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x):
    with np.errstate(over="ignore"):
        return criteo.mix64(x)


def server_rows(name, ids, dim, scale, seed):
    """The rows [len(ids), dim] a ShardPS server starts table `name`'s ids
    from: common/table_spec.cc InitialRow, bit for bit (float32)."""
    h = 1469598103934665603
    for c in name.encode():
        h = ((h ^ c) * 1099511628211) & (2 ** 64 - 1)
    with np.errstate(over="ignore"):
        base = _mix(np.array([h], np.uint64) ^ _mix(np.array([seed], np.uint64) + GOLDEN))[0]
        state = np.asarray(ids, np.int64).view(np.uint64) ^ base
        out = np.empty((len(ids), dim), np.float32)
        for j in range(dim):
            state = state + GOLDEN
            unit = (_mix(state) >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)
            out[:, j] = (np.float32(2.0) * unit - np.float32(1.0)) * np.float32(scale)
    return out


def init_rows_as_servers(model, datasets, scale, seed):
    """Sets the rows of `model`'s tables that `datasets` name to the servers'
    initial values (rows no data names are never read)."""
    for f, bag in enumerate(model.bags):
        ids = torch.unique(torch.cat([torch.remainder(d[2][:, f], model.hash_size) for d in datasets]))
        rows = server_rows("bags.%d" % f, ids.numpy(), bag.embedding_dim, scale, seed)
        with torch.no_grad():
            bag.weight.index_copy_(0, ids, torch.from_numpy(rows))


def evaluate(model, data, batch=8192):
    """(AUC, log loss) of the model on data = (labels, dense, sparse)."""
    labels, dense, sparse = data
    model.eval()
    with torch.no_grad():
        probs = torch.cat([torch.sigmoid(model(dense[i:i + batch], sparse[i:i + batch]))
                           for i in range(0, len(labels), batch)]) if len(labels) else torch.zeros(0)
    model.train()
    return criteo.auc(labels, probs), criteo.log_loss(labels, probs)


def epoch_order(rows, seed, epoch):
    """The epoch's shuffle: every worker draws the same one and takes its share."""
    return torch.randperm(rows, generator=torch.Generator().manual_seed(seed * 1000 + epoch))


def steps_per_epoch(rows, batch):
    if rows < batch:
        raise SystemExit("ctr: %d rows make no batch of %d" % (rows, batch))
    return rows // batch


def load(path, what):
    if not path:
        raise SystemExit("ctr: no %s file (--%s=...)" % (what, what))
    begin = time.perf_counter()
    data = criteo.read_tsv(path)
    print("ctr: %s: %d rows, click rate %.4f, read in %.1f s"
          % (path, len(data[0]), data[0].mean().item() if len(data[0]) else float("nan"),
             time.perf_counter() - begin), flush=True)
    return data


def write_summary(summary, path):
    # A rank that did not evaluate has no figures: null, as NaN is not JSON.
    summary = {k: None if isinstance(v, float) and v != v else v for k, v in summary.items()}
    print(json.dumps(summary), flush=True)
    if path:
        with open(path, "w") as f:
            f.write(json.dumps(summary) + "\n")


def train_local(args):
    torch.manual_seed(args.seed)
    train, test = load(args.data, "data"), load(args.test_data, "test_data")
    model = make_model(args.dim, args.hash_size)
    if args.row_init == "server":
        init_rows_as_servers(model, (train, test), args.init_scale, args.seed)
    elif args.init_scale != 0.05:
        for bag in model.bags:
            nn.init.uniform_(bag.weight, -args.init_scale, args.init_scale)
    device = pick_device(args.device)
    model, train, test = model.to(device), to_device(train, device), to_device(test, device)
    tables = [p for n, p in model.named_parameters() if n.startswith("bags.")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("bags.")]
    # Two optimizers: Adagrad handles sparse gradients per tensor, but its
    # multi-tensor path (the default on some versions) refuses them.
    optimizers = [torch.optim.Adagrad(tables, lr=args.row_lr or args.lr), torch.optim.Adagrad(rest, lr=args.lr)]
    per_epoch = steps_per_epoch(len(train[0]), args.batch_size)
    total, step, auc, loss_sum = per_epoch * args.epochs, 0, float("nan"), 0.0
    if args.max_steps:
        per_epoch = total = min(total, args.max_steps)
        args.epochs = 1
    log_loss, training = float("nan"), 0.0
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = epoch_order(len(train[0]), args.seed, epoch)
        tick = time.perf_counter()
        for i in range(per_epoch):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size].to(device)
            loss = F.binary_cross_entropy_with_logits(model(train[1][idx], train[2][idx]), train[0][idx])
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            for opt in optimizers:
                opt.step()
            step, loss_sum = step + 1, loss_sum + loss.item()
            if args.log_every and step % args.log_every == 0:
                print("local epoch %d step %d/%d loss %.4f" % (epoch, step, total, loss_sum / args.log_every),
                      flush=True)
                loss_sum = 0.0
        training += time.perf_counter() - tick
        auc, log_loss = evaluate(model, test)
        print("epoch %d done: test AUC %.4f log loss %.4f" % (epoch, auc, log_loss), flush=True)
    seconds = time.perf_counter() - start
    dump_dense(model, args.dump_dense)
    write_summary({"test_auc": auc, "test_log_loss": log_loss, "steps": step, "wall_seconds": seconds,
                   "samples": step * args.batch_size, "training_seconds": training,
                   "samples_per_second": step * args.batch_size / max(training, 1e-9), "worker": "torch-local",
                   "device": str(device)},
                  args.summary_json)


def pick_device(name):
    """cpu, cuda, or auto (cuda where PyTorch sees a GPU)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("ctr: --device=cuda, but PyTorch sees no CUDA device")
    if name not in ("cpu", "cuda"):
        raise SystemExit("ctr: --device=%s; want cpu, cuda or auto" % name)
    return torch.device(name)


def to_device(data, device):
    """(labels, dense, sparse) on `device` (None stays None: a rank without test data)."""
    return None if data is None else tuple(x.to(device) for x in data)


def dump_dense(model, path):
    """Saves the dense (MLP) parameters, to compare runs step for step."""
    if path:
        torch.save({n: p.detach().clone() for n, p in model.named_parameters() if not n.startswith("bags.")}, path)


def worker_step(model, worker, train, idx, prefetch=True):
    """One step's forward and backward; the Worker pushes as gradients appear.
    prefetch: the 26 tables' rows are pulled together before the forward
    (Worker.prefetch_rows), not one table after another inside it."""
    if prefetch:
        worker.prefetch_rows(dict(zip(model.bags, model.bag_inputs(train[2][idx]))))
    loss = F.binary_cross_entropy_with_logits(model(train[1][idx], train[2][idx]), train[0][idx])
    loss.backward()
    return worker.step_done(), loss


def train_worker(args):
    import shardps  # lazily: --local runs without the native library
    import shardps.torch

    job = shardps.init_from_env()
    data, test_data = job.flag("data", str, args.data), job.flag("test_data", str, args.test_data)
    epochs, batch = job.flag("epochs", int, args.epochs), job.flag("batch_size", int, args.batch_size)
    seed, log_every = job.flag("seed", int, args.seed), job.flag("log_every", int, args.log_every)
    dim, hash_size = job.flag("dim", int, args.dim), job.flag("hash_size", int, args.hash_size)
    hashed = job.flag("hash_embeddings", bool, args.hash_embeddings)
    prefetch = job.flag("prefetch_rows", bool, True)
    torch.set_num_threads(job.flag("blas_threads", int, 1))
    train = load(data, "data")
    test = load(test_data, "test_data") if job.rank == 0 else None
    torch.manual_seed(seed)
    device = pick_device(job.flag("device", str, args.device))
    model = make_model(dim, hash_size, hashed).to(device)
    train, test = to_device(train, device), to_device(test, device)

    worker = shardps.torch.Worker(model, job)
    phases = PhaseTimes(worker.client) if job.flag("phase_times", bool, False) else None
    # Step i of an epoch takes rows [(i*N + r)*B, (i*N + r + 1)*B) of its
    # shuffle on rank r: the N workers' batches of a step are --local's
    # batch of N*B at its step i.
    per_epoch = steps_per_epoch(len(train[0]) // job.num_workers, batch)
    total = per_epoch * epochs
    max_steps = job.flag("max_steps", int, args.max_steps)
    if max_steps:
        per_epoch = total = min(total, max_steps)
    step = worker.start()
    start, training, done, auc, log_loss, order_of = time.perf_counter(), 0.0, 0, float("nan"), float("nan"), {}
    while step < total:
        epoch, i = divmod(step, per_epoch)
        if epoch not in order_of:
            order_of = {epoch: epoch_order(len(train[0]), seed, epoch)}
        first = (i * job.num_workers + job.rank) * batch
        idx = order_of[epoch][first:first + batch].to(device)
        tick = time.perf_counter()
        try:
            step, loss = worker_step(model, worker, train, idx, prefetch)
        except shardps.RejoinError as e:  # the job rewound after a server restart
            print("worker %d: rejoined the job at step %d (was at %d)" % (job.rank, e.step, step), flush=True)
            step = e.step
            continue
        training += time.perf_counter() - tick
        done += 1
        if log_every and step % log_every == 0:
            print("worker %d epoch %d step %d/%d loss %.4f" % (job.rank, epoch, step, total, loss.item()), flush=True)
        if step % per_epoch == 0 and job.rank == 0:
            if step == total and job.num_workers > 1 and job.flag("final_eval_after_all", bool, False):
                # async and ssp: the others may still be pushing; evaluate
                # the servers' weights once every worker has finished.
                await_other_workers(job)
                worker._pull_all()  # the dense weights as they are now (the forward hooks wait for them)
            auc, log_loss = evaluate(model, test)
            print("epoch %d done: test AUC %.4f log loss %.4f" % (epoch, auc, log_loss), flush=True)
    seconds = time.perf_counter() - start
    worker.close()  # waits for this rank's pushes: its summary file means they are applied
    if job.rank == 0:
        dump_dense(model, job.flag("dump_dense", str, args.dump_dense))
    summary = {"test_auc": auc, "test_log_loss": log_loss, "steps": done, "wall_seconds": seconds,
               "samples": done * batch, "training_seconds": training,
               "samples_per_second": done * batch / max(training, 1e-9), "worker": "python",
               "hash_embeddings": hashed, "device": str(device)}
    if phases is not None:
        summary["phase_seconds"] = phases.report(training)
    write_summary(summary, job.summary_json)


def await_other_workers(job, timeout=600.0):
    """Waits for the other ranks' summary files (ps_launch's summary-<rank>.json
    beside this rank's), which each writes after its last push is applied."""
    path = job.summary_json or ""
    if not path.endswith("-%d.json" % job.rank):
        print("ctr: no summary-<rank>.json to wait for; evaluating now", flush=True)
        return
    others = [path[:-len("-%d.json" % job.rank)] + "-%d.json" % r for r in range(job.num_workers) if r != job.rank]
    deadline, tick = time.monotonic() + timeout, time.perf_counter()
    while any(not os.path.exists(p) for p in others) and time.monotonic() < deadline:
        time.sleep(0.05)
    print("ctr: waited %.2f s for the other workers before the final evaluation" % (time.perf_counter() - tick),
          flush=True)


class PhaseTimes:
    """Seconds the training loop spends inside the client's calls (pulls of
    rows, which block the forward; waits for pushes and pulls in flight;
    starting pushes), by wrapping the Client's methods: where a worker's step
    goes besides the model's own compute."""

    def __init__(self, client):
        import shardps.client as sc
        self.seconds = {}
        for name in ("pull_rows", "push_rows_async", "push_rows_many_async", "pull_rows_many_async", "push_then_pull",
                     "pull_async"):
            setattr(client, name, self._timed(name, getattr(client, name)))
        sc.Call.wait = self._timed("wait", sc.Call.wait)

    def _timed(self, name, fn):
        def timed(*a, **k):
            tick = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - tick
        return timed

    def report(self, training):
        out = {k: round(v, 3) for k, v in self.seconds.items()}
        out["training"] = round(training, 3)
        out["rest (model compute, hooks, copies)"] = round(training - sum(self.seconds.values()), 3)
        return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--local", action="store_true", help="train in this process with torch.optim.Adagrad")
    ap.add_argument("--data", default="", help="training TSV (Criteo format)")
    ap.add_argument("--test_data", default="", help="test TSV")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch_size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.05, help="Adagrad's learning rate (--local)")
    ap.add_argument("--row_lr", type=float, default=0.0, help="--local: the tables' learning rate (0: --lr)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=16, help="embedding and bottom-MLP output size")
    ap.add_argument("--hash_size", type=int, default=10 ** 6, help="rows per field's table (ids modulo it)")
    ap.add_argument("--log_every", type=int, default=100, help="steps between progress lines (0: none)")
    ap.add_argument("--hash_embeddings", action="store_true", help="shardps.torch.HashEmbeddingBag tables")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto (a job's --device flag)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (--local; 0: torch's default)")
    ap.add_argument("--row_init", choices=("server", "torch"), default="server",
                    help="--local: rows start as a ShardPS server's would (server) or from torch's generator")
    ap.add_argument("--init_scale", type=float, default=0.05,
                    help="--local: rows uniform in [-s, s] (a job's --row_init_scale)")
    ap.add_argument("--summary_json", default="", help="also write the summary here (--local)")
    ap.add_argument("--max_steps", type=int, default=0, help="stop after this many steps (0: the epochs')")
    ap.add_argument("--dump_dense", default="", help="save the MLPs' final parameters here (torch.save)")
    return ap.parse_args(argv)


def main():
    args = parse_args()
    if args.local:
        if args.threads:
            torch.set_num_threads(args.threads)
        train_local(args)
    else:
        train_worker(args)


if __name__ == "__main__":
    main()
