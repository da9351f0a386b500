#!/usr/bin/env python3
"""Plain single-process PyTorch training: the peer of a 1 x 1 ShardPS job.

The same model (mlp or cnn), the same Fashion-MNIST files, the same recipe as
deploy/job_recipe (SGD with momentum, cosine schedule over the job's steps,
PyTorch's default initialisation, which ShardPS copies), a test evaluation
after every epoch as ShardPS's rank 0 does. The whole data set sits on the
device, so nothing but the model's work is timed. Prints one line:

  torch_train device=cuda model=mlp batch=128 epochs=10 train_seconds=5.74 test_accuracy=0.8874
"""
import argparse
import gzip
import math
import struct
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_train: PyTorch is not installed here", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from torch_step_time import make_model  # noqa: E402  (the same models as the step-time peer)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load(data_dir, split, device):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz").float().div_(255).unsqueeze(1)
    labels = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz").long()
    return images.to(device), labels.to(device)


def evaluate(model, images, labels, batch):
    right = 0
    with torch.no_grad():
        for i in range(0, len(images), batch):
            right += (model(images[i:i + batch]).argmax(1) == labels[i:i + batch]).sum()
    return right.item() / len(images)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch_size", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.04)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    train_x, train_y = load(args.data_dir, "train", device)
    test_x, test_y = load(args.data_dir, "test", device)
    model = make_model(args.model).to(device)
    steps_per_epoch = len(train_x) // args.batch_size
    total = steps_per_epoch * args.epochs
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 0.5 * (1 + math.cos(math.pi * min(t, total) / total)))
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    accuracy = 0.0
    for epoch in range(args.epochs):
        order = torch.randperm(len(train_x), device=device)
        for s in range(steps_per_epoch):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        accuracy = evaluate(model, test_x, test_y, args.batch_size)
        print(f"epoch {epoch} test accuracy {accuracy:.4f}", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    print(f"torch_train device={args.device} model={args.model} batch={args.batch_size} epochs={args.epochs} "
          f"train_seconds={seconds:.3f} test_accuracy={accuracy:.4f}", flush=True)


if __name__ == "__main__":
    main()
