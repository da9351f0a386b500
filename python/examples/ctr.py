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
hash_embeddings, whose defaults are the script's own --flags):

    deploy/ps_launch --script=python/examples/ctr.py --servers=2 --workers=2 \\
        --optimizer=adagrad --lr=0.05 --row_lr=0.05 --data=train.tsv --test_data=test.tsv

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

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        if self.hash_size is not None:
            sparse = torch.remainder(sparse, self.hash_size)
        vectors = [x] + [bag(sparse[:, f:f + 1]) for f, bag in enumerate(self.bags)]
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
        nn.init.uniform_(bag.weight, -0.05, 0.05)
    return DLRM(dim, bags, hash_size)


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
    tables = [p for n, p in model.named_parameters() if n.startswith("bags.")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("bags.")]
    # Two optimizers: Adagrad handles sparse gradients per tensor, but its
    # multi-tensor path (the default on some versions) refuses them.
    optimizers = [torch.optim.Adagrad(tables, lr=args.lr), torch.optim.Adagrad(rest, lr=args.lr)]
    per_epoch = steps_per_epoch(len(train[0]), args.batch_size)
    total, step, auc, loss_sum = per_epoch * args.epochs, 0, float("nan"), 0.0
    log_loss, training = float("nan"), 0.0
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = epoch_order(len(train[0]), args.seed, epoch)
        tick = time.perf_counter()
        for i in range(per_epoch):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
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
    write_summary({"test_auc": auc, "test_log_loss": log_loss, "steps": step, "wall_seconds": seconds,
                   "samples_per_second": step * args.batch_size / max(training, 1e-9), "worker": "torch-local"},
                  args.summary_json)


def worker_step(model, worker, train, idx):
    """One step's forward and backward; the Worker pushes as gradients appear."""
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
    torch.set_num_threads(job.flag("blas_threads", int, 1))
    train = load(data, "data")
    test = load(test_data, "test_data") if job.rank == 0 else None
    torch.manual_seed(seed)
    model = make_model(dim, hash_size, hashed)

    worker = shardps.torch.Worker(model, job)
    share = len(train[0]) // job.num_workers
    per_epoch = steps_per_epoch(share, batch)
    total = per_epoch * epochs
    step = worker.start()
    start, training, done, auc, log_loss, order_of = time.perf_counter(), 0.0, 0, float("nan"), float("nan"), {}
    while step < total:
        epoch, i = divmod(step, per_epoch)
        if epoch not in order_of:
            order_of = {epoch: epoch_order(len(train[0]), seed, epoch)}
        first = job.rank * share + i * batch
        idx = order_of[epoch][first:first + batch]
        tick = time.perf_counter()
        try:
            step, loss = worker_step(model, worker, train, idx)
        except shardps.RejoinError as e:  # the job rewound after a server restart
            print("worker %d: rejoined the job at step %d (was at %d)" % (job.rank, e.step, step), flush=True)
            step = e.step
            continue
        training += time.perf_counter() - tick
        done += 1
        if log_every and step % log_every == 0:
            print("worker %d epoch %d step %d/%d loss %.4f" % (job.rank, epoch, step, total, loss.item()), flush=True)
        if step % per_epoch == 0 and job.rank == 0:
            auc, log_loss = evaluate(model, test)
            print("epoch %d done: test AUC %.4f log loss %.4f" % (epoch, auc, log_loss), flush=True)
    seconds = time.perf_counter() - start
    worker.close()
    write_summary({"test_auc": auc, "test_log_loss": log_loss, "steps": done, "wall_seconds": seconds,
                   "samples_per_second": done * batch / max(training, 1e-9), "worker": "python",
                   "hash_embeddings": hashed}, job.summary_json)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--local", action="store_true", help="train in this process with torch.optim.Adagrad")
    ap.add_argument("--data", default="", help="training TSV (Criteo format)")
    ap.add_argument("--test_data", default="", help="test TSV")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch_size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.05, help="Adagrad's learning rate (--local)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dim", type=int, default=16, help="embedding and bottom-MLP output size")
    ap.add_argument("--hash_size", type=int, default=10 ** 6, help="rows per field's table (ids modulo it)")
    ap.add_argument("--log_every", type=int, default=100, help="steps between progress lines (0: none)")
    ap.add_argument("--hash_embeddings", action="store_true", help="shardps.torch.HashEmbeddingBag tables")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (--local; 0: torch's default)")
    ap.add_argument("--summary_json", default="", help="also write the summary here (--local)")
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
