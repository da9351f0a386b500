"""Sparse tables for shardps.torch: embedding modules whose rows live on the
servers (DESIGN.md, "Sparse tables").

- `nn.Embedding(V, d, sparse=True)` and `nn.EmbeddingBag(V, d, sparse=True)`
  work as they are. Before each forward the batch's distinct ids are pulled
  and written into the module's weight at those ids; after backward the
  sparse gradient (duplicates summed) is pushed as rows. The rest of the
  weight is never read or sent: only the batch's rows move.
- `HashEmbeddingBag(dim)` takes any int64 ids and holds no table at all:
  each forward uses a (distinct ids x dim) tensor of the pulled rows, so a
  worker's memory grows with its batch, not with the table.

The servers run the rows' optimizer; the job's flags pick it
(--row_optimizer, default adagrad as torch.optim.Adagrad; --row_lr;
--row_init_scale).
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from shardps._lib import RejoinError, ShardpsError
from shardps.client import Table


class HashEmbeddingBag(nn.Module):
    """nn.EmbeddingBag over any int64 ids, with no table on the worker. Needs
    a shardps.torch.Worker, which fills each batch's rows before forward."""

    def __init__(self, dim, mode="sum", name=None):
        super().__init__()
        if mode not in ("sum", "mean", "max"):
            raise ValueError("mode %r; want sum, mean or max" % (mode,))
        self.embedding_dim, self.mode, self.table_name = int(dim), mode, name
        self._rows = None      # the batch's distinct rows, a leaf that collects their gradient
        self._inverse = None   # the input's ids as indices into _rows

    def forward(self, input, offsets=None, per_sample_weights=None):
        if self._rows is None:
            raise RuntimeError("HashEmbeddingBag %s has no rows: it runs inside a shardps.torch.Worker, which pulls "
                               "each batch's rows before forward" % (self.table_name or ""))
        return F.embedding_bag(self._inverse.view(input.shape), self._rows, offsets, mode=self.mode,
                               per_sample_weights=per_sample_weights)


def sparse_modules(model):
    """(name, module) of every module whose rows live on the servers."""
    out = []
    for name, m in model.named_modules():
        if isinstance(m, HashEmbeddingBag) or (isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse):
            out.append((name or "embedding", m))
    return out


def table_of(name, module, job):
    """The Table a module's rows form, from the job's flags."""
    vocab = 0 if isinstance(module, HashEmbeddingBag) else module.num_embeddings
    return Table(module.table_name or name if isinstance(module, HashEmbeddingBag) else name,
                 module.embedding_dim, vocab=vocab, init_scale=job.flag("row_init_scale", float, 0.01),
                 optimizer=job.flag("row_optimizer", str, "adagrad"), lr=job.flag("row_lr", float, 0.01),
                 seed=job.flag("seed", int, 1))


class SparseTables:
    """The worker's side of its model's sparse modules: pulls before
    forward, pushes at the step's end."""

    def __init__(self, modules, client, read_your_writes=False):
        self.modules, self.client = modules, client
        # Whether a pull first waits for the last step's pushes to be
        # acknowledged (applied): async and ssp, where the server answers a
        # pull at once and could otherwise read rows without them.
        self.read_your_writes = read_your_writes
        self.on_rejoin = None  # called with the step a rejoin continues at
        # table index -> [(distinct ids, the tensor their gradient lands in)]:
        # one entry per forward of a HashEmbeddingBag (a module may run
        # several times a step), the weight's one entry for nn.Embedding(Bag).
        self.batch = {}
        self.pushes = []
        self.prefetched = {}  # table index -> (ids, distinct ids, inverse, rows, the pull in flight)

    def attach(self, step_of):
        hooks = []
        for t, (_, module) in enumerate(self.modules):
            hooks.append(module.register_forward_pre_hook(self._before_forward(t, step_of)))
        return hooks

    def prefetch(self, step, ids_by_module):
        """Starts the pulls of several tables' rows at once: {module: the ids
        its next forward will see}. Each forward then waits for its own pull
        instead of making one, so the tables' round trips overlap."""
        index = {id(m): t for t, (_, m) in enumerate(self.modules)}
        self._await_own_pushes()
        planned = []
        for module, ids in ids_by_module.items():
            t = index.get(id(module))
            if t is None:
                raise ValueError("prefetch_rows: %s is not one of this model's sparse embedding modules"
                                 % type(module).__name__)
            ids = ids.detach().reshape(-1).to("cpu", torch.int64)
            unique, inverse = _unique(ids)
            rows = torch.empty((unique.numel(), module.embedding_dim), dtype=torch.float32)
            self._forget(t)
            planned.append((t, ids, unique, inverse, rows))
        # One call for every table's pull: each forward then waits for it
        # (the pulls run side by side, so the first wait is the longest).
        call = self.client.pull_rows_many_async(step, [(t, unique, rows) for t, _, unique, _, rows in planned])
        for t, ids, unique, inverse, rows in planned:
            self.prefetched[t] = (ids, unique, inverse, rows, call)

    def _rows_for(self, t, ids, dim, step):
        """(distinct ids, inverse, rows) of `ids`: from a prefetch that named
        exactly these ids, else pulled now."""
        got = self.prefetched.pop(t, None)
        if got is not None and torch.equal(got[0], ids):
            try:
                got[4].wait()
                return got[1], got[2], got[3]
            except RejoinError as e:
                self._rejoined(e)
                raise
            except ShardpsError:
                # The prefetch's one call for every table failed: at the
                # start of a job (servers not initialised yet), or for
                # another table's ids. This table's rows are pulled again
                # below on their own, and a fault of its own rises there.
                ids = got[0]
        elif got is not None:
            quietly(got[4])
        unique, inverse = _unique(ids)
        rows = torch.empty((unique.numel(), dim), dtype=torch.float32)
        self._await_own_pushes()
        try:
            self._pull_rows(step, t, unique, rows)
        except RejoinError as e:
            self._rejoined(e)
            raise
        return unique, inverse, rows

    def _rejoined(self, error):
        """A row pull met a rejoin: the worker lines up (on_rejoin), as it does
        for its dense calls and row pushes, before the error rises."""
        for t in list(self.prefetched):
            self._forget(t)
        if self.on_rejoin is not None:
            self.on_rejoin(error.step)

    def _pull_rows(self, step, t, ids, rows, timeout=300.0):
        """A blocking row pull. At the start of a job a server may not have
        had rank 0's Init yet (other ranks wait for it on one server only):
        such a pull is tried again until it is, as dense pulls are."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.client.pull_rows(step, t, ids, rows)
            except ShardpsError as e:
                if not _not_initialised(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _forget(self, t):
        got = self.prefetched.pop(t, None)
        if got is not None:
            quietly(got[4])

    def _before_forward(self, t, step_of):
        def hook(module, inputs):
            ids = inputs[0].detach().reshape(-1).to("cpu", torch.int64)
            unique, inverse, rows = self._rows_for(t, ids, module.embedding_dim, step_of())
            if isinstance(module, HashEmbeddingBag):
                device = inputs[0].device
                module._rows = rows.to(device).requires_grad_(True)
                module._inverse = inverse.to(device)
                self.batch.setdefault(t, []).append((unique, module._rows))
            else:
                with torch.no_grad():
                    module.weight.index_copy_(0, unique.to(module.weight.device),
                                              rows.to(module.weight.device, module.weight.dtype))
                self.batch[t] = [(unique, module.weight)]  # the weight collects every forward's gradient
        return hook

    def push(self, step):
        """Pushes every table's row gradients of `step` (an empty push where a
        table was not used: a sync step needs one from every worker)."""
        self.wait()
        transfers = [(t,) + self._gradient(t, module) for t, (_, module) in enumerate(self.modules)]
        self.pushes.append(self.client.push_rows_many_async(step, transfers))
        self.batch.clear()

    def _gradient(self, t, module):
        dim = module.embedding_dim
        none = torch.empty(0, dtype=torch.int64), torch.empty((0, dim))
        if isinstance(module, HashEmbeddingBag):
            module._rows = None
            return self._hashed_gradient(self.batch.get(t, []), dim, none)
        unique, holder = self.batch.get(t, [(None, None)])[0]
        grad = None if holder is None else holder.grad
        if grad is None:
            return none
        holder.grad = None
        if grad.is_sparse:
            grad = grad.coalesce()
            return grad.indices()[0].to("cpu"), grad.values().detach().to("cpu", torch.float32).reshape(-1, dim)
        return unique, grad.detach()[unique.to(grad.device)].to("cpu", torch.float32)

    @staticmethod
    def _hashed_gradient(calls, dim, none):
        """One push's rows from every forward of a HashEmbeddingBag this step:
        an id seen by several forwards gets the sum of their gradients."""
        parts = [(unique, rows.grad.detach().to("cpu", torch.float32)) for unique, rows in calls
                 if rows.grad is not None]
        if not parts:
            return none
        if len(parts) == 1:
            return parts[0]
        ids, inverse = _unique(torch.cat([u for u, _ in parts]))
        summed = torch.zeros((ids.numel(), dim)).index_add_(0, inverse, torch.cat([g for _, g in parts]))
        return ids, summed

    def _await_own_pushes(self):
        if self.read_your_writes and self.pushes:
            self.wait()

    def wait(self, rejoin=True):
        """Waits for the row pushes in flight. A RejoinError first lets the
        calls after it finish and calls on_rejoin(step) (the Worker lines
        itself up, as for its dense calls), then rises."""
        pushes, self.pushes = self.pushes, []
        for i, call in enumerate(pushes):
            try:
                call.wait(rejoin=rejoin)
            except RejoinError as e:
                for rest in pushes[i + 1:]:
                    quietly(rest)
                if self.on_rejoin is not None:
                    self.on_rejoin(e.step)
                raise

    def drop(self):
        self.batch.clear()
        for t in list(self.prefetched):
            self._forget(t)
        for m in (m for _, m in self.modules if isinstance(m, HashEmbeddingBag)):
            m._rows = None



def _unique(ids):
    """The distinct ids of a CPU int64 tensor, ascending, and the place of
    each id among them: torch.unique's answer, from numpy's, which is
    several times faster on CPU for a batch's few hundred ids (Debian's
    PyTorch 1.13: 38 us against 10 us)."""
    unique, inverse = np.unique(ids.numpy(), return_inverse=True)
    return torch.from_numpy(unique), torch.from_numpy(inverse.reshape(-1).astype(np.int64, copy=False))


def _not_initialised(error):
    return error.code == 9 and "not initialised" in str(error)  # 9: FAILED_PRECONDITION


def quietly(call):
    """Waits for `call` (if any) and drops its outcome: the job has moved on."""
    if call is not None:
        try:
            call.wait(rejoin=False)
        except ShardpsError:
            pass
