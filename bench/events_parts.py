"""Where a KV event's time goes: each part of recording and shipping one, timed on its own.

    .venv/bin/python bench/events_parts.py --blocks 61

One stored node of `--blocks` 16-token blocks (61: the mean BlockStored of chat at page 1 in
bench/events_cost.py), random ids below 128k. Each part is timed with this thread's CPU time
(time.thread_time_ns), best of 9 rounds, and printed per block or per event: the XXH3 chain and
vLLM's sha256_cbor chain (per block), `tolist` of the event's ids (what a BlockStored cost before
TokenIds), a TokenIds (over key bytes, as the cache builds it, and over an array) and a BlockStored
(per event), msgpack encoding of one batch as ZmqPublisher sends it, and `parse_event` as an index
ingests it (ids as a list and as TokenIds). Compiled core: the records are native classes.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import numpy as np

from radixkv.events import BlockStored, parse_event
from radixkv.events.hashing import SEED, chain_hashes
from radixkv.events.records import TokenIds
from radixkv.events.vllm_hash import VllmHasher
from radixkv.events.wire import encode_batch


def best_us(fn: Callable[[], object], number: int, rounds: int = 9) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.thread_time_ns()
        for _ in range(number):
            fn()
        best = min(best, (time.thread_time_ns() - t) / number / 1e3)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=61)
    n = ap.parse_args().blocks
    ids = np.random.default_rng(0).integers(0, 128_000, 16 * n).astype(np.int32)
    key = ids.tobytes()
    hashes = chain_hashes(key, b"ns", 16)
    sha = VllmHasher("sha256_cbor", "0")
    as_list = BlockStored(hashes, None, ids.tolist(), 16)
    as_view = BlockStored(hashes, None, TokenIds(key, 16 * n), 16)
    parts = [
        ("XXH3 chain, per block", best_us(lambda: chain_hashes(key, b"ns", 16, SEED), 300) / n),
        ("sha256_cbor chain, per block", best_us(lambda: sha.digests(ids, 16, None), 100) / n),
        ("tolist of the ids, per block", best_us(ids.tolist, 300) / n),
        ("TokenIds over the key bytes (what the cache builds), per event", best_us(lambda: TokenIds(key, 16 * n), 3000)),
        ("TokenIds over an array, per event", best_us(lambda: TokenIds(ids), 3000)),
        ("BlockStored, per event", best_us(lambda: BlockStored(hashes, None, as_view.token_ids, 16), 3000)),
        ("msgpack batch of one event (ids listed), per block", best_us(lambda: encode_batch([as_view], 0.0, 0, 1), 300) / n),
        ("parse_event, ids a list, per block", best_us(lambda: parse_event(as_list), 100) / n),
        ("parse_event, ids a TokenIds, per block", best_us(lambda: parse_event(as_view), 300) / n),
    ]
    for name, us in parts:
        print(f"{name:64s} {us:8.3f} us")


if __name__ == "__main__":
    main()
