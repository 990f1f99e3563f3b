"""Read a recorded trace (JSON lines) into Requests, for `radixkv bench --trace FILE`.

Two line formats, detected per line:

    {"tokens": [...], "prompt_len": n}                          token ids (what workloads.py writes)
    {"hash_ids": [...], "input_length": n, "block_size": 512}   block-hash ids (Mooncake-style traces)

A hash id stands for one block of `block_size` tokens (512 when the line does not say): equal ids
are equal blocks, different ids different blocks. Each id is mapped to a deterministic block of
token ids (a splitmix64 hash of (id, position), so no table is kept and two runs agree), the
blocks are concatenated and cut to `input_length` tokens; that is the prompt. Only the prompt is
replayed (prompt_len = input_length): the trace does not say what the model answered, and the next
turn's prompt, if any, carries the answer as its own hash ids. Other fields (timestamps, output
lengths) are ignored: requests are replayed in file order.
"""

from __future__ import annotations

import json

import numpy as np

from radixkv.bench.workloads import VOCAB, Request

DEFAULT_BLOCK_SIZE = 512


class TraceFormatError(ValueError):
    """A line of a trace file is neither format (the message names the file and line)."""


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def hash_block_tokens(hash_ids: list[int], block_size: int) -> np.ndarray:
    """int32 `[len(hash_ids) * block_size]`: the token ids standing for these blocks, in order."""
    ids = np.asarray(hash_ids, dtype=np.uint64)
    pos = np.arange(block_size, dtype=np.uint64)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as the hash wants
        h = _splitmix64(ids[:, None] * np.uint64(block_size) + pos[None, :] + np.uint64(1 << 40))
    return (h % np.uint64(VOCAB)).astype(np.int32).reshape(-1)


def _request(d: dict, where: str) -> Request:
    if "tokens" in d:
        toks = np.asarray(d["tokens"], dtype=np.int32)
        n = int(d.get("prompt_len", len(toks)))
        if toks.ndim != 1 or not 0 <= n <= len(toks):
            raise TraceFormatError(f"{where}: 'tokens' must be a list of ids and 0 <= prompt_len <= len(tokens)")
        return Request(toks, n)
    if "hash_ids" in d:
        bs = int(d.get("block_size", DEFAULT_BLOCK_SIZE))
        ids = d["hash_ids"]
        n = int(d.get("input_length", len(ids) * bs))
        if bs < 1 or not isinstance(ids, list) or any(type(i) is not int or i < 0 for i in ids):
            raise TraceFormatError(f"{where}: 'hash_ids' must be a list of non-negative ints, block_size >= 1")
        if not 0 <= n <= len(ids) * bs:
            raise TraceFormatError(f"{where}: input_length {n} is more than {len(ids)} blocks of {bs} tokens")
        return Request(hash_block_tokens(ids, bs)[:n], n)
    raise TraceFormatError(f"{where}: a line needs 'tokens' (+ 'prompt_len') or 'hash_ids' "
                           "(+ 'input_length', 'block_size')")


def read_trace(path: str) -> list[Request]:
    """Every non-empty line of `path` as a Request, in file order. TraceFormatError on a bad line."""
    reqs = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise TraceFormatError(f"{path}:{i}: not JSON ({e.msg})") from None
            if not isinstance(d, dict):
                raise TraceFormatError(f"{path}:{i}: each line must be a JSON object")
            reqs.append(_request(d, f"{path}:{i}"))
    if not reqs:
        raise TraceFormatError(f"{path}: no requests")
    return reqs
