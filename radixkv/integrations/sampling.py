"""Next-token sampling for a batch of requests: greedy, or temperature / top-k / top-p with a seed.

Each request draws from its own `torch.Generator`, seeded from `(seed, request index)`, so what a
request samples does not depend on which other requests happen to share its forward (continuous
batching reorders and regroups requests freely). Greedy is `argmax` with ties to the lowest id,
as `model.generate(do_sample=False)` does; sampling applies temperature, then top-k, then top-p,
in transformers' order. Nothing here touches the cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radixkv.errors import InvalidArgumentError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0  # nucleus mass kept, in (0, 1]
    seed: int = 0  # with the request's index, seeds that request's generator
    top_k: int = 0  # keep the k most likely tokens; 0 keeps all

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise InvalidArgumentError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidArgumentError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InvalidArgumentError(f"top_k must be >= 0 (0: no top-k), got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def make_generator(params: SamplingParams, index: int) -> torch.Generator | None:
    """The generator of request `index`; None when sampling is greedy (no randomness to seed)."""
    if params.greedy:
        return None
    # Spread (seed, index) over the 64-bit seed space so neighbouring seeds do not overlap.
    return torch.Generator().manual_seed((params.seed * 1_000_003 + index) % (2**63))


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero every token outside the smallest set whose mass reaches `top_p`; renormalise.

    probs: `[vocab]` float32, sums to 1. Returns a new `[vocab]` float32 tensor that sums to 1.
    """
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(descending=True)
    mass_before = sorted_probs.cumsum(0) - sorted_probs
    sorted_probs = torch.where(mass_before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    kept = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return kept / kept.sum()


def sample(logits: torch.Tensor, params: SamplingParams,
           generators: list[torch.Generator | None]) -> list[int]:
    """One next token per row of `logits`.

    Args:
        logits: `[batch, vocab]`, any float dtype, any device; not modified.
        params: shared by every request of the call.
        generators: one per row (from `make_generator`); ignored when greedy.
    Returns:
        `batch` token ids.
    """
    if params.greedy:
        return logits.argmax(dim=-1).tolist()
    scores = logits.float().cpu() / params.temperature
    if 0 < params.top_k < scores.shape[-1]:
        kth = scores.topk(params.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    tokens = []
    for row, gen in zip(probs, generators):
        row = top_p_filter(row, params.top_p)
        tokens.append(int(torch.multinomial(row, 1, generator=gen)))
    return tokens
