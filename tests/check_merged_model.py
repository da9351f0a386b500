"""Checks a model merged by shardps_ckpt against the shard checkpoints it came from,
with Python's safetensors package (as another framework would load it).

    check_merged_model.py MODEL.safetensors CHECKPOINT_DIR STEP SHAPES

SHAPES: "name=d1xd2,name2=d3" the layout's tensors and shapes, in order.
Prints one line per check; exits 1 at the first that fails.
"""
import glob
import os
import re
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


def main():
    model_path, checkpoint_dir, step, shapes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    model = load_file(model_path)
    with safe_open(model_path, framework="numpy") as f:
        metadata = f.metadata()
    if metadata.get("step") != str(step):
        fail(f"metadata step is {metadata.get('step')}, want {step}")
    expected = [(name, tuple(int(d) for d in dims.split("x"))) for name, dims in
                (item.split("=") for item in shapes.split(","))]
    if sorted(model) != sorted(name for name, _ in expected):
        fail(f"tensors {sorted(model)}, want {[name for name, _ in expected]}")
    for name, shape in expected:
        if model[name].dtype != np.float32 or model[name].shape != shape:
            fail(f"{name} is {model[name].dtype} {model[name].shape}, want float32 {shape}")
    print(f"ok: {len(model)} tensors with the layout's names and shapes, float32, step {step} in the metadata")

    covered = {name: np.zeros(model[name].size, dtype=bool) for name in model}
    shards = sorted(glob.glob(os.path.join(checkpoint_dir, f"shard-*-of-*-step-{step}.safetensors")))
    if not shards:
        fail(f"no shards of step {step} in {checkpoint_dir}")
    for shard_path in shards:
        with safe_open(shard_path, framework="numpy") as f:
            chunk_values = int(f.metadata()["partition_bytes"]) // 4
            for key in f.keys():
                match = re.fullmatch(r"(.+)/(\d+)", key)
                if not match:  # optimizer slots are "<tensor>/<chunk>/slot<i>"
                    continue
                name, chunk = match.group(1), int(match.group(2))
                values = f.get_tensor(key)
                first = chunk * chunk_values
                merged = model[name].reshape(-1)[first:first + values.size]
                if not np.array_equal(merged, values):
                    fail(f"{name} chunk {chunk} from {os.path.basename(shard_path)} differs")
                covered[name][first:first + values.size] = True
    for name, done in covered.items():
        if not done.all():
            fail(f"{name}: {int((~done).sum())} values come from no shard")
    print(f"ok: every value of every tensor equals its chunk in the {len(shards)} shards")


if __name__ == "__main__":
    main()
