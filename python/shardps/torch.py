"""shardps.torch: a PyTorch nn.Module's training loop as a ShardPS worker.

    import shardps, shardps.torch
    worker = shardps.torch.Worker(model)        # layout from named_parameters()
    step = worker.start()                       # joins; rank 0's values are the init
    while step < total_steps:
        try:
            loss_fn(model(x[step]), y[step]).backward()
            step = worker.step_done()
        except shardps.RejoinError as e:        # a server restarted: the job rewound
            step = e.step

The servers run the optimizer and its schedule, and the job's flags choose
sync, async or ssp: the script calls no optimizer and does not change when
the mode does. Each parameter's gradient is pushed as soon as backward
produces it (a gradient hook), with the pull of its next weights behind it
in the client's transfer schedule; each module waits for its own weights
just before its forward runs (a forward pre-hook). Transfers overlap compute
as in ps_worker.

Weights and gradients pass through float32 host buffers (pinned for CUDA
parameters). A parameter whose gradient is not produced in a step is pushed
as zeros at step_done(), so that sync steps complete. Works with PyTorch 1.13
and 2.x; with 2.1 or later a parameter used several times in a step is
pushed once, its gradient accumulated.

The job's --blas_threads (default 1, as ps_worker's) sets the threads of
the OpenBLAS that PyTorch may run on (shardps/blas_threads.py).

Embedding tables (`nn.Embedding(sparse=True)`, `nn.EmbeddingBag(sparse=True)`
and `HashEmbeddingBag`) are sparse tables on the servers: only each batch's
rows move (shardps/torch_tables.py).
"""
import time

import torch

from shardps._lib import RejoinError, ShardpsError
from shardps.blas_threads import set_openblas_threads
from shardps.env import init_from_env
from shardps.torch_tables import HashEmbeddingBag, SparseTables, quietly, sparse_modules, table_of

__all__ = ["HashEmbeddingBag", "Worker"]


class Worker:
    """Turns `model`'s training loop into a worker of the job `job`
    (shardps.init_from_env() when None)."""

    def __init__(self, model, job=None, init_timeout=300.0):
        self.job = job if job is not None else init_from_env()
        set_openblas_threads(self.job.flag("blas_threads", int, 1))
        sparse = sparse_modules(model)
        on_servers = {id(m.weight) for _, m in sparse if hasattr(m, "weight")}
        self.params = [(n, p) for n, p in model.named_parameters() if p.requires_grad and id(p) not in on_servers]
        self._param = dict(self.params)
        if not self.params:
            raise ValueError("the model has no dense parameters that require gradients")
        self.client = self.job.connect([(n, tuple(p.shape)) for n, p in self.params],
                                       [table_of(n, m, self.job) for n, m in sparse])
        # async and ssp: a row pull leaves once this worker's last row pushes
        # are applied, as dense pulls do (read-your-writes), unless the job
        # trades that for overlap (--async_prefetch).
        mode = self.job.flag("mode", str, "sync")
        self.tables = SparseTables(sparse, self.client, read_your_writes=mode != "sync" and
                                   not self.job.flag("async_prefetch", bool, False))
        self.tables.on_rejoin = self._line_up
        self.step = None
        self.init_timeout = init_timeout
        self._weights = {n: _host_buffer(p) for n, p in self.params}
        self._grads = {n: _host_buffer(p) for n, p in self.params}
        self._pulls = {n: None for n, _ in self.params}
        self._pushes = {n: None for n, _ in self.params}
        self._pushed = set()
        self._hooks = []
        self._attach(model)

    # The loop --------------------------------------------------------------
    def start(self):
        """Joins the job and returns the step to continue at. Rank 0 sends its
        parameters as the initial weights; other ranks wait for them."""
        self.step = self.client.register()
        if self.job.rank == 0:
            self.client.init({n: p for n, p in self.params})
        else:
            self._await_init()
        self._pull_all()
        return self.step

    def step_done(self):
        """Ends the step whose backward just ran; returns the next step."""
        if self.step is None:
            raise ShardpsError("Worker.start() first")
        for n, p in self.params:
            if n not in self._pushed:  # no gradient this step: push zeros
                self._push(n, lambda buf: buf.zero_())
            p.grad = None
        self._pushed.clear()
        self.tables.push(self.step)
        self.step += 1
        return self.step

    def prefetch_rows(self, ids_by_module):
        """Optional, before a forward: {embedding module: the ids it will see}.
        Starts every named table's row pull at once, so that a model with
        many tables pays one round trip a step, not one per table. A module
        whose forward then sees other ids pulls them itself, as without this."""
        if self.step is None:
            raise ShardpsError("Worker.start() first")
        self.tables.prefetch(self.step, ids_by_module)

    def close(self):
        """Waits for the transfers in flight, copies the servers' final dense
        weights into the model, and closes the client."""
        for n in self._pushes:
            quietly(self._pushes[n])
            self._pushes[n] = None
        try:
            self.tables.wait(rejoin=False)
        except ShardpsError:
            pass
        for n, param in self.params:
            call, self._pulls[n] = self._pulls[n], None
            try:
                if call is not None and call.wait(rejoin=False):
                    param.data.copy_(self._weights[n])
            except ShardpsError:
                pass
        for h in self._hooks:
            h.remove()
        self.client.close()

    # Hooks -----------------------------------------------------------------
    def _attach(self, model):
        names = {id(p): n for n, p in self.params}
        for module in model.modules():
            own = [names[id(p)] for p in module.parameters(recurse=False) if id(p) in names]
            if own:
                self._hooks.append(module.register_forward_pre_hook(self._before_forward(own)))
        for n, p in self.params:
            if hasattr(p, "register_post_accumulate_grad_hook"):  # PyTorch 2.1+
                self._hooks.append(p.register_post_accumulate_grad_hook(lambda param, n=n: self._on_grad(n, param.grad)))
            else:
                self._hooks.append(p.register_hook(lambda grad, n=n: self._on_grad(n, grad)))
        self._hooks += self.tables.attach(lambda: self.step)

    def _before_forward(self, names):
        def hook(module, inputs):
            for n in names:
                call, self._pulls[n] = self._pulls[n], None
                if call is not None:
                    self._wait(call)
                    param = self._param[n]
                    param.data.copy_(self._weights[n], non_blocking=param.is_cuda)
        return hook

    def _on_grad(self, n, grad):
        if self.step is None or grad is None:
            return None
        self._push(n, lambda buf: buf.copy_(grad.detach()))
        return None

    def _push(self, n, fill):
        # The last step's push of this parameter borrows its buffer until it
        # has left (it is encoded when sent): wait for it before `fill`
        # writes this step's gradient there.
        previous, self._pushes[n] = self._pushes[n], None
        if previous is not None:
            self._wait(previous)
        fill(self._grads[n])
        quietly(self._pulls[n])  # a pull not consumed (no forward ran): its buffer is reused
        self._pushes[n], self._pulls[n] = self.client.push_then_pull(
            self.step, {n: self._grads[n]}, {n: self._weights[n]})
        self._pushed.add(n)

    # Joining, rejoining -----------------------------------------------------
    def _pull_all(self):
        for n, _ in self.params:
            quietly(self._pulls[n])
            self._pulls[n] = self.client.pull_async(self.step, {n: self._weights[n]})

    def _await_init(self):
        # Every tensor, not one: rank 0 initialises each server by its own
        # call, so one server may be ready while another is not yet.
        deadline = time.monotonic() + self.init_timeout
        while True:
            try:
                self.client.pull(self.step, {n: self._weights[n] for n, _ in self.params})
                return
            except RejoinError:
                raise
            except ShardpsError as e:
                if e.code != 9 or time.monotonic() > deadline:  # 9: FAILED_PRECONDITION, not initialised yet
                    raise
                time.sleep(0.1)

    def _wait(self, call):
        try:
            call.wait()
        except RejoinError as e:
            self._line_up(e.step)
            raise

    def _line_up(self, step):
        """After a rejoin: drops what was in flight and pulls `step`'s weights."""
        for calls in (self._pulls, self._pushes):
            for n in calls:
                quietly(calls[n])
                calls[n] = None
        self._pushed.clear()
        try:
            self.tables.wait(rejoin=False)
        except ShardpsError:
            pass
        self.tables.drop()
        for _, p in self.params:
            p.grad = None
        self.step = step
        self._pull_all()


def _host_buffer(param):
    return torch.zeros(tuple(param.shape), dtype=torch.float32, pin_memory=param.is_cuda)

