"""Traces for `radixkv simulate`: requests with arrival times and output lengths, in cache units.

Two line formats (JSON lines), one per file:

    {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}   Mooncake FAST'25
    {"tokens": [...], "prompt_len": n, "timestamp": ms, "output_len": m}          ours (radixkv/bench/traces.py)

`timestamp` (milliseconds) and the output length are optional in the tokens format. Without
timestamps, arrivals are a Poisson process (`radixkv simulate --load` sets its rate); without an
output length, the output is the trace's tokens after `prompt_len` (at least one token).

Mooncake lines are simulated one block per cache token. A hash id names a block of 512 tokens
(equal ids, equal blocks, and the ids chain: equal id at position i means an equal prefix), so a
cache whose page is that block shares exactly what a cache over the materialized tokens would
share, page for page: a 512-token page is either wholly reused or not. So each request's tokens are
its hash ids (remapped to dense ids), the cache's page is one such token, and `Unit.size` = 512
real tokens stand behind each; the simulator prices steps in real tokens. A 12k-token prompt is 24
cache tokens instead of 12,000, which is what makes a 12,000-request trace run in minutes. The
tokens format runs at one real token per cache token.

Bad input raises TraceFormatError (a RadixKVError) naming `file:line`: a timestamp or
output length that is not a finite number >= 0 (an integer, for lengths), or timestamps that go
backwards. The token content of a tokens-format file is read and checked by
radixkv/bench/traces.py's `read_trace` itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from radixkv.bench.traces import DEFAULT_BLOCK_SIZE, read_trace, timestamp_ms
from radixkv.errors import TraceFormatError


@dataclass
class TraceRequest:
    units: list[int]  # cache tokens of the prompt: hash ids (dense) or token ids
    prompt_tokens: int  # real prompt tokens (Mooncake input_length)
    output_tokens: int  # real tokens the model answers (>= 1)
    timestamp_ms: float | None
    trace_output: list[int]  # token ids of the answer as recorded (tokens format), possibly shorter


@dataclass
class SimTrace:
    name: str
    requests: list[TraceRequest]
    unit: int  # real tokens per cache token: the Mooncake block size, or 1
    next_id: int  # the first cache-token id no request uses (fresh ids for generated blocks start here)


def read_sim_trace(path: str, name: str) -> SimTrace:
    """Read and check `path`; TraceFormatError naming `path:line` on the first bad line."""
    lines = _json_lines(path)
    kinds = {("hash_ids" in d) for _, d in lines}
    if len(kinds) > 1:
        i = next(i for i, d in lines if ("hash_ids" in d) != ("hash_ids" in lines[0][1]))
        raise TraceFormatError(f"{path}:{i}: mixes Mooncake (hash_ids) and tokens lines; one format per file")
    times = [_timestamp(d, f"{path}:{i}") for i, d in lines]
    _check_order(times, lines, path)
    if "hash_ids" in lines[0][1]:
        return _mooncake(path, name, lines, times)
    return _tokens(path, name, lines, times)


def _json_lines(path: str) -> list[tuple[int, dict]]:
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                except ValueError as e:
                    raise TraceFormatError(f"{path}:{i}: not JSON ({getattr(e, 'msg', e)})") from None
                if not isinstance(d, dict):
                    raise TraceFormatError(f"{path}:{i}: each line must be a JSON object")
                out.append((i, d))
    except (OSError, UnicodeDecodeError) as e:
        raise TraceFormatError(f"{path}: cannot read it ({e})") from None
    if not out:
        raise TraceFormatError(f"{path}: no requests")
    return out


def _timestamp(d: dict, where: str) -> float | None:
    try:
        return timestamp_ms(d)
    except TraceFormatError as e:
        raise TraceFormatError(f"{where}: {e}") from None


def _check_order(times: list[float | None], lines: list[tuple[int, dict]], path: str) -> None:
    if all(t is None for t in times):
        return
    last = -1.0
    for t, (i, _) in zip(times, lines):
        if t is None:
            raise TraceFormatError(f"{path}:{i}: no 'timestamp' while other lines have one")
        if t < last:
            raise TraceFormatError(f"{path}:{i}: timestamp {t:g} ms goes backwards (previous line: {last:g} ms)")
        last = t


def _length(d: dict, key: str, where: str, default: int | None) -> int | None:
    v = d.get(key, default)
    if v is None:
        return None
    if type(v) is not int or v < 0:
        raise TraceFormatError(f"{where}: '{key}' must be an int >= 0, got {v!r:.40}")
    return v


def _mooncake(path: str, name: str, lines: list[tuple[int, dict]], times: list[float | None]) -> SimTrace:
    dense: dict[int, int] = {}
    reqs = []
    unit = None
    for (i, d), t in zip(lines, times):
        where = f"{path}:{i}"
        ids, bs = d["hash_ids"], d.get("block_size", DEFAULT_BLOCK_SIZE)
        if not isinstance(ids, list) or not ids or any(type(x) is not int or x < 0 for x in ids):
            raise TraceFormatError(f"{where}: 'hash_ids' must be a non-empty list of ints >= 0")
        if type(bs) is not int or bs < 1 or bs != (unit or bs):
            raise TraceFormatError(f"{where}: 'block_size' must be one int >= 1 for the whole file, got {bs!r:.40}")
        unit = bs
        n = _length(d, "input_length", where, len(ids) * bs)
        if not 1 <= n <= len(ids) * bs:
            raise TraceFormatError(f"{where}: input_length {n} must lie in [1, {len(ids)} blocks x {bs}]")
        out = _length(d, "output_length", where, 1)
        units = [dense.setdefault(x, len(dense)) for x in ids[:-(-n // bs)]]
        reqs.append(TraceRequest(units, n, max(1, out), t, []))
    return SimTrace(name, reqs, unit, len(dense))


def _tokens(path: str, name: str, lines: list[tuple[int, dict]], times: list[float | None]) -> SimTrace:
    recorded = read_trace(path)  # the token content, parsed and checked by the bench's reader
    reqs = []
    for (i, d), t, r in zip(lines, times, recorded):
        toks = r.tokens.tolist()
        out = _length(d, "output_len", f"{path}:{i}", None)
        answer = toks[r.prompt_len:]
        if r.prompt_len < 1:
            raise TraceFormatError(f"{path}:{i}: prompt_len must be >= 1 (the model predicts from it)")
        reqs.append(TraceRequest(toks[:r.prompt_len], r.prompt_len, max(1, len(answer) if out is None else out),
                                 t, answer))
    return SimTrace(name, reqs, 1, 1 << 30)
