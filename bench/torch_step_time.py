#!/usr/bin/env python3
"""PyTorch eager peer of step_time: the same models, batch and step.

A step copies the batch in from host memory, runs forward, the softmax
cross-entropy loss and backward (no optimizer), like bench/step_time.
Prints lines in step_time's format with device=torch-<device>.
"""
import argparse
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("torch_step_time: PyTorch is not installed here", file=sys.stderr)
    sys.exit(3)


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    raise SystemExit(f"unknown model {name}")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_model(name, batch, device, steps, warmup):
    model = make_model(name).to(device)
    images = torch.rand(batch, 1, 28, 28)
    labels = torch.arange(batch) % 10
    if device.type == "cuda":
        images, labels = images.pin_memory(), labels.pin_memory()

    def step():
        for p in model.parameters():
            p.grad = None
        x = images.to(device, non_blocking=True)
        y = labels.to(device, non_blocking=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    for _ in range(warmup):
        step()
    sync(device)
    per_round = max(1, steps // 5)
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(per_round):
            step()
        sync(device)
        rounds.append((time.perf_counter() - start) * 1000 / per_round)
    return statistics.median(rounds)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--batches", default="64,512")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--tf32", action="store_true")
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    for name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            ms = time_model(name, batch, device, args.steps, args.warmup)
            print(f"step_time device=torch-{args.device} model={name} batch={batch} ms_per_step={ms:.4f} "
                  f"samples_per_s={batch * 1000 / ms:.0f}", flush=True)


if __name__ == "__main__":
    main()
