"""cuda_library: compiles .cu files with nvcc from /usr/local/cuda.

Each .cu file becomes one position-independent object with code for sm_80 and
sm_90 (and PTX for sm_90, so newer GPUs can JIT it), compiled by a genrule;
the objects form a cc_library linked against cudart.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

NVCC_FLAGS = " ".join([
    "-std=c++17",
    "-O3",
    "-Xcompiler -fPIC",
    "-I.",
    "-isystem /usr/local/cuda/include",
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
])

def cuda_library(name, srcs, hdrs = [], deps = [], **kwargs):
    objects = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".pic.o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs,
            outs = [obj],
            # nvcc names its temporary files by process id, and sandboxed
            # actions all run as pid 2: each gets its own TMPDIR.
            cmd = "t=$$(mktemp -d) && TMPDIR=$$t %s %s -c $(location %s) -o $@; r=$$?; rm -rf $$t; exit $$r" % (
                NVCC,
                NVCC_FLAGS,
                src,
            ),
            message = "nvcc " + src,
        )
        objects.append(obj)
    native.cc_library(
        name = name,
        srcs = objects,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        **kwargs
    )
