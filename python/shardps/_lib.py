"""Finding and loading libshardps.so, and turning its results into exceptions.

The library is looked for, in order: $SHARDPS_LIB; lib/libshardps.so of a
bundle this package sits in (bundle/python/shardps); the bazel-bin of the
source tree it sits in. Nothing is compiled on the user's machine.
"""
import ctypes
import os

SHARDPS_OK = 0
SHARDPS_ERROR = -1
SHARDPS_REJOIN = -2


class ShardpsError(Exception):
    """An error from ShardPS, with the message and code (gRPC's numbers) of its C API."""

    def __init__(self, message, code=0):
        super().__init__(message)
        self.code = code


class RejoinError(ShardpsError):
    """The job asked this worker to line up again (a server restarted, the job
    was rewound, or this worker was declared dead). The client has registered
    again; training continues at `step`."""

    def __init__(self, message, step):
        super().__init__(message, code=10)
        self.step = step


def _candidates():
    if os.environ.get("SHARDPS_LIB"):
        yield os.environ["SHARDPS_LIB"]
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    yield os.path.join(root, "lib", "libshardps.so")  # a bundle: bundle/python/shardps
    yield os.path.join(root, "bazel-bin", "client", "libshardps.so")  # a source tree


def _load():
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            return ctypes.CDLL(path)
        tried.append(path)
    raise ShardpsError("libshardps.so not found (tried %s); set SHARDPS_LIB or run "
                       "`bazel build //client:libshardps.so`" % ", ".join(tried))


_LIB = None


def lib():
    """The loaded library, with its functions' argument and result types."""
    global _LIB
    if _LIB is None:
        _LIB = _load()
        _declare(_LIB)
    return _LIB


class TableStruct(ctypes.Structure):
    """ShardpsTable of client/c_api.h."""
    _fields_ = [("name", ctypes.c_char_p), ("dim", ctypes.c_int32), ("vocab", ctypes.c_int64),
                ("init_scale", ctypes.c_float), ("optimizer", ctypes.c_char_p), ("lr", ctypes.c_float),
                ("seed", ctypes.c_uint64)]


def _declare(L):
    c_int_p = ctypes.POINTER(ctypes.c_int)
    i64_p = ctypes.POINTER(ctypes.c_int64)
    fp_p = ctypes.POINTER(ctypes.c_void_p)
    vp = ctypes.c_void_p
    sig = {
        "ShardpsLastError": ([], ctypes.c_char_p),
        "ShardpsLastErrorCode": ([], ctypes.c_int),
        "ShardpsVersion": ([c_int_p, c_int_p], ctypes.c_int),
        "ShardpsClientCreate": ([ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), c_int_p, i64_p,
                                 ctypes.POINTER(vp)], ctypes.c_int),
        "ShardpsClientCreateWithTables": ([ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), c_int_p,
                                           i64_p, ctypes.c_int, ctypes.POINTER(TableStruct), ctypes.POINTER(vp)],
                                          ctypes.c_int),
        "ShardpsClientFree": ([vp], ctypes.c_int),
        "ShardpsTensorIndex": ([vp, ctypes.c_char_p, c_int_p], ctypes.c_int),
        "ShardpsTensorSize": ([vp, ctypes.c_int, i64_p], ctypes.c_int),
        "ShardpsClientRegister": ([vp, i64_p], ctypes.c_int),
        "ShardpsClientInit": ([vp, fp_p, c_int_p], ctypes.c_int),
        "ShardpsPush": ([vp, ctypes.c_int64, ctypes.c_int, c_int_p, fp_p], ctypes.c_int),
        "ShardpsPull": ([vp, ctypes.c_int64, ctypes.c_int, c_int_p, fp_p], ctypes.c_int),
        "ShardpsPushAsync": ([vp, ctypes.c_int64, ctypes.c_int, c_int_p, fp_p, ctypes.POINTER(vp)], ctypes.c_int),
        "ShardpsPullAsync": ([vp, ctypes.c_int64, ctypes.c_int, c_int_p, fp_p, ctypes.POINTER(vp)], ctypes.c_int),
        "ShardpsPushThenPull": ([vp, ctypes.c_int64, ctypes.c_int, c_int_p, fp_p, fp_p, ctypes.POINTER(vp),
                                 ctypes.POINTER(vp)], ctypes.c_int),
        "ShardpsPushRowsAsync": ([vp, ctypes.c_int64, ctypes.c_int, ctypes.c_int64, vp, vp, ctypes.POINTER(vp)],
                                 ctypes.c_int),
        "ShardpsPullRowsAsync": ([vp, ctypes.c_int64, ctypes.c_int, ctypes.c_int64, vp, vp, ctypes.POINTER(vp)],
                                 ctypes.c_int),
        "ShardpsPushRowsManyAsync": ([vp, ctypes.c_int64, ctypes.c_int, c_int_p, i64_p, fp_p, fp_p,
                                      ctypes.POINTER(vp)], ctypes.c_int),
        "ShardpsPullRowsManyAsync": ([vp, ctypes.c_int64, ctypes.c_int, c_int_p, i64_p, fp_p, fp_p,
                                      ctypes.POINTER(vp)], ctypes.c_int),
        "ShardpsCallWait": ([vp, ctypes.c_double, c_int_p], ctypes.c_int),
        "ShardpsCallFree": ([vp], ctypes.c_int),
        "ShardpsClientStats": ([vp, i64_p, i64_p, i64_p], ctypes.c_int),
    }
    for name, (args, res) in sig.items():
        f = getattr(L, name)
        f.argtypes = args
        f.restype = res


def last_error():
    L = lib()
    return L.ShardpsLastError().decode("utf-8", "replace"), L.ShardpsLastErrorCode()


def check(rc, rejoin=None):
    """Raises for a failed call: ShardpsError with the library's message, or,
    for SHARDPS_REJOIN, RejoinError from `rejoin(message)` (which registers
    again and returns the error)."""
    if rc == SHARDPS_OK:
        return
    message, code = last_error()
    if rc == SHARDPS_REJOIN and rejoin is not None:
        raise rejoin(message)
    raise ShardpsError(message, code)
