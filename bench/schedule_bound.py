#!/usr/bin/env python3
"""schedule_bound: the scaling efficiency a transfer schedule can reach at best
on bench/scaling's emulated cluster, from a fluid model of it.

The model: N hosts, each holding one worker and one server (S = N), every host
with one link up and one link down of --rate_mbit (less --overhead). A worker
computes a forward pass (1/3 of --compute_ms, spread over tensors by size),
then backward (2/3), pushing each bucket of tensors to every server as its
share of backward ends. In sync a server answers a bucket's pull once all N
workers pushed it; the next forward pass of a bucket waits for its pull. Data
flows as fluid: no latency, no CPU, no TCP dynamics, so each figure is an
upper bound for its policy.

Policies (how the links are shared among the transfers that want them):
  fair      max-min fair shares per transfer on every link: many TCP flows
            through FIFO queues, with no schedule.
  processes as sender, but a host's worker (its pushes) and its server (its
            answers) each keep their own order and share the host's link
            fairly: two schedules side by side on one host.
  sender    each host sends its most urgent transfers first (earlier step,
            then the bucket the next forward pass needs first), but a
            receiving link is shared fairly among the hosts sending to it:
            what a schedule kept by senders can do over TCP.
  priority  strict priority on every link, sending and receiving, by that
            same urgency: the ideal of P3 and ByteScheduler.

  bench/schedule_bound.py [--workers=2,4,8,16] [--rate_mbit=100] [--compute_ms=1900]
                          [--bucket_kb=512] [--overhead=0.05] [--steps=8]
"""
import argparse
import heapq
import math

EPS = 1e-9


def resnet50_tenth_bytes():
    """ResNet-50's tensors in forward order, a tenth of each, float32 (as --layout=resnet50/10)."""
    sizes = []

    def conv(cin, cout, k):
        sizes.append(cin * cout * k * k)
        sizes.append(2 * cout)  # batch norm's scale and shift

    conv(3, 64, 7)
    cin = 64
    for stage, blocks in enumerate([3, 4, 6, 3]):
        width = 64 << stage
        for b in range(blocks):
            conv(cin, width, 1)
            conv(width, width, 3)
            conv(width, 4 * width, 1)
            if b == 0:
                conv(cin, 4 * width, 1)
            cin = 4 * width
    sizes += [2048 * 1000, 1000]
    return [max(1, s // 10) * 4 for s in sizes]


def buckets(sizes, bucket_bytes):
    out = []
    for s in sizes:
        if not out or out[-1] >= bucket_bytes:
            out.append(0)
        out[-1] += s
    return out


def allocate_fair(flows, up, down):
    rates = {f: 0.0 for f in flows}
    active = set(flows)
    while active:
        n_up, n_down = {}, {}
        for f in active:
            s, d = flows[f][0], flows[f][1]
            n_up[s] = n_up.get(s, 0) + 1
            n_down[d] = n_down.get(d, 0) + 1
        inc = min([up[s] / n for s, n in n_up.items()] + [down[d] / n for d, n in n_down.items()])
        for f in active:
            rates[f] += inc
        for s, n in n_up.items():
            up[s] -= inc * n
        for d, n in n_down.items():
            down[d] -= inc * n
        active = {f for f in active if up[flows[f][0]] > EPS and down[flows[f][1]] > EPS}
    return rates


def allocate_sender(flows, up, down, key=lambda flow: flow[0]):
    """Each sender offers its most urgent flow whose receiving link has room; links are shared fairly
    among the senders offering on them. A sender is a host, or with `key` a process of one."""
    rates = {f: 0.0 for f in flows}
    by_sender = {}
    for f in sorted(flows, key=lambda f: (flows[f][3], f)):
        by_sender.setdefault(key(flows[f]), []).append(f)
    while True:
        offer = []
        for fs in by_sender.values():
            f = next((f for f in fs if up[flows[f][0]] > EPS and down[flows[f][1]] > EPS), None)
            if f is not None:
                offer.append(f)
        if not offer:
            return rates
        n_up, n_down = {}, {}
        for f in offer:
            n_up[flows[f][0]] = n_up.get(flows[f][0], 0) + 1
            n_down[flows[f][1]] = n_down.get(flows[f][1], 0) + 1
        inc = min([up[s] / n for s, n in n_up.items()] + [down[d] / n for d, n in n_down.items()])
        for f in offer:
            rates[f] += inc
            up[flows[f][0]] -= inc
            down[flows[f][1]] -= inc


def allocate_processes(flows, up, down):
    """As allocate_sender, but a host's worker (pushes) and server (answers) each keep their own order."""
    return allocate_sender(flows, up, down, key=lambda flow: (flow[0], flow[3][2]))


def allocate_priority(flows, up, down):
    rates = {}
    for f in sorted(flows, key=lambda f: (flows[f][3], f)):
        s, d = flows[f][0], flows[f][1]
        rates[f] = min(up[s], down[d])
        up[s] -= rates[f]
        down[d] -= rates[f]
    return rates


ALLOCATE = {"fair": allocate_fair, "processes": allocate_processes, "sender": allocate_sender,
            "priority": allocate_priority}


class Fluid:
    """Events and fluid transfers, stepped from one to the next: a subclass gives rates(), each
    transfer's rate while the set of transfers stays as it is."""

    def __init__(self):
        self.now = 0.0
        self.flows = {}  # id -> [src, dst, bytes left, priority, done]
        self.events = []  # (time, seq, fn)
        self.seq = 0

    def at(self, time, fn):
        self.seq += 1
        heapq.heappush(self.events, (time, self.seq, fn))

    def transfer(self, src, dst, nbytes, priority, done):
        if src == dst:
            done()
            return
        self.seq += 1
        self.flows[self.seq] = [src, dst, nbytes, priority, done]

    def advance(self):
        """Moves to the next event or the next transfer's end, whichever is first."""
        rates = self.rates() if self.flows else {}
        t_flow = min((self.now + self.flows[f][2] / r for f, r in rates.items() if r > EPS), default=math.inf)
        t_event = self.events[0][0] if self.events else math.inf
        t = min(t_flow, t_event)
        for f, r in rates.items():
            self.flows[f][2] -= r * (t - self.now)
        self.now = t
        for f in [f for f, v in self.flows.items() if v[2] <= 1e-3]:
            self.flows.pop(f)[4]()
        while self.events and self.events[0][0] <= self.now + 1e-12:
            heapq.heappop(self.events)[2]()

    def run(self):
        while self.events or self.flows:
            self.advance()


class Cluster(Fluid):
    """The emulated sync job, stepped from event to event."""

    def __init__(self, n, policy, link, compute, bucket_bytes, steps):
        super().__init__()
        self.n, self.allocate, self.link, self.steps = n, ALLOCATE[policy], link, steps
        self.buckets = buckets(resnet50_tenth_bytes(), bucket_bytes)
        total = sum(self.buckets)
        self.share = [compute * b / total for b in self.buckets]
        self.pushed, self.pulled, self.waiting, self.step_start = {}, {}, {}, {}

    def rates(self):
        return self.allocate(self.flows, [self.link] * self.n, [self.link] * self.n)

    def push_arrived(self, step, b, server):
        key = (step, b, server)
        self.pushed[key] = self.pushed.get(key, 0) + 1
        if self.pushed[key] < self.n:
            return
        for w in range(self.n):  # applied: every worker's pull of it is answered
            self.transfer(server, w, self.buckets[b] / self.n, (step + 1, b, 1),
                          lambda w=w: self.pull_arrived(w, step + 1, b))

    def pull_arrived(self, w, step, b):
        key = (w, step, b)
        self.pulled[key] = self.pulled.get(key, 0) + 1
        if self.pulled[key] == self.n and key in self.waiting:
            self.waiting.pop(key)()

    def forward(self, w, step, b):
        if b == 0:
            self.step_start[(w, step)] = self.now
        if b == len(self.buckets):
            self.backward(w, step, b - 1)
            return

        def compute():
            self.at(self.now + self.share[b] / 3, lambda: self.forward(w, step, b + 1))

        if step == 0 or self.pulled.get((w, step, b), 0) == self.n:
            compute()
        else:
            self.waiting[(w, step, b)] = compute

    def backward(self, w, step, b):
        def pushes():
            for server in range(self.n):
                self.transfer(w, server, self.buckets[b] / self.n, (step + 1, b, 0),
                              lambda server=server: self.push_arrived(step, b, server))
            if b > 0:
                self.backward(w, step, b - 1)
            elif step + 1 < self.steps:
                self.forward(w, step + 1, 0)

        self.at(self.now + self.share[b] * 2 / 3, pushes)

    def efficiency(self, compute):
        for w in range(self.n):
            self.forward(w, 0, 0)
        self.run()
        starts = [self.step_start[(0, s)] for s in range(self.steps)]
        return compute / ((starts[-1] - starts[2]) / (self.steps - 3))  # steps 0-1 warm the pipeline


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="2,4,8,16")
    ap.add_argument("--rate_mbit", type=float, default=100)
    ap.add_argument("--compute_ms", type=float, default=1900)
    ap.add_argument("--bucket_kb", type=int, default=512)
    ap.add_argument("--overhead", type=float, default=0.05, help="the link's share lost to headers")
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    link = a.rate_mbit * 1e6 / 8 * (1 - a.overhead)
    compute = a.compute_ms / 1000
    print(f"schedule_bound: sync, S = N, ResNet-50/10, {a.rate_mbit:g} Mbit/s links, "
          f"{a.compute_ms:g} ms compute, {a.bucket_kb} KB buckets")
    print(f"{'N':>3}" + "".join(f" {p:>9}" for p in ALLOCATE))
    for n in [int(x) for x in a.workers.split(",")]:
        e = {p: Cluster(n, p, link, compute, a.bucket_kb << 10, a.steps).efficiency(compute) for p in ALLOCATE}
        print(f"{n:>3}" + "".join(f" {e[p]:>9.3f}" for p in ALLOCATE), flush=True)


if __name__ == "__main__":
    main()
