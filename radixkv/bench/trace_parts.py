"""What a benchmark trace is made of: `Request`, `Workload`, the id and length draws every generator
uses, and the JSON-lines form SGLang's peer harness reads (radixkv/bench/workloads.py has the generators)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

import numpy as np

from radixkv.errors import InvalidArgumentError

VOCAB = 32000  # Llama-2's vocabulary size; the ids are opaque to the cache


class Request(NamedTuple):
    tokens: np.ndarray  # int32 [n]: prompt then output
    prompt_len: int  # 0 <= prompt_len <= n


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str  # one line: what it models and its parameters
    make: Callable[..., list[Request]]


def random_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, VOCAB, size=n, dtype=np.int32)


def draw_len(rng: np.random.Generator, full: int, ratio: float) -> int:
    """Uniform in [full * ratio, full] (SGLang's compute_random_lens); ratio 1.0 gives `full`."""
    lo = max(1, int(full * ratio))
    return full if lo >= full else int(rng.integers(lo, full + 1))


def write_jsonl(reqs: Iterable[Request], path: str) -> None:
    """One {"tokens": [...], "prompt_len": n} per line (radixkv.bench.traces reads it back)."""
    with open(path, "w") as f:
        for r in reqs:
            if not isinstance(r, Request):
                raise InvalidArgumentError(f"write_jsonl takes Requests, got {type(r).__name__}")
            f.write(json.dumps({"tokens": r.tokens.tolist(), "prompt_len": int(r.prompt_len)},
                               separators=(",", ":")))
            f.write("\n")
