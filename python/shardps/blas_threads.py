"""The OpenBLAS thread count of a worker process.

PyTorch built against the system's OpenBLAS (Debian's python3-torch) runs
its matrix products there, and torch.set_num_threads() does not reach that
library's own thread pool: one thread per core, which spin in sched_yield
between products. Beside a server and the client's transfer threads on the
same cores, that spinning took about 40 % of a 2-core machine's CPU in a CTR
worker. shardps.torch.Worker applies the job's --blas_threads (default 1,
as ps_worker's) here.
"""
import ctypes
import os


def openblas_libraries():
    """Paths of the OpenBLAS libraries this process has loaded."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.basename(p).startswith("libopenblas"))


def set_openblas_threads(threads):
    """Sets every loaded OpenBLAS to `threads` threads (0: leave it as it
    is). Returns the libraries set."""
    if threads <= 0:
        return []
    done = []
    for path in openblas_libraries():
        try:
            lib = ctypes.CDLL(path)  # the loaded library's handle, not a second copy
            lib.openblas_set_num_threads(ctypes.c_int(int(threads)))
        except (OSError, AttributeError):
            continue
        done.append(path)
    return done


def openblas_threads():
    """{path: threads} of the loaded OpenBLAS libraries."""
    out = {}
    for path in openblas_libraries():
        try:
            lib = ctypes.CDLL(path)
            out[path] = lib.openblas_get_num_threads()
        except (OSError, AttributeError):
            continue
    return out
