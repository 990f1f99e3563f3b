"""Read a recorded trace (JSON lines, plain or gzipped): the one parser for `radixkv bench --trace`
and anything else that replays traces.

Two line formats, told apart by their key field:

    {"tokens": [...], "prompt_len": n, "timestamp": t, "output_len": m}      token ids (workloads.py writes these)
    {"hash_ids": [...], "input_length": n, "block_size": 512,                 block-hash ids (Mooncake FAST'25)
     "timestamp": t, "output_length": m}

Fields, each checked (bools, floats and strings are never tokens, lengths or ids):
  tokens         non-empty list of ints in [0, 2**31 - 1]: the whole sequence (prompt, then output)
  prompt_len     int in [1, len(tokens)]: the leading prompt tokens (default: all)
  hash_ids       non-empty list of ints in [0, 2**64): one per block of `block_size` tokens
  block_size     int in [1, 65536] (default 512)
  input_length   int in [1, len(hash_ids) * block_size]: prompt tokens (default: all the blocks)
  timestamp      number >= 0, milliseconds (Mooncake's unit; optional)
  output_len / output_length   int >= 0: tokens the model answered (optional)
Other keys are ignored. A request may hold at most MAX_REQUEST_TOKENS tokens and a trace
MAX_TRACE_TOKENS, both checked before anything is allocated.

A hash id stands for one block: equal ids are equal blocks, different ids different blocks. Each
id is mapped to a deterministic block of token ids (a splitmix64 hash of (id, position): no table,
two runs agree); the blocks are concatenated and cut to `input_length` tokens, the prompt. For the
bench only the prompt is replayed (the trace does not say what the model answered; the next turn's
prompt carries the answer as its own hash ids), in file order.

A bad file raises TraceFormatError (a RadixKVError) naming `file:line` and the field, with nothing
returned; so does a file that cannot be opened, is not UTF-8, or is compressed other than by gzip.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from typing import IO, Any, Iterable, NamedTuple

import numpy as np

from radixkv.bench.workloads import VOCAB, Request
from radixkv.errors import TraceFormatError

DEFAULT_BLOCK_SIZE = 512
MAX_BLOCK_SIZE = 1 << 16
MAX_REQUEST_TOKENS = 1 << 22  # 4 Mi tokens (16 MiB of ids) a request: far past any model's context
MAX_TRACE_TOKENS = 1 << 28  # 1 GiB of int32 ids in one trace
MAX_LINE_CHARS = 1 << 26  # a tokens line of MAX_REQUEST_TOKENS ids fits
_MAX_ID = 2**31 - 1
_OTHER_COMPRESSION = {b"BZh": "bzip2", b"\xfd7zXZ": "xz", b"\x28\xb5\x2f\xfd": "zstd", b"PK\x03\x04": "zip"}


class TraceRecord(NamedTuple):
    tokens: np.ndarray  # int32 [n]: prompt, then output when the trace holds it
    prompt_len: int  # 1 <= prompt_len <= n
    timestamp_ms: float | None  # arrival time, when recorded
    output_len: int | None  # tokens the model answered, when recorded


def hash_block_tokens(hash_ids: list[int], block_size: int) -> np.ndarray:
    """int32 `[len(hash_ids) * block_size]`: the token ids standing for these blocks, in order.
    `hash_ids` are ints in [0, 2**64); TraceFormatError otherwise, or for a block_size out of range."""
    _check_ids(hash_ids, "hash_ids", 2**64 - 1)
    if type(block_size) is not int or not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise TraceFormatError(f"block_size must be an int in [1, {MAX_BLOCK_SIZE}], got {block_size!r:.40}")
    if len(hash_ids) * block_size > MAX_REQUEST_TOKENS:
        raise TraceFormatError(f"{len(hash_ids)} blocks of {block_size} exceed {MAX_REQUEST_TOKENS} tokens")
    ids = np.array(hash_ids, dtype=np.uint64)
    pos = np.arange(block_size, dtype=np.uint64)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as the hash wants
        h = _splitmix64(ids[:, None] * np.uint64(block_size) + pos[None, :] + np.uint64(1 << 40))
    return (h % np.uint64(VOCAB)).astype(np.int32).reshape(-1)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def read_trace(path: str) -> list[Request]:
    """Every request of `path` as a Request (tokens, prompt_len), in file order."""
    return [Request(r.tokens, r.prompt_len) for r in parse_trace(path)]


def read_traces(paths: list[str], taken: Iterable[str] = ()) -> dict[str, list[Request]]:
    """Each trace of `paths` under a name of its own: its file name without extension, or, when that
    is in `taken` (built-in workloads) or another trace's, the path as given. TraceFormatError for a
    path given twice or a bad file."""
    used, files, out = set(taken), set(), {}
    for path in paths:
        name = os.path.splitext(os.path.basename(path))[0]
        if name in used:
            name = path
        if name in used or os.path.realpath(path) in files:
            raise TraceFormatError(f"{path}: given twice")
        used.add(name)
        files.add(os.path.realpath(path))
        out[name] = read_trace(path)
    return out


def parse_trace(path: str) -> list[TraceRecord]:
    """Every non-empty line of `path` (plain or gzipped JSON lines) as a TraceRecord, in file order.
    TraceFormatError naming `path:line` on the first bad line; nothing is returned then."""
    records: list[TraceRecord] = []
    total = 0
    with _open(path) as f:
        for i, line in _lines(f, path):
            where = f"{path}:{i}"
            try:
                d = json.loads(line)
            except (ValueError, RecursionError) as e:  # JSONDecodeError, an int of > 4300 digits, deep nesting
                raise TraceFormatError(f"{where}: not JSON ({getattr(e, 'msg', None) or str(e)[:80] or 'nested too deeply'})") from None
            if not isinstance(d, dict):
                raise TraceFormatError(f"{where}: each line must be a JSON object, got {type(d).__name__}")
            try:
                n = _length(d)
                if total + n > MAX_TRACE_TOKENS:
                    raise TraceFormatError(f"the trace holds more than {MAX_TRACE_TOKENS} tokens")
                records.append(_record(d, n))
            except TraceFormatError as e:
                raise TraceFormatError(f"{where}: {e}") from None
            total += n
    if not records:
        raise TraceFormatError(f"{path}: no requests (an empty file)")
    return records


def _open(path: str) -> IO[str]:
    try:
        with open(path, "rb") as raw:
            head = raw.read(6)
        for magic, name in _OTHER_COMPRESSION.items():
            if head.startswith(magic):
                raise TraceFormatError(f"{path}: compressed with {name}; decompress it first (gzip is read as is)")
        if head.startswith(b"\x1f\x8b"):
            return gzip.open(path, "rt", encoding="utf-8")
        return open(path, encoding="utf-8")
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read it ({e.strerror or e})") from None


def _lines(f: IO[str], path: str):  # noqa: ANN202 - yields (line number, text)
    i = 0
    try:
        while line := f.readline(MAX_LINE_CHARS + 1):
            i += 1
            if len(line) > MAX_LINE_CHARS:
                raise TraceFormatError(f"{path}:{i}: a line longer than {MAX_LINE_CHARS} characters")
            if line.strip():
                yield i, line
    except UnicodeDecodeError:
        raise TraceFormatError(f"{path}:{i + 1}: not UTF-8 text") from None
    except (OSError, EOFError) as e:  # a corrupt or truncated gzip stream
        raise TraceFormatError(f"{path}:{i + 1}: cannot read it ({e})") from None


def _length(d: dict) -> int:
    """Tokens the line's request holds, from its fields alone (before anything is allocated)."""
    if ("tokens" in d) == ("hash_ids" in d):
        raise TraceFormatError("a line needs exactly one of 'tokens' (+ 'prompt_len') or 'hash_ids' "
                               "(+ 'input_length', 'block_size')")
    if "tokens" in d:
        toks = d["tokens"]
        if not isinstance(toks, list) or not toks:
            raise TraceFormatError(f"'tokens' must be a non-empty list of token ids, got {toks!r:.40}")
        if len(toks) > MAX_REQUEST_TOKENS:
            raise TraceFormatError(f"'tokens' holds {len(toks)} ids, more than {MAX_REQUEST_TOKENS}")
        return len(toks)
    ids = d["hash_ids"]
    if not isinstance(ids, list) or not ids:
        raise TraceFormatError(f"'hash_ids' must be a non-empty list of block ids, got {ids!r:.40}")
    bs = _int(d, "block_size", 1, MAX_BLOCK_SIZE, DEFAULT_BLOCK_SIZE)
    return _int(d, "input_length", 1, min(len(ids) * bs, MAX_REQUEST_TOKENS), len(ids) * bs)


def _record(d: dict, n: int) -> TraceRecord:
    stamp = timestamp_ms(d)
    if "tokens" in d:
        _check_ids(d["tokens"], "tokens", _MAX_ID)
        toks = np.array(d["tokens"], dtype=np.int32)
        return TraceRecord(toks, _int(d, "prompt_len", 1, n, n), stamp, _optional_int(d, "output_len"))
    ids, bs = d["hash_ids"], _int(d, "block_size", 1, MAX_BLOCK_SIZE, DEFAULT_BLOCK_SIZE)
    _check_ids(ids, "hash_ids", 2**64 - 1)
    toks = hash_block_tokens(ids[:-(-n // bs)], bs)[:n]  # only the blocks the prompt reaches
    return TraceRecord(toks, n, stamp, _optional_int(d, "output_length"))


def _check_ids(values: Any, name: str, high: int) -> None:
    if not isinstance(values, list) or not values:
        raise TraceFormatError(f"'{name}' must be a non-empty list of ints")
    bad = next((i for i, v in enumerate(values) if type(v) is not int or not 0 <= v <= high), None)
    if bad is not None:
        raise TraceFormatError(f"'{name}' must hold ints in [0, {high}], got {values[bad]!r:.40} at index {bad}")


def _int(d: dict, key: str, low: int, high: int, default: int) -> int:
    v = d.get(key, default)
    if type(v) is not int or not low <= v <= high:
        raise TraceFormatError(f"'{key}' must be an int in [{low}, {high}], got {v!r:.40}")
    return v


def _optional_int(d: dict, key: str) -> int | None:
    return None if d.get(key) is None else _int(d, key, 0, MAX_REQUEST_TOKENS, 0)


def timestamp_ms(d: dict) -> float | None:
    """A trace line's optional `timestamp` (milliseconds, finite, >= 0); TraceFormatError otherwise."""
    v = d.get("timestamp")
    if v is None:
        return None
    if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
        raise TraceFormatError(f"'timestamp' must be a finite number >= 0 (milliseconds), got {v!r:.40}")
    return float(v)
