"""Serving models with recurrent layers (Jamba, Falcon-H1, Qwen3-Next: Mamba, gated delta net) exactly,
with prefix reuse: the Engine's forward for a model that has a recurrent layer group.

Each open request carries its own state (`RecurrentState`: conv + SSM / linear-attention state of
every recurrent layer) from step to step; a forward lends the states of its requests to the model
through a `StateCache` (recurrent_state.py) and reads them back, so no layer ever runs over two
requests as one. Attention layers still go through radixkv's attention function and the pool.
A step runs as several forwards (recurrent_batch.py): the decode tokens of every request in one
(`[B, 1]`), then each prefill chunk alone (`[1, T]`).

A chunk that continues a state runs in one forward: Falcon-H1's Mamba2 chunk scan and Qwen3-Next's
chunked gated delta rule take `initial_state`; Jamba's Mamba scan starts from zero, so its forward runs
with a scan that adds the carried state's share (recurrent_scan.py). A model whose mixer is in neither
(recurrent_families.RESUMES_CHUNKS) runs such a chunk token by token through the decode path, which is
exact for any mixer that `model.generate` can decode with.

Prefix reuse (state_store.py). A request resumes at the longest position where the tree holds the
KV and a state snapshot (the node's component in the cache's "state" group, whose tensors the
store keeps): the cache's match itself stops there (radix/windows.py), so `cache.open`, the
scheduler's estimates and `cache.match_prefix` all see the same resume point. Snapshots are taken
where a prefill chunk reaches a chosen page-aligned position (the chunk is split there, as SGLang's
MambaRadixCache and vLLM do):

- the branch point: the end of the KV match at admission, where later requests that share the
  same prefix diverge (Marconi's and SGLang's choice); kept;
- a chain per request: the prompt's last page boundaries (`L - 1` and `L` rounded down to pages),
  then every page boundary of decode, each replacing the request's previous one, so that one
  snapshot per request survives, at the end of its answer: where the next turn of a conversation
  (or the same request after preemption) resumes.

A snapshot is published after its chunk is committed (its node exists then): `flush`, an Engine
step hook, and again before each admission and each forward.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from radixkv.errors import ConfigError
from radixkv.integrations.attention import ForwardBatch
from radixkv.integrations.layer_groups import check_served, layer_groups, layer_masks
from radixkv.integrations.recurrent_batch import Span, Unit, one_token_spans, split_span, unit_inputs
from radixkv.integrations.recurrent_families import RESUMES_CHUNKS, check_family
from radixkv.integrations.recurrent_scan import continued_scan
from radixkv.integrations.recurrent_state import RecurrentState, StateCache
from radixkv.integrations.state_store import StateStore, prefill_flops

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from radixkv import BatchInputs, RadixCache, Sequence
    from radixkv.scheduling.scheduler import Plan, Request
    from radixkv.results import LockHandle

# which snapshot a full state group gives up (state_store.POLICIES): Marconi's beat LRU's hit rate, or tied
# it, on every bench/recurrent_reuse.py run (bench/RESULTS.md, issue 21 round 2)
STATE_POLICY = "flops"


@dataclass
class _Work:
    """An open request's working state and where it should snapshot."""
    state: RecurrentState
    points: frozenset[int]  # kept snapshot positions (the branch point)
    spare: frozenset[int]  # snapshot positions the store drops first (the prompt's last page boundary)
    chain_from: int  # every page boundary from here on is a chain snapshot (latest kept)
    splits: frozenset[int]  # where prefill chunks are cut so that a snapshot can be taken


@dataclass
class _Pending:
    tokens: list[int]  # the prefix the state was taken after
    state: RecurrentState
    owner: Request | None  # set for decode-chain snapshots: replaces the owner's previous one
    spare: bool = False  # the store drops it before the others


@dataclass
class _Step:
    plan: Plan
    inputs: BatchInputs
    kv_starts: list[int]
    keep: frozenset[int]  # packed positions whose logits to return
    logits: dict[int, torch.Tensor] = field(default_factory=dict)


class RecurrentRunner:
    """Runs a hybrid model's forwards for the Engine, holding each request's state and the snapshots.

    Args:
        model: a transformers causal LM with a recurrent layer group.
        cache: the Engine's RadixCache.
        namespace: the namespace the Engine matches and inserts under.
    """

    def __init__(self, model: PreTrainedModel, cache: RadixCache, namespace: Any) -> None:
        config = model.config.get_text_config(decoder=True)
        every = layer_groups(config)
        groups = [g for g in every if g.kind == "recurrent"]
        check_served(groups, type(model).__name__)
        check_family(config, type(model).__name__)
        self.layer_masks = layer_masks(every, config.num_hidden_layers)  # sliding / chunked attention layers
        states = getattr(config, "number_of_conv_states", 1)
        self.recurrent_layers = {i: states for g in groups for i in g.layers}
        self.model, self.cache, self.namespace = model, cache, namespace
        self.num_layers = config.num_hidden_layers
        self.model_type = config.model_type
        self.resumes_chunks = config.model_type in RESUMES_CHUNKS
        self.page = cache.config.page_size
        self.store = StateStore(cache, _state_group(cache, type(model).__name__), STATE_POLICY, _flops(model))
        self._work: dict[Sequence, _Work] = {}
        self._pending: list[_Pending] = []
        self._chain: weakref.WeakKeyDictionary[Request, LockHandle] = weakref.WeakKeyDictionary()

    @staticmethod
    def for_model(model: PreTrainedModel, cache: RadixCache, namespace: Any) -> RecurrentRunner | None:
        """A runner when `model` has a recurrent layer group, else None; UnsupportedModelError when
        it has one the Engine does not serve exactly (layer_groups.check_served)."""
        config = model.config.get_text_config(decoder=True)
        if not any(g.kind == "recurrent" for g in layer_groups(config)):
            return None
        return RecurrentRunner(model, cache, namespace)

    def flush(self) -> None:
        """Publish the snapshots taken so far whose chunk is committed by now; forget the working
        state of closed requests (finished or preempted)."""
        self._work = {s: w for s, w in self._work.items() if not s.closed}
        pending, self._pending = self._pending, []
        for p in pending:
            store = self.store
            node = self.cache.locate(p.tokens, namespace=self.namespace)
            if node.end != len(p.tokens):
                continue  # its KV was evicted already (or never became a whole page)
            if p.owner is not None:
                previous = self._chain.get(p.owner)
                if previous is not None and previous is not node:
                    store.discard(previous)
                self._chain[p.owner] = node
            store.put(node, node.end, p.state, spare=p.spare)

    def forward(self, plan: Plan, inputs: BatchInputs, keep: list[int]) -> tuple[torch.Tensor, ForwardBatch]:
        """The Engine's `_forward` for this model: `[len(keep), vocab]` logits at the packed positions
        `keep`, and a ForwardBatch carrying the step's attention timings."""
        self.flush()  # (admission flushed already, so this drops no snapshot a new request resumes from)
        for req in plan.requests:
            self._load(req)
        total = ForwardBatch(self.cache, inputs, 0)
        step = _Step(plan, inputs, inputs.kv_indptr[:-1].tolist(), frozenset(keep))
        for unit in self._units(plan):
            fb = self._run(step, unit)
            total.attention_s += fb.attention_s
            total.decode_s += fb.decode_s
            total.extend_s += fb.extend_s
        vocab = self.model.config.get_text_config(decoder=True).vocab_size
        if not keep:
            return torch.empty(0, vocab, device=self.model.device), total
        return torch.stack([step.logits[q] for q in keep]), total

    def _load(self, req: Request) -> None:
        """Give a newly opened request its state: a copy of the snapshot it resumes from, or none."""
        seq = req.seq
        if seq in self._work:
            return
        start = seq.committed_len
        state = RecurrentState()
        if start > 0:
            snapshot = self.store.get(seq.node, start)
            if snapshot is None:
                raise RuntimeError(f"a request resumed at {start} without a state snapshot there (radixkv bug)")
            state = snapshot.clone()
        points, chain_from = self.snapshot_points(req.tokens, start), self.chain_start(req.tokens)
        n, page = len(req.tokens), self.page
        spare = frozenset(p for p in ((n - 1) // page * page,) if p >= chain_from and p > start)
        prompt_ends = {p for p in ((n - 1) // page * page, n // page * page) if p >= chain_from}
        splits = frozenset(p for p in points | prompt_ends if p > start)
        self._work[seq] = _Work(state, points, spare - points, chain_from, splits)

    def snapshot_points(self, tokens: list[int], start: int) -> frozenset[int]:
        """Where a request admitted with `tokens`, resuming at `start`, takes snapshots that stay
        (until the store's budget or the KV's eviction drops them): its branch point, the end of
        its KV match where another cached sequence goes on differently (the match's node has a
        child), where later requests sharing that prefix resume. A match that ends where the cached
        sequence ends (the previous turn of the same conversation) is no branch: the chain covers it."""
        node = self.cache.locate(tokens[:len(tokens) - 1], namespace=self.namespace)
        goes_on = getattr(node, "children", None)  # the tree's node: read, never written
        return frozenset({node.end} if node.end > start and goes_on else ())

    def chain_start(self, tokens: list[int]) -> int:
        """From the prompt's last page boundary before its last token on, a request snapshots every
        page boundary it reaches, each replacing its previous one: the latest serves a resend of
        a preempted request's return or the next turn of the conversation. (The first, which a
        resend of the same prompt resumes from, is also kept as a spare: dropped first.)"""
        return (len(tokens) - 1) // self.page * self.page

    def _units(self, plan: Plan) -> list[Unit]:
        """The step's forwards: every one-token continuation together, then each request's spans."""
        decode, alone = [], []
        packed = 0
        for i, (req, n) in enumerate(zip(plan.requests, plan.chunks)):
            start, work = req.seq.committed_len, self._work[req.seq]
            span = Span(i, start, start + n, start, packed)
            packed += n
            if n == 1 and work.state.started:
                decode.append(span)
                continue
            started = work.state.started
            for part in split_span(span, list(work.splits)):
                if part.b - part.a > 1 and started and not self.resumes_chunks:
                    alone.extend(Unit((s,)) for s in one_token_spans(part))
                else:
                    alone.append(Unit((part,)))
                started = True  # later parts continue the state this one leaves
        return ([Unit(tuple(decode))] if decode else []) + alone

    def _run(self, step: _Step, unit: Unit) -> ForwardBatch:
        """One model forward over `unit`; updates the requests' states and collects kept logits."""
        plan, device = step.plan, self.model.device
        reqs = [plan.requests[s.index] for s in unit.spans]
        works = [self._work[r.seq] for r in reqs]
        sub = unit_inputs(step.inputs, step.kv_starts, unit)
        fb = ForwardBatch(self.cache, sub, len(unit.spans) if unit.tokens == 1 else 0, self.layer_masks)
        ids = torch.tensor([r.tokens[s.a:s.b] for r, s in zip(reqs, unit.spans)], device=device)
        positions = torch.stack([torch.arange(s.a, s.b, device=device) for s in unit.spans])
        kept = [(row, t) for row, s in enumerate(unit.spans)
                for t, q in enumerate(s.packed_range()) if q in step.keep]
        offsets = sorted({t for _, t in kept})
        state_cache = StateCache(self.recurrent_layers, self.num_layers, [w.state for w in works])
        with continued_scan(self.model_type, state_cache):
            out = self.model(input_ids=ids, position_ids=positions, cache=state_cache, use_cache=True,
                             logits_to_keep=torch.tensor(offsets, dtype=torch.int64, device=device), radixkv_batch=fb)
        for row, t in kept:
            step.logits[unit.spans[row].packed_range()[t]] = out.logits[row, offsets.index(t)]
        for row, (req, work, span) in enumerate(zip(reqs, works, unit.spans)):
            work.state = RecurrentState.take(state_cache, row, len(unit.spans))
            self._maybe_snapshot(req, work, span.b)
        return fb

    def _maybe_snapshot(self, req: Request, work: _Work, end: int) -> None:
        if end in work.points or end in work.spare:
            self._pending.append(_Pending(req.tokens[:end], work.state.clone(), None, end in work.spare))
        elif end >= work.chain_from and end % self.page == 0 and end > 0:
            self._pending.append(_Pending(req.tokens[:end], work.state.clone(), req))


def _state_group(cache: RadixCache, model_name: str) -> int:
    for g, spec in enumerate(cache.config.groups, start=1):
        if spec.kind == "state":
            return g
    raise ConfigError(f"{model_name} has recurrent layers: its cache_config.groups needs a GroupSpec('state', "
                      f"num_slots) for the state snapshots (cache_config_for adds one)")


def _flops(model: PreTrainedModel) -> Callable[[int], float]:
    """Prefill FLOPs of an n-token prefix (state_store.prefill_flops): every decoder-layer weight (MoE: all
    experts, an overcount of the linear term) and the attention layers' QK / AV."""
    config = model.config.get_text_config(decoder=True)
    layers = getattr(getattr(model, "model", model), "layers", None)
    params = sum(p.numel() for p in layers.parameters()) if layers is not None else model.num_parameters()
    attention = {i for g in layer_groups(config) if g.kind != "recurrent" for i in g.layers}
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return prefill_flops(params, len(attention), config.num_attention_heads * head_dim)
