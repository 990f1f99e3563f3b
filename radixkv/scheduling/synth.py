"""Mooncake-shaped traces for tests and benchmarks (generated, never committed).

Lines as in Mooncake FAST'25's traces: `{"timestamp" (ms), "input_length", "output_length",
"hash_ids"}` with 512-token blocks. The shape: a prompt is a shared prefix (one of `prefixes`
system prompts / documents, picked with Zipf popularity) followed by the request's own blocks, or
the next turn of an earlier conversation (its whole previous prompt, the answer's blocks, a new
question); lengths are lognormal around `prompt_tokens` and `output_tokens`, arrivals Poisson.
Deterministic for a seed.

    python -m radixkv.scheduling.synth OUT.jsonl --requests 12000
    python -m radixkv.scheduling.synth OUT.jsonl --requests 2000 --hot-and-cold
"""

from __future__ import annotations

import argparse
import json

import numpy as np

BLOCK = 512


def mooncake_shaped(requests: int, prompt_tokens: int = 12000, output_tokens: int = 350, prefixes: int = 64,
                    turn_share: float = 0.3, seed: int = 0, prefix_blocks: int = 16, zipf: float = 1.1,
                    burst: float = 1.0) -> list[dict]:
    """`prefix_blocks`: shared prefixes are 2 to `prefix_blocks` - 1 blocks long; `zipf`: their
    popularity exponent; `burst`: the coefficient of variation of the gaps between arrivals (1:
    Poisson; above 1: gamma-distributed gaps, bursts and lulls). The defaults draw the trace of
    bench/RESULTS.md's issue 20 sections, line for line."""
    rng = np.random.default_rng(seed)
    next_id = iter(range(1 << 40))
    shared = [[next(next_id) for _ in range(int(rng.integers(2, prefix_blocks)))] for _ in range(prefixes)]
    popularity = 1.0 / np.arange(1, prefixes + 1) ** zipf
    popularity /= popularity.sum()
    history: list[list[int]] = []  # prompts + answers that a later turn may continue
    t, out = 0.0, []
    for _ in range(requests):
        n = int(np.clip(rng.lognormal(np.log(prompt_tokens), 0.4), BLOCK, 4 * prompt_tokens))
        if history and rng.random() < turn_share:
            head = history[int(rng.integers(len(history)))]
        else:
            head = shared[int(rng.choice(prefixes, p=popularity))]
        blocks = max(len(head) + 1, -(-n // BLOCK))
        ids = head + [next(next_id) for _ in range(blocks - len(head))]
        length = max(n, (blocks - 1) * BLOCK + 1)
        answer = max(1, int(rng.lognormal(np.log(output_tokens), 0.5)))
        out.append({"timestamp": round(t, 3), "input_length": length, "output_length": answer, "hash_ids": ids})
        full = length // BLOCK  # a partial last block is a different block once the answer fills it
        history.append(ids[:full] + [next(next_id) for _ in range(-(-(length % BLOCK + answer) // BLOCK))])
        if len(history) > 256:
            history.pop(int(rng.integers(len(history))))
        t += float(rng.exponential(1000.0) if burst == 1.0 else rng.gamma(burst ** -2, 1000.0 * burst ** 2))
    return out


def hot_and_cold(requests: int, cold: int = 3, hot_blocks: int = 16, cold_blocks: int = 16,
                 gap_ms: float = 100.0) -> list[dict]:
    """The starvation test: a steady stream on one hot prefix (`hot_blocks` shared blocks + 1 of its
    own, 8 output tokens), and `cold` requests of `cold_blocks` blocks of their own early in it
    (requests 10, 20, ...). Run at a load where the hot stream alone keeps the server busy."""
    hot = list(range(hot_blocks))
    next_id = iter(range(hot_blocks, 1 << 40))
    out = []
    for i in range(requests):
        is_cold = i % 10 == 0 and 0 < i <= 10 * cold
        ids = [next(next_id) for _ in range(cold_blocks)] if is_cold else hot + [next(next_id)]
        out.append({"timestamp": i * gap_ms, "input_length": len(ids) * BLOCK, "output_length": 8, "hash_ids": ids})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--requests", type=int, default=12000)
    p.add_argument("--prompt-tokens", type=int, default=12000)
    p.add_argument("--output-tokens", type=int, default=350)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hot-and-cold", action="store_true", help="the starvation trace instead (hot_and_cold)")
    a = p.parse_args(argv)
    lines = (hot_and_cold(a.requests) if a.hot_and_cold else
             mooncake_shaped(a.requests, a.prompt_tokens, a.output_tokens, seed=a.seed))
    with open(a.out, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
