"""radixkv under HuggingFace transformers: continuous batching with prefix reuse, same tokens out.

`Engine(model)` runs a Llama-family causal LM (Llama, Qwen2, Mistral; GQA) with its own weights and
layers while radixkv holds the KV:

```python
engine = Engine(model, tokenizer=tokenizer, num_slots=8192, page_size=16)
outputs = engine.generate(prompts, max_new_tokens=32)   # new token ids only, one list per prompt
texts = engine.generate(["Hello"], return_text=True)    # decoded new text (skip_special_tokens=True)
engine.cache.sizes(); engine.last_stats.profile()
```

`generate` takes transformers' options, defaults (the model's `generation_config`) and inputs:
generation_options.py and prompts.py. Greedy output equals `model.generate` token for token.

Mechanism, and why: packed_forward.py (one packed forward per step, through transformers'
`AttentionInterface`; KV stored and read through slots).

Layer kinds (layer_groups.py): a model whose layers the Engine would not serve exactly (sparse
attention, short convolutions, ...) is refused at construction with UnsupportedModelError. Recurrent
layers (Mamba, gated delta net: Jamba, Falcon-H1, Qwen3-Next) carry each request's state and reuse
prefixes through state snapshots (recurrent.py); their forwards are cut per request there. The attention
function is in `attention.py`, the scheduler (continuous batching, chunked prefill, preemption) in
`scheduler.py`, sampling in `sampling.py`.
"""

from __future__ import annotations

import difflib
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from radixkv import CacheConfig, RadixCache
from radixkv.errors import InvalidArgumentError
from radixkv.integrations import generation_options
from radixkv.integrations.attention import ForwardBatch
from radixkv.integrations.model_cache import CACHE_FIELDS, cache_config_for, check_layout, model_layout
from radixkv.integrations.model_checks import check_model, probe_attention
from radixkv.integrations.packed_forward import attention_backend, packed_forward
from radixkv.integrations.layer_groups import check_served, layer_groups, layer_masks, window_specs
from radixkv.integrations.prompts import prompt_ids, to_batch
from radixkv.integrations.recurrent import RecurrentRunner
from radixkv.integrations.recurrent_families import check_family
from radixkv.integrations.sampling import SamplingParams, make_generator, sample
from radixkv.scheduling.scheduler import Plan, Request, Scheduler
from radixkv.integrations.stats import GenerateStats
from radixkv.scheduling import POLICIES

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from radixkv import BatchInputs

class Engine:
    """Continuous-batching generation for a transformers causal LM, KV held in a RadixCache.

    Args:
        model: a Llama-family `*ForCausalLM` whose attention goes through `AttentionInterface`.
        cache_config: the cache's layout; None builds one from the model (`cache_config_for`).
        tokenizer: lets prompts be strings and `generate(..., return_text=True)` decode (optional).
        max_batch_tokens: token budget of one forward (chunked prefill splits longer prompts).
        namespace: the cache namespace every request is matched and inserted under.
        cascade: decode steps whose requests share cached prefixes read each shared prefix once per
            group (`radixkv.kernels.cascade_decode`); False: always flat `decode_attention`.
        schedule: the order of the waiting queue, one of `radixkv.scheduling.POLICIES` (fcfs, fcfs-match,
            lpm, dfs-weight, hrrn, auto). Output never depends on it, only reuse and latency.
        **cache_options: when `cache_config` is None, CacheConfig fields (`num_slots`, `page_size`,
            `max_requests`, `max_context_len`, `eviction`, `dtype`, ...). Anything else raises
            InvalidArgumentError.
    """

    def __init__(self, model: PreTrainedModel, cache_config: CacheConfig | None = None, *, tokenizer: Any = None,
                 max_batch_tokens: int = 512, namespace: Any = None, cascade: bool = True,
                 schedule: str = "auto", **cache_options: Any) -> None:
        unknown = sorted(set(cache_options) - CACHE_FIELDS)
        if unknown:
            close = [m for u in unknown for m in difflib.get_close_matches(u, CACHE_FIELDS, n=1)]
            raise InvalidArgumentError(f"unknown Engine options {unknown}"
                                       + (f" (did you mean {close}?)" if close else "")
                                       + f"; Engine takes tokenizer, max_batch_tokens, namespace, cascade, schedule "
                                       f"and the CacheConfig fields {sorted(CACHE_FIELDS)}")
        if cache_config is not None and cache_options:
            raise InvalidArgumentError("pass either cache_config or CacheConfig fields "
                                       f"{sorted(cache_options)}, not both")
        if not isinstance(cascade, bool):
            raise InvalidArgumentError(f"Engine(cascade=...) takes a bool, got {type(cascade).__name__}")
        self.cascade = cascade
        if not isinstance(schedule, str) or schedule not in POLICIES:
            raise InvalidArgumentError(f"Engine(schedule={schedule!r}): choose from {', '.join(POLICIES)}")
        self.schedule = schedule
        if isinstance(max_batch_tokens, bool) or not isinstance(max_batch_tokens, int) or max_batch_tokens < 1:
            raise InvalidArgumentError(f"max_batch_tokens must be an int >= 1, got {max_batch_tokens!r}")
        # The model's checks, cheapest first; the probe runs a forward, so it comes after every argument check.
        self.layer_groups = layer_groups(model.config)  # raises UnsupportedModelError for an unknown layer kind
        check_served(self.layer_groups, type(model).__name__)
        check_family(model.config, type(model).__name__)  # recurrent layers: tested families only
        check_model(model)  # attention through AttentionInterface, a Llama-style KV layout (model_checks.py)
        self.model = model.eval()
        probe_attention(self.model, model_layout(model), self.layer_groups)  # attention as the kernels compute it
        self.tokenizer = tokenizer
        self.max_batch_tokens = max_batch_tokens
        self.namespace = namespace
        if cache_config is None:  # window layers keep their KV in pools of their own (layer_groups.window_specs)
            cache_config = cache_config_for(model, **cache_options)
            if "groups" not in cache_options:
                cache_config = replace(cache_config, groups=cache_config.groups + window_specs(
                    self.layer_groups, cache_config.num_slots, cache_config.page_size, cache_config.max_requests,
                    max_batch_tokens))
        self.cache = RadixCache(cache_config)
        check_layout(self.model, self.cache, self.max_batch_tokens)
        self._layer_masks = layer_masks(self.layer_groups, self.cache.config.num_layers)
        # Models with recurrent layers (Mamba, linear attention): per-request state, state snapshots.
        self.recurrent = RecurrentRunner.for_model(self.model, self.cache, namespace)
        self.last_stats = GenerateStats()
        # Called after every scheduler step, on generate()'s thread (the cache's): e.g. publish KV
        # events with no loop of your own, `engine.step_hooks.append(ZmqPublisher(engine.cache, ...).publish)`.
        self.step_hooks: list[Callable[[], object]] = []
        if self.recurrent is not None:
            self.step_hooks.append(self.recurrent.flush)  # publish the step's state snapshots

    @torch.inference_mode()
    def generate(self, prompts: Any, generation_config: Any = None, *, max_new_tokens: int | None = None,
                 max_length: int | None = None, eos_token_id: Any = None, pad_token_id: Any = None,
                 do_sample: bool | None = None, temperature: float | None = None, top_k: int | None = None,
                 top_p: float | None = None, seed: int = 0, attention_mask: Any = None, return_text: bool = False,
                 **unknown: Any) -> list[list[int]] | list[str]:
        """Generate for every prompt with continuous batching; returns the new tokens of each.

        Args:
            prompts: a list of prompts (id lists, 1-D tensors or arrays, strings with a tokenizer)
                or a 2-D tensor / array, one prompt per row (`attention_mask` marks its tokens).
            generation_config, max_new_tokens, max_length, eos_token_id, pad_token_id, do_sample,
                temperature, top_k, top_p: as in transformers' `model.generate`, with the same
                defaults (from `model.generation_config`); see generation_options.py.
            seed: request `i` samples from a generator seeded by `(seed, i)` (ignored when greedy).
            return_text: decode each output with the tokenizer (`skip_special_tokens=True`).
        Returns:
            One list of new token ids per prompt (prompt excluded, unpadded, ending with the EOS
            token when one stopped it), or one string each with `return_text`.
        Raises InvalidTokensError (bad prompt), InvalidArgumentError (unknown, unimplemented or
        out-of-range option), ContextLengthError (longer than `max_context_len`). Prompts share
        cached prefixes; finished tokens stay cached for later calls; stats in `self.last_stats`.
        """
        vocab = self.model.config.vocab_size
        opts = generation_options.resolve(
            self.model, generation_config, dict(max_new_tokens=max_new_tokens, max_length=max_length,
                                                eos_token_id=eos_token_id, pad_token_id=pad_token_id,
                                                do_sample=do_sample, temperature=temperature, top_k=top_k,
                                                top_p=top_p), unknown, vocab, seed)
        if return_text and self.tokenizer is None:
            raise InvalidArgumentError("return_text=True needs a tokenizer: Engine(model, tokenizer=tokenizer)")
        batch = to_batch(prompts, vocab_size=vocab, tokenizer=self.tokenizer, attention_mask=attention_mask)
        outputs = self._run(batch, opts)
        if return_text:
            return [self.tokenizer.decode(o, skip_special_tokens=True) for o in outputs]
        return outputs

    def _run(self, prompts: list[list[int]], opts: generation_options.GenerateOptions) -> list[list[int]]:
        params = opts.sampling
        sched = Scheduler(self.cache, self.max_batch_tokens, self.namespace, self.schedule)
        requests = [Request(i, p, len(p), opts.new_tokens(len(p), f"prompt {i}"), make_generator(params, i))
                    for i, p in enumerate(prompts)]
        for req in requests:
            self._validate(sched, req.tokens, req.max_new_tokens)
        for req in requests:
            if req.max_new_tokens > 0:
                sched.add(req)
        stats = GenerateStats(prompt_tokens=sum(r.prompt_len for r in requests))
        start = time.perf_counter()
        with attention_backend(self.model):
            try:
                while not sched.idle:
                    self._step(sched, params, opts.eos, stats, start)
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
    def score(self, prompt: Sequence[int] | torch.Tensor | str) -> tuple[int, torch.Tensor]:
        """Logits of a prompt's positions that are not reused from the cache (prompt logprobs).

        Takes one prompt in any form `generate` accepts. Opens a Sequence (reusing the cached
        prefix, at most `len(prompt) - 1` tokens), computes the rest in one forward, commits it
        (so it is cached afterwards) and closes the Sequence. Returns `(reused, logits)`: `reused`
        cached tokens and fp `[len(prompt) - reused, vocab]` logits, row `i` predicting token
        `reused + i + 1`.
        """
        tokens = prompt_ids(prompt, vocab_size=self.model.config.vocab_size, tokenizer=self.tokenizer)
        req = Request(0, tokens, len(tokens), 0)
        self._validate(Scheduler(self.cache, 1), req.tokens, 0)
        req.seq = self.cache.open(req.tokens, namespace=self.namespace, max_reuse=len(tokens) - 1)
        try:
            reused = req.seq.committed_len
            n = len(tokens) - reused
            self.cache.reserve(req.seq, n)
            plan = Plan([req], [n])
            with attention_backend(self.model):
                logits, _ = self._forward(plan, self.cache.batch([req.seq]), list(range(n)))
            self.cache.commit(req.seq, req.tokens[reused:])
        finally:
            self.cache.close(req.seq)
        for hook in self.step_hooks:  # as after a step (state snapshots, events)
            hook()
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
        stats.cascade_calls += batch.cascade_calls
        stats.masked_cascade_calls += batch.masked_cascade_calls
        stats.cache_s += (t1 - t0) + (t3 - t2) + (t5 - t4)
        stats.sample_s += t4 - t3
        for hook in self.step_hooks:
            hook()

    def _commit(self, plan: Plan) -> int:
        """Commit every planned chunk (its KV is written now); returns how many were prompt positions."""
        prompt_positions = 0
        for req, n in zip(plan.requests, plan.chunks):
            done = req.seq.committed_len
            prompt_positions += max(0, min(done + n, req.prompt_len) - done)
            self.cache.commit(req.seq, req.tokens[done:done + n])
        return prompt_positions

    def _forward(self, plan: Plan, inputs: BatchInputs, keep: list[int]) -> tuple[torch.Tensor, ForwardBatch]:
        """One model forward over the planned positions: packed_forward (its docstring has the arguments),
        or per request through the recurrent runner for a model with recurrent layers."""
        if self.recurrent is not None:
            return self.recurrent.forward(plan, inputs, keep)
        return packed_forward(self.model, self.cache, plan, inputs, keep, self._layer_masks)

    def _validate(self, sched: Scheduler, tokens: list[int], max_new_tokens: int) -> None:
        """Reject up front what could fail mid-generation: too long for the pool or the context."""
        sched.validate(len(tokens), max_new_tokens)
