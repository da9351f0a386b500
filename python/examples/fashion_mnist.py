#!/usr/bin/env python3
"""Fashion-MNIST with plain PyTorch, trained as workers of a ShardPS job:

    deploy/ps_launch --script=python/examples/fashion_mnist.py --servers=2 --workers=2 --model=cnn --epochs=3

The model is the same as ps_worker's (--model=cnn or mlp); the job's flags
give the epochs, batch size, data and threads as they do for ps_worker, and
the mode, optimizer and schedule run on the servers. The lines marked
"ShardPS" are all it takes; the rest is an ordinary PyTorch loop without an
optimizer.
"""
import gzip
import json
import os
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import shardps  # ShardPS
import shardps.torch  # ShardPS


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = struct.unpack(">I", data[:4])[0] & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load(data_dir, prefix, device):
    x = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz").float().div_(255).unsqueeze(1)
    y = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz").long()
    return x.to(device), y.to(device)


def evaluate(model, x, y, batch):
    model.eval()
    with torch.no_grad():
        right = sum((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item() for i in range(0, len(x), batch))
    model.train()
    return right / len(x)


def main():
    job = shardps.init_from_env()  # ShardPS
    batch, epochs = job.flag("batch_size", int, 64), job.flag("epochs", int, 1)
    seed, log_every = job.flag("seed", int, 1), job.flag("log_every", int, 100)
    torch.set_num_threads(job.flag("blas_threads", int, 1))
    device = torch.device("cuda" if job.flag("device", str, "auto") != "cpu" and torch.cuda.is_available() else "cpu")
    data_dir = job.flag("data_dir", str, "/usr/share/datasets/fashion-mnist")
    train_x, train_y = load(data_dir, "train", device)
    test_x, test_y = load(data_dir, "t10k", device)
    torch.manual_seed(seed)
    model = make_model(job.flag("model", str, "cnn")).to(device)

    worker = shardps.torch.Worker(model, job)  # ShardPS
    share = len(train_x) // job.num_workers
    per_epoch = share // batch
    if job.flag("max_steps_per_epoch", int, 0) > 0:
        per_epoch = min(per_epoch, job.flag("max_steps_per_epoch", int, 0))
    total = per_epoch * epochs
    step = worker.start()  # ShardPS
    start, done, accuracy, order_of = time.perf_counter(), 0, -1.0, {}
    while step < total:
        epoch, i = divmod(step, per_epoch)
        if epoch not in order_of:  # every worker shuffles alike and takes its own share
            order_of = {epoch: torch.randperm(len(train_x), generator=torch.Generator().manual_seed(seed * 1000 + epoch))}
        order = order_of[epoch]
        idx = order[job.rank * share + i * batch:job.rank * share + (i + 1) * batch].to(device)
        try:
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            step = worker.step_done()  # ShardPS
        except shardps.RejoinError as e:  # ShardPS: the job rewound after a server restart
            print(f"worker {job.rank}: rejoined the job at step {e.step} (was at {step})", flush=True)
            step = e.step
            continue
        done += 1
        if log_every and step % log_every == 0:
            print(f"worker {job.rank} epoch {epoch} step {step}/{total} loss {loss.item():.4f}", flush=True)
        if step % per_epoch == 0 and job.rank == 0:
            accuracy = evaluate(model, test_x, test_y, 1000)
            print(f"epoch {epoch} done: test accuracy {accuracy:.4f}", flush=True)
    seconds = time.perf_counter() - start
    worker.close()
    summary = {"final_test_accuracy": accuracy, "steps": done, "wall_seconds": seconds,
               "samples_per_second": done * batch / seconds, "worker": "python"}
    print(json.dumps(summary), flush=True)
    if job.summary_json:
        with open(job.summary_json, "w") as f:
            f.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    main()
