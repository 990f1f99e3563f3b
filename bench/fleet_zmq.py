"""Fleet over the wire: N instances publish KV events over ZMQ on 127.0.0.1 to one subscriber that
feeds the router's InMemoryIndex; the router's predictions are checked against what each instance
actually matched, without and with injected faults.

    .venv/bin/python bench/fleet_zmq.py                     # gsp and chat, 4 instances, both runs
    .venv/bin/python bench/fleet_zmq.py --workload chat --instances 8 --scale 0.5

Per request, in trace order: the subscriber applies whatever has arrived (`poll(0)`), the router
routes (longest prefix, ties by load), the instance serves it at the tree level (as bench/fleet.py
does) and reports its real hit (`report_hit`), and its publisher hands the step's events to its
sender thread. Faults (`faults` rows): the PUB and SUB high-water marks are 2 messages, the subscriber stalls
(reads nothing) from 25% to 50% of the trace, so ZMQ drops what does not fit (gaps, replays), and
one instance restarts at 50% with an empty cache (new publisher, sequence numbers from 0).

Columns: predicted = prompt tokens the router predicted cached on the chosen instance; delivered =
tokens it actually matched; stale = predicted but not there; late = matched but not predicted
(the index had not heard yet); all as % of prompt tokens. Then the subscriber's counters.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from datetime import datetime, timezone

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import BLOCK, Loads, make_cache, serve  # noqa: E402  (the fleet bench's own helpers)

from radixkv.bench.workloads import WORKLOADS  # noqa: E402
from radixkv.cluster import InMemoryIndex, Router, ZmqPublisher, ZmqSubscriber, kv_topic  # noqa: E402


def run(trace: list, n: int, cap: int, ps: int, window: int, faults: bool) -> tuple[Router, ZmqSubscriber, float]:
    max_len = max(len(r.tokens) for r in trace) + ps
    names = [f"pod-{i}" for i in range(n)]
    caches = [make_cache(cap, ps, max_len) for _ in range(n)]
    hwm = 2 if faults else 100_000
    pubs = [ZmqPublisher(c, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", topic=kv_topic(name, "bench"), hwm=hwm)
            for name, c in zip(names, caches)]
    for p in pubs:
        p.start(0.002)
    index = InMemoryIndex()
    sub = ZmqSubscriber(index, sync_interval_s=0.5, replay_timeout_s=1.0, rcvhwm=hwm)
    for p in pubs:
        sub.connect(p.endpoint, p.replay_endpoint)
    router = Router(index, block_size=BLOCK)
    for name in names:
        router.report_load(name, 0)
    loads = Loads(n, window)
    stall = range(len(trace) // 4, len(trace) // 2) if faults else range(0)
    for i, req in enumerate(trace):
        if faults and i == len(trace) // 2:  # instance 0 restarts: empty cache, new publisher, same ports
            ends = (pubs[0].endpoint, pubs[0].replay_endpoint)
            pubs[0].close()
            caches[0] = make_cache(cap, ps, max_len)
            pubs[0] = ZmqPublisher(caches[0], ends[0], ends[1], topic=kv_topic(names[0], "bench"), hwm=hwm)
            pubs[0].start(0.002)
        if i not in stall:
            sub.poll(0)
        d = router.route(req.tokens[: req.prompt_len])
        inst = int(d.instance[4:])
        router.report_hit(d, serve(caches[inst], req))
        pubs[inst].publish()
        for changed in loads.add(inst):
            router.report_load(names[changed], loads.open[changed])
    t_end = _converge(sub, index, names, caches)
    for p in pubs:
        p.close()
    sub.close()
    return router, sub, t_end


def _converge(sub: ZmqSubscriber, index: InMemoryIndex, names: list[str], caches: list) -> float:
    """Seconds until the index equals every cache after the last request (or -1 past 10 s)."""
    import time

    from radixkv.events import BlockStored

    want = {n: {(h, e.medium) for e in c.block_snapshot() if isinstance(e, BlockStored) for h in e.block_hashes}
            for n, c in zip(names, caches)}
    t0 = time.monotonic()
    while any(index.blocks_of(n) != want[n] for n in names):
        if time.monotonic() - t0 > 10:
            return -1.0
        sub.poll(0.01)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=["gsp", "chat", "both"], default="both")
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--total-capacity", type=int, default=131072)
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    n, ps = a.instances, a.page_size
    print(f"# {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.1f}; {n} instances, page {ps}")
    print("| trace | run | predicted | delivered | stale | late | batches | gaps (missed) | replays | snapshots "
          "| restarts | converged after |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for wl in (["gsp", "chat"] if a.workload == "both" else [a.workload]):
        trace = WORKLOADS[wl].make(seed=a.seed)
        trace = trace[: max(1, int(np.ceil(a.scale * len(trace))))]
        cap = a.total_capacity // n // ps * ps
        for faults in (False, True):
            router, sub, t_end = run(trace, n, cap, ps, 8 * n, faults)
            t, s = router.loop.total(), sub.stats
            pct = lambda x: f"{100 * x / max(1, t.prompt_tokens):.1f}%"  # noqa: E731
            print(f"| {wl} | {'faults' if faults else 'clean'} | {pct(t.predicted_hit_tokens)} | "
                  f"{pct(t.delivered_hit_tokens)} | {pct(t.stale_miss_tokens)} | {pct(t.unpredicted_hit_tokens)} | "
                  f"{s.batches} | {s.gaps} ({s.missed}) | "
                  f"{s.replays} | {s.snapshots} | {s.restarts} | {t_end * 1e3:.0f} ms |")


if __name__ == "__main__":
    main()
