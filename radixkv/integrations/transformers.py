"""radixkv under HuggingFace transformers: continuous batching with prefix reuse, same tokens out.

`Engine(model)` runs a Llama-family causal LM (Llama, Qwen2, Mistral; GQA) with its own weights and
layers while radixkv holds the KV:

```python
engine = Engine(model, num_slots=8192, page_size=16)
outputs = engine.generate(prompts, max_new_tokens=32)   # new tokens only, one list per prompt
engine.cache.sizes(); engine.last_stats.profile()
```

Mechanism, and why. In transformers 5.x every decoder layer of these models applies RoPE itself,
then calls `ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation)(module, q, k, v, mask,
scaling=..., **kwargs)`, and every extra keyword given to `model(...)` reaches that call. So we
register one function, "radixkv", with `AttentionInterface` and pass the step's `BatchInputs`
through a keyword: the function receives the post-RoPE K/V of exactly the tokens being computed,
stores them through their slots (`store_kv`) and attends over `req_to_token`
(`decode_attention` / `extend_attention`). Nothing of the modeling code is copied. The other
candidate, a custom `Cache` subclass, must return dense `[batch, kv_heads, kv_len, head_dim]` K/V
from `update()`, so every layer of every step would gather the whole prefix (an O(context) copy per
token), and it comes with padded batches, a 4D mask and positions inferred from padding. Here:

- one packed ragged batch: `input_ids` is `[1, sum(extend_lens)]` and `position_ids` come from each
  request (`committed_len + i`), not from padding;
- `use_cache=False, past_key_values=None` keeps transformers' own cache out;
- "radixkv" has no entry in `ALL_MASK_ATTENTION_FUNCTIONS`, so `create_causal_mask` returns None
  without building a mask (the kernels are causal by construction);
- the scheduler packs decode tokens first, so a mixed step sends those to `decode_attention` (one
  batched call) and only the prefill chunks to `extend_attention`;
- when decoding requests share cached prefixes, `cache.batch(..., cascade=True)` plans from the radix
  tree which of them read which shared KV, and `cascade_decode` reads each shared run once per group
  instead of once per request (`Engine(cascade=False)` turns it off);
- `logits_to_keep` as an index tensor runs `lm_head` only on the positions that sample;
- `set_attn_implementation("radixkv")` holds only during `generate()`; the previous implementation
  is restored afterwards, so the same model object still runs `model.generate` unchanged.

Sliding-window attention is not implemented: a request longer than `config.sliding_window` is
rejected. The attention function is in `attention.py`, the scheduler (continuous batching,
chunked prefill, preemption) in `scheduler.py`, sampling in `sampling.py`.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import torch

from radixkv import CacheConfig, RadixCache
from radixkv.integrations.attention import ATTN_IMPLEMENTATION, ForwardBatch
from radixkv.integrations.sampling import SamplingParams, make_generator, sample
from radixkv.integrations.scheduler import Plan, Request, Scheduler
from radixkv.integrations.stats import GenerateStats

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from radixkv import BatchInputs

_CACHE_FIELDS = {f.name for f in fields(CacheConfig)}


def model_layout(model: PreTrainedModel) -> dict[str, int]:
    """`num_layers`, `num_kv_heads`, `head_dim` of a Llama-family model's KV."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return dict(num_layers=cfg.num_hidden_layers, num_kv_heads=cfg.num_key_value_heads, head_dim=head_dim)


def cache_config_for(model: PreTrainedModel, **overrides: Any) -> CacheConfig:
    """A CacheConfig whose layers, KV heads, head_dim, dtype and device match `model`."""
    cfg = model.config
    # 16k slots: a few dozen requests of a few hundred tokens each.
    base = dict(**model_layout(model), num_slots=16384, max_requests=64,
                max_context_len=min(getattr(cfg, "max_position_embeddings", 4096), 4096),
                dtype=model.dtype, device=model.device)
    return CacheConfig(**{**base, **overrides})


class Engine:
    """Continuous-batching generation for a transformers causal LM, KV held in a RadixCache.

    Args:
        model: a Llama-family `*ForCausalLM` whose attention goes through `AttentionInterface`.
        cache_config: the cache's layout; None builds one from the model (`cache_config_for`).
        **kwargs: `max_batch_tokens` (token budget of one forward, default 512; chunked prefill
            splits longer prompts), `namespace` (cache namespace), `cascade` (default True: decode
            steps whose requests share cached prefixes read each shared prefix once per group,
            `radixkv.kernels.cascade_decode`; False: always flat `decode_attention`), and, when
            `cache_config` is None, any CacheConfig field (`num_slots`, `page_size`, `max_requests`, ...).
    """

    def __init__(self, model: PreTrainedModel, cache_config: CacheConfig | None = None, **kwargs: Any) -> None:
        self.max_batch_tokens = int(kwargs.pop("max_batch_tokens", 512))
        self.cascade = kwargs.pop("cascade", True)
        if not isinstance(self.cascade, bool):
            raise TypeError(f"Engine(cascade=...) takes a bool, got {type(self.cascade).__name__}")
        self.namespace = kwargs.pop("namespace", None)
        cache_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in _CACHE_FIELDS}
        if kwargs:
            raise TypeError(f"unknown Engine arguments {sorted(kwargs)}")
        if cache_config is not None and cache_kwargs:
            raise TypeError(f"pass either cache_config or CacheConfig fields {sorted(cache_kwargs)}, not both")
        if not model._can_set_attn_implementation():
            raise TypeError(f"{type(model).__name__} does not dispatch attention through AttentionInterface")
        self.model = model.eval()
        self.cache = RadixCache(cache_config or cache_config_for(model, **cache_kwargs))
        self._check_layout()
        self.last_stats = GenerateStats()

    def _check_layout(self) -> None:
        for name, want in model_layout(self.model).items():
            got = getattr(self.cache.config, name)
            if got != want:
                raise ValueError(f"cache_config.{name} = {got} but the model has {want}")

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 32,
                 eos_token_id: int | Sequence[int] | None = None, temperature: float = 0.0,
                 top_p: float = 1.0, seed: int = 0) -> list[list[int]]:
        """Generate for every prompt with continuous batching; returns the new tokens of each.

        A request stops after `max_new_tokens` tokens or right after emitting an id in
        `eos_token_id` (None: never on eos). Greedy when `temperature == 0`, else temperature /
        top-p sampling; request `i` samples from a generator seeded by `(seed, i)`. Prompts share
        cached prefixes; finished tokens are committed to the cache for later calls. Statistics of
        the call are left in `self.last_stats`. Raises ValueError for a request that could not run
        even alone (too long for the pool, the context or the sliding window).
        """
        params = SamplingParams(temperature, top_p, seed)
        eos = _eos_set(eos_token_id)
        sched = Scheduler(self.cache, self.max_batch_tokens, self.namespace)
        requests = [Request(i, [int(t) for t in p], len(p), max_new_tokens, make_generator(params, i))
                    for i, p in enumerate(prompts)]
        for req in requests:
            self._validate(sched, req.tokens, max_new_tokens)
            if max_new_tokens > 0:
                sched.add(req)
        stats = GenerateStats(prompt_tokens=sum(r.prompt_len for r in requests))
        start = time.perf_counter()
        with self._attention_backend():
            try:
                while not sched.idle:
                    self._step(sched, params, eos, stats, start)
            except BaseException:
                sched.abort()  # leave the cache consistent: no Sequence stays open
                raise
        stats.wall_s = time.perf_counter() - start
        stats.preemptions = sched.num_preemptions
        stats.prefill_reused = sum(r.reused_tokens for r in requests)
        stats.ttft_s = [r.first_token_s for r in requests if r.first_token_s is not None]
        stats.output_tokens = sum(len(r.output) for r in requests)
        self.last_stats = stats
        return [r.output for r in requests]

    @torch.inference_mode()
    def score(self, tokens: Sequence[int]) -> tuple[int, torch.Tensor]:
        """Logits of a prompt's positions that are not reused from the cache (prompt logprobs).

        Opens a Sequence (reusing the cached prefix, at most `len(tokens) - 1` tokens), computes
        the rest in one forward, commits it (so it is cached afterwards) and closes the Sequence.
        Returns `(reused, logits)`: `reused` cached tokens and fp `[len(tokens) - reused, vocab]`
        logits, row `i` predicting token `reused + i + 1`.
        """
        req = Request(0, [int(t) for t in tokens], len(tokens), 0)
        self._validate(Scheduler(self.cache, 1), req.tokens, 0)
        req.seq = self.cache.open(req.tokens, namespace=self.namespace, max_reuse=len(tokens) - 1)
        try:
            reused = req.seq.committed_len
            n = len(tokens) - reused
            self.cache.reserve(req.seq, n)
            plan = Plan([req], [n])
            with self._attention_backend():
                logits, _ = self._forward(plan, self.cache.batch([req.seq]), list(range(n)))
            self.cache.commit(req.seq, req.tokens[reused:])
        finally:
            self.cache.close(req.seq)
        return reused, logits

    def _step(self, sched: Scheduler, params: SamplingParams, eos: frozenset[int],
              stats: GenerateStats, start: float) -> None:
        t0 = time.perf_counter()
        plan = sched.schedule()
        inputs = self.cache.batch([r.seq for r in plan.requests], cascade=self.cascade)
        # Requests whose chunk reaches their last known token sample from that position.
        ends = list(itertools.accumulate(plan.chunks))
        last = [i for i, (r, n) in enumerate(zip(plan.requests, plan.chunks)) if r.pending == n]
        sampling = [plan.requests[i] for i in last]
        t1 = time.perf_counter()
        logits, batch = self._forward(plan, inputs, [ends[i] - 1 for i in last])
        t2 = time.perf_counter()
        stats.prefill_computed += self._commit(plan)
        t3 = time.perf_counter()
        new_tokens = sample(logits, params, [r.generator for r in sampling])
        t4 = time.perf_counter()
        for req, token in zip(sampling, new_tokens):
            req.tokens.append(token)
            req.first_token_s = t4 - start if req.first_token_s is None else req.first_token_s
            if len(req.output) >= req.max_new_tokens or token in eos:
                sched.finish(req)
        t5 = time.perf_counter()
        stats.steps += 1
        stats.forward_s += t2 - t1
        stats.attention_s += batch.attention_s
        stats.decode_attention_s += batch.decode_s
        stats.extend_attention_s += batch.extend_s
        stats.cache_s += (t1 - t0) + (t3 - t2) + (t5 - t4)
        stats.sample_s += t4 - t3

    def _commit(self, plan: Plan) -> int:
        """Commit every planned chunk (its KV is written now); returns how many were prompt positions."""
        prompt_positions = 0
        for req, n in zip(plan.requests, plan.chunks):
            done = req.seq.committed_len
            prompt_positions += max(0, min(done + n, req.prompt_len) - done)
            self.cache.commit(req.seq, req.tokens[done:done + n])
        return prompt_positions

    def _forward(self, plan: Plan, inputs: BatchInputs, keep: list[int]) -> tuple[torch.Tensor, ForwardBatch]:
        """One model forward over the planned positions (packed, in plan order).

        Args:
            plan: requests and their chunk lengths; their slots are reserved, not yet committed.
            inputs: `cache.batch()` of the plan's Sequences.
            keep: indices into the packed positions whose logits to return.
        Returns:
            (`[len(keep), vocab]` logits, the ForwardBatch with the attention timings).
        """
        device = self.model.device
        ids = list(itertools.chain.from_iterable(
            r.tokens[r.seq.committed_len:r.seq.committed_len + n] for r, n in zip(plan.requests, plan.chunks)))
        extend_lens = inputs.extend_lens.to(device=device, dtype=torch.int64)
        starts = torch.cumsum(extend_lens, 0) - extend_lens
        offsets = inputs.prefix_lens.to(device=device, dtype=torch.int64) - starts
        position_ids = torch.arange(len(ids), device=device) + torch.repeat_interleave(offsets, extend_lens)
        num_decode = next((i for i, n in enumerate(plan.chunks) if n != 1), len(plan.chunks))
        batch = ForwardBatch(self.cache, inputs, num_decode)
        out = self.model(input_ids=torch.tensor([ids], device=device), position_ids=position_ids[None],
                         use_cache=False, logits_to_keep=torch.tensor(keep, dtype=torch.int64, device=device),
                         radixkv_batch=batch)
        return out.logits[0], batch

    def _validate(self, sched: Scheduler, tokens: list[int], max_new_tokens: int) -> None:
        """Reject up front what could fail mid-generation: bad ids, too long for pool/context/window."""
        sched.validate(len(tokens), max_new_tokens)
        vocab = self.model.config.vocab_size
        if min(tokens) < 0 or max(tokens) >= vocab:
            raise ValueError(f"token ids must lie in [0, {vocab}), got [{min(tokens)}, {max(tokens)}]")
        window = getattr(self.model.config, "sliding_window", None)
        if window is not None and len(tokens) + max_new_tokens > window:
            raise ValueError(f"a request of {len(tokens) + max_new_tokens} tokens exceeds sliding_window "
                             f"{window}; radixkv attention is full attention only")

    @contextlib.contextmanager
    def _attention_backend(self) -> Iterator[None]:
        previous = self.model.config._attn_implementation
        self.model.set_attn_implementation(ATTN_IMPLEMENTATION)
        try:
            yield
        finally:
            self.model.set_attn_implementation(previous)


def _eos_set(eos_token_id: int | Sequence[int] | None) -> frozenset[int]:
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, int):
        return frozenset([eos_token_id])
    return frozenset(int(t) for t in eos_token_id)
