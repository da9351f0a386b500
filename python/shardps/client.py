"""A ShardPS worker's connection to its job: pushes and pulls of named tensors.

Values are NumPy arrays or PyTorch tensors shaped as the layout says, of a
floating dtype. Float32 C-order arrays and contiguous float32 CPU tensors go
to the library by pointer, without a copy; other floating dtypes are
converted once (and pulled values converted back); CUDA tensors are staged
through pinned host memory.
"""
import ctypes
import threading
import time

from shardps import _lib
from shardps._buffers import _Buffer, _Rows
from shardps._lib import RejoinError, ShardpsError


class Call:
    """A push or pull in flight. `wait()` returns when it completed and
    raises its error (RejoinError when the job asks to line up again); the
    values it reads or writes must stay untouched until then."""

    def __init__(self, client, handle, buffers):
        self._client, self._handle, self._buffers = client, handle, buffers
        self._result = None
        self._polling = threading.Lock()  # one thread waits in the library; the others wait for it
        self._rejoined_at = None  # the step the client registered again at, once, for a rejoin answer

    def done(self):
        if self._result is None and self._polling.acquire(blocking=False):
            try:
                if self._result is None:
                    self._poll(0.0)
            finally:
                self._polling.release()
        return self._result is not None

    def wait(self, timeout=None, rejoin=True):
        """Waits up to `timeout` seconds (None: as long as it takes); True
        when it completed. A call the job refused for a rejoin raises
        RejoinError after registering again (with `rejoin`), else ShardpsError."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
        if self._result is None:
            if not self._polling.acquire(timeout=-1 if deadline is None else max(0.0, deadline - time.monotonic())):
                return False
            try:
                if self._result is None:  # another thread's wait may have ended it
                    self._poll(-1.0 if deadline is None else max(0.0, deadline - time.monotonic()))
            finally:
                self._polling.release()
        if self._result is None:
            return False
        rc, message, code = self._result
        if rc == _lib.SHARDPS_REJOIN and rejoin:
            # Several threads waiting on this call register again once: a
            # second registration would replace the session the first
            # thread's lining up already uses.
            with self._polling:
                if self._rejoined_at is None:
                    self._rejoined_at = self._client._rejoin(message).step
            raise RejoinError(message, self._rejoined_at)
        if rc != _lib.SHARDPS_OK:
            raise ShardpsError(message, code)
        return True

    def _poll(self, timeout):
        done = ctypes.c_int(0)
        rc = _lib.lib().ShardpsCallWait(self._handle, timeout, ctypes.byref(done))
        if done.value:
            message, code = _lib.last_error() if rc != _lib.SHARDPS_OK else ("", 0)
            if rc == _lib.SHARDPS_OK:
                for b in self._buffers:
                    b.finish()
            self._free()
            self._result = (rc, message, code)  # last: done() reads it without the lock

    def _free(self):
        if self._handle:
            _lib.lib().ShardpsCallFree(self._handle)  # waits for the call first
            self._handle = None
            self._buffers = []

    def __del__(self):
        try:
            self._free()
        except Exception:  # interpreter shutdown
            pass


class Table:
    """A sparse table of the layout: rows of `dim` floats named by int64 ids,
    created on the servers at first touch (uniform in [-init_scale,
    init_scale], a function of (name, id, seed) only). `vocab` 0 takes any
    id; otherwise ids are in [0, vocab). The servers update rows with
    `optimizer` ("sgd", "adagrad", "rowwise_adagrad", "lazy_adam") at `lr`."""

    def __init__(self, name, dim, vocab=0, init_scale=0.01, optimizer="rowwise_adagrad", lr=0.01, seed=0):
        self.name, self.dim, self.vocab = str(name), int(dim), int(vocab)
        self.init_scale, self.optimizer, self.lr, self.seed = float(init_scale), str(optimizer), float(lr), int(seed)

    def __repr__(self):
        return "Table(%r, dim=%d, vocab=%d, optimizer=%r, lr=%g)" % (self.name, self.dim, self.vocab, self.optimizer,
                                                                    self.lr)


class Client:
    """A connection to a ShardPS job for a layout of named float32 tensors.

    `config`: the client options as `--name=value` words (see
    shardps.init_from_env for the usual way). `layout`: (name, shape) pairs,
    the same on every worker. `tables`: the sparse tables beside them
    (shardps.Table), named in row calls by name or index.
    """

    def __init__(self, config, layout, tables=()):
        self.layout = [(str(n), tuple(int(d) for d in s)) for n, s in layout]
        self.index = {n: i for i, (n, _) in enumerate(self.layout)}
        if len(self.index) != len(self.layout):
            raise ValueError("the layout names a tensor twice")
        names = (ctypes.c_char_p * len(self.layout))(*[n.encode() for n, _ in self.layout])
        wire = [s or (1,) for _, s in self.layout]  # a scalar travels as one element
        ndims = (ctypes.c_int * len(wire))(*[len(s) for s in wire])
        flat = [d for s in wire for d in s]
        dims = (ctypes.c_int64 * max(1, len(flat)))(*flat)
        self.tables = list(tables)
        self.table_index = {t.name: i for i, t in enumerate(self.tables)}
        specs = (_lib.TableStruct * max(1, len(self.tables)))(*[
            _lib.TableStruct(t.name.encode(), t.dim, t.vocab, t.init_scale, t.optimizer.encode(), t.lr, t.seed)
            for t in self.tables])
        self._state = threading.Condition()  # guards _handle and _calls_in
        self._calls_in = 0  # calls into the library on this client, from any thread
        self._handle = None
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib().ShardpsClientCreateWithTables(config.encode(), len(self.layout), names, ndims, dims,
                                                            len(self.tables), specs, ctypes.byref(handle)))
        self._handle = handle

    # Joining ---------------------------------------------------------------
    def register(self):
        """Joins the job; returns the step to continue at."""
        step = ctypes.c_int64(0)
        _lib.check(self._c("ShardpsClientRegister", ctypes.byref(step)))
        return step.value

    def init(self, values):
        """Sends every tensor's initial values ({name: array}); the first
        worker's win. True when these were."""
        bufs = self._buffers(values, pulled=False, every=True)
        ptrs = (ctypes.c_void_p * len(bufs))(*[b.pointer for _, b in bufs])
        applied = ctypes.c_int(0)
        _lib.check(self._c("ShardpsClientInit", ptrs, ctypes.byref(applied)), self._rejoin)
        return bool(applied.value)

    # Transfers -------------------------------------------------------------
    def push(self, step, grads):
        self.push_async(step, grads).wait()

    def pull(self, step, out):
        self.pull_async(step, out).wait()

    def push_async(self, step, grads):
        return self._start("ShardpsPushAsync", step, grads, pulled=False)

    def pull_async(self, step, out):
        return self._start("ShardpsPullAsync", step, out, pulled=True)

    def push_then_pull(self, step, grads, out):
        """Pushes `grads` for `step` and pulls the same tensors for step + 1
        into `out` ({name: array}, the same names); returns (push, pull)."""
        if set(grads) != set(out):
            raise ValueError("push_then_pull: grads and out name different tensors")
        g = self._buffers(grads, pulled=False)
        o = self._buffers({self.layout[i][0]: out[self.layout[i][0]] for i, _ in g}, pulled=True)
        idx = (ctypes.c_int * len(g))(*[i for i, _ in g])
        gp = (ctypes.c_void_p * len(g))(*[b.pointer for _, b in g])
        op = (ctypes.c_void_p * len(o))(*[b.pointer for _, b in o])
        pushed, pulled = ctypes.c_void_p(), ctypes.c_void_p()
        _lib.check(self._c("ShardpsPushThenPull", int(step), len(g), idx, gp, op, ctypes.byref(pushed),
                                                  ctypes.byref(pulled)), self._rejoin)
        return Call(self, pushed, [b for _, b in g]), Call(self, pulled, [b for _, b in o])

    # Sparse tables --------------------------------------------------------
    def push_rows_async(self, step, table, ids, grads):
        """Pushes row gradients (n x dim) of `ids` (n int64) for `step`;
        repeated ids are summed before they leave."""
        t = self._table(table)
        rows = _Rows(ids, grads, self.tables[t].dim, pulled=False)
        return self._rows_call("ShardpsPushRowsAsync", step, t, rows)

    def pull_rows_async(self, step, table, ids, out):
        """Pulls the rows of `ids` for `step` into `out` (n x dim float32)."""
        t = self._table(table)
        rows = _Rows(ids, out, self.tables[t].dim, pulled=True)
        return self._rows_call("ShardpsPullRowsAsync", step, t, rows)

    def push_rows_many_async(self, step, transfers):
        """Pushes several tables' row gradients for `step` as one call:
        `transfers` lists (table, ids, grads). Each is checked before any
        leaves; the call completes when all have."""
        return self._rows_many("ShardpsPushRowsManyAsync", step, transfers, pulled=False)

    def pull_rows_many_async(self, step, transfers):
        """Pulls several tables' rows for `step` as one call: `transfers`
        lists (table, ids, out)."""
        return self._rows_many("ShardpsPullRowsManyAsync", step, transfers, pulled=True)

    def push_rows(self, step, table, ids, grads):
        self.push_rows_async(step, table, ids, grads).wait()

    def pull_rows(self, step, table, ids, out):
        self.pull_rows_async(step, table, ids, out).wait()

    def stats(self):
        r, g, w = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
        _lib.check(self._c("ShardpsClientStats", ctypes.byref(r), ctypes.byref(g), ctypes.byref(w)))
        return {"retries": r.value, "registrations": g.value, "rewinds": w.value}

    def close(self):
        """Finishes or cancels the pushes and pulls in flight and frees the
        client. From any thread: it first waits for other threads' calls
        into the library on this client to return (a register() or init()
        retrying a server that is down may take up to --server_timeout), and
        a second close does nothing."""
        state = getattr(self, "_state", None)
        if state is None:  # __init__ failed before the client existed
            return
        with state:
            handle, self._handle = self._handle, None
            while self._calls_in:
                state.wait()
        if handle:
            _lib.lib().ShardpsClientFree(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    # Inside ----------------------------------------------------------------
    def _c(self, function, *args):
        """The library's `function` on this client's handle with `args`;
        close() waits until it returns (ctypes lets other threads run
        meanwhile), so the handle is never freed under it."""
        counted = False
        try:
            # Counted inside the try: an interrupt (Ctrl-C) between the count
            # and the call would otherwise leave close() waiting for good.
            with self._state:
                if not self._handle:
                    raise ShardpsError("the client is closed")
                handle = self._handle
                self._calls_in += 1
                counted = True
            return getattr(_lib.lib(), function)(handle, *args)
        finally:
            if counted:
                with self._state:
                    self._calls_in -= 1
                    if self._calls_in == 0:
                        self._state.notify_all()

    def _rejoin(self, message):
        return RejoinError(message, self.register())

    def _table(self, table):
        if isinstance(table, str):
            if table not in self.table_index:
                raise KeyError("no table named '%s' in the layout" % table)
            return self.table_index[table]
        if not 0 <= int(table) < len(self.tables):
            raise KeyError("table index %s is not in the layout of %d tables" % (table, len(self.tables)))
        return int(table)

    def _rows_call(self, function, step, table, rows):
        handle = ctypes.c_void_p()
        _lib.check(self._c(function, int(step), table, rows.n, rows.ids_address,
                                                 rows.rows_address, ctypes.byref(handle)), self._rejoin)
        return Call(self, handle, [rows])

    def _rows_many(self, function, step, transfers, pulled):
        tables, rows = [], []
        for table, ids, values in transfers:
            t = self._table(table)
            tables.append(t)
            rows.append(_Rows(ids, values, self.tables[t].dim, pulled=pulled))
        count = len(rows)
        handle = ctypes.c_void_p()
        _lib.check(self._c(
            function, int(step), count, (ctypes.c_int * max(1, count))(*tables),
            (ctypes.c_int64 * max(1, count))(*[r.n for r in rows]),
            (ctypes.c_void_p * max(1, count))(*[r.ids_address for r in rows]),
            (ctypes.c_void_p * max(1, count))(*[r.rows_address for r in rows]), ctypes.byref(handle)), self._rejoin)
        return Call(self, handle, rows)

    def _buffers(self, values, pulled, every=False):
        if not isinstance(values, dict):
            raise TypeError("want a dict of tensor name to array, got %s" % type(values).__name__)
        if not values:
            raise ValueError("no tensors given")
        out = []
        for name, value in values.items():
            if name not in self.index:
                raise KeyError("no tensor named '%s' in the layout" % name)
            i = self.index[name]
            out.append((i, _Buffer(value, self.layout[i][1], name, pulled)))
        if every and len(out) != len(self.layout):
            missing = sorted(set(self.index) - set(values))
            raise ValueError("initial values lack %s" % ", ".join(missing))
        out.sort(key=lambda ib: ib[0])
        return out

    def _start(self, function, step, values, pulled):
        bufs = self._buffers(values, pulled)
        idx = (ctypes.c_int * len(bufs))(*[i for i, _ in bufs])
        ptrs = (ctypes.c_void_p * len(bufs))(*[b.pointer for _, b in bufs])
        handle = ctypes.c_void_p()
        _lib.check(self._c(function, int(step), len(bufs), idx, ptrs, ctypes.byref(handle)),
                   self._rejoin)
        return Call(self, handle, [b for _, b in bufs])
