"""Sliding-window KV that the Engine frees: bytes held per request, and multi-turn prefix hit rate.

Model: a tiny random Gemma 3 with Gemma-3-27B's layer pattern (62 layers, every 6th full: 10 full,
52 sliding over `--window` tokens; one KV head of 16 dims: every layer's token costs the same, so
byte ratios are layer-token ratios). The Engine's window layers keep K/V in a pool of their own
(CacheConfig.groups, radixkv/cache_windows.py).

`held` (default): `--requests` requests of `--context` tokens (prompt + `--answer` new tokens) run
together. After every step, for each running request, the KV it holds is read off the cache:
full layers, every position it has slots for; window layers, its window pages the cache may not
free (its private pages and the tree's pages its lock protects: radix/windows.py `protected`),
counted from the group's ledger and the tree, not computed from W. Window pages the tree keeps
beyond that (reuse, evicted first when the pool runs short) are reported apart. The ratio is to
keeping all window-layer KV (every layer holding every position): peak over the run, and at the
last decode step. Floor: (10 + 52 * W / ctx) / 62.

`--family llama4` (held only): Llama 4 Scout's layer pattern instead (48 layers, every 4th full
without RoPE: 12 full, 36 chunked with chunk `--window`), its chunked layers in a chunk group (KV of
the current chunk only), or with `--as-window` in a window group of W = chunk (last round's way).
Floor (chunk): (12 + 36 * (C / 2) / ctx) / 48 on average over positions.

`hits`: prefix hit rate (prompt tokens reused / prompt tokens, `last_stats.prefill_reused`) of a
multi-turn workload (`--convs` conversations over 2 shared system prompts of 96 tokens, `--turns`
turns, each a user message of 16-48 tokens and a 16-token answer, all conversations' turn t in one
generate) under one KV budget in layer-token slots, for: radixkv (full pool + window pools of
their own, window KV freed outside the window and tombstoned under pressure) and full-KV-only
caching (today's cache: every layer keeps every token in one pool, the same budget).
"""

from __future__ import annotations

import argparse
import sys

if sys.path and sys.path[0].rstrip("/").endswith("bench"):  # see bench/e2e.py: bench/kernels.py shadows
    del sys.path[0]  # the `kernels` package transformers probes for

import torch  # noqa: E402
import transformers  # noqa: E402

from radixkv import GroupSpec  # noqa: E402
from radixkv.integrations.layer_groups import layer_groups  # noqa: E402
from radixkv.integrations.transformers import Engine  # noqa: E402
from radixkv.radix.windows import protected  # noqa: E402

LAYERS, EVERY = 62, 6  # Gemma 3 27B: 62 layers, sliding_window_pattern 6
LLAMA4_LAYERS, LLAMA4_EVERY = 48, 4  # Llama 4 Scout: 48 layers, every 4th full attention without RoPE


def llama4(chunk: int) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.Llama4TextConfig(vocab_size=256, hidden_size=32, intermediate_size=32, intermediate_size_mlp=32,
                                        num_hidden_layers=LLAMA4_LAYERS, num_attention_heads=1, num_key_value_heads=1,
                                        head_dim=16, attention_chunk_size=chunk, num_local_experts=1,
                                        interleave_moe_layer_step=LLAMA4_LAYERS, max_position_embeddings=8192,
                                        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return transformers.Llama4ForCausalLM(cfg).eval()


def model(window: int, layers: int = LAYERS) -> torch.nn.Module:
    torch.manual_seed(0)
    types = ["full_attention" if (i + 1) % EVERY == 0 else "sliding_attention" for i in range(layers)]
    cfg = transformers.Gemma3TextConfig(vocab_size=256, hidden_size=32, intermediate_size=32, num_hidden_layers=layers,
                                        num_attention_heads=1, num_key_value_heads=1, head_dim=16,
                                        sliding_window=window, layer_types=types, max_position_embeddings=8192,
                                        query_pre_attn_scalar=16, bos_token_id=None, eos_token_id=None,
                                        pad_token_id=None)
    return transformers.Gemma3ForCausalLM(cfg).eval()


def window_groups(m: torch.nn.Module, slots: int, as_window: bool = False) -> tuple[GroupSpec, ...]:
    """A window group per sliding layer group, a chunk group per chunked one (`as_window`: a window of W = chunk)."""
    return tuple(GroupSpec("window" if g.kind == "sliding" or as_window else "chunk", slots, size=g.window or g.chunk,
                           layers=g.layers) for g in layer_groups(m.config) if g.kind in ("sliding", "chunked"))


def held_window_tokens(engine: Engine) -> tuple[list[int], int]:
    """Per open Sequence, window tokens the cache may not free for it; and the tree's other window tokens."""
    cache = engine.cache
    group = cache.groups[0]
    ps, g = group.page_size, group.index - 1
    keep = {n.id: protected(n, group.reach, cache.page_size)
            for n in cache.tree.nodes() if n.parent is not None and n.secondary[g] is not None}
    per_seq = []
    for seq in cache.sequences():
        node, tokens = seq.node, 0
        while (node.parent is not None
               and node.end > seq.committed_len - group.window):  # (>= W - 1 back: all it may hold)
            tokens += keep.get(node.id, 0)
            node = node.parent
        private = seq.kv_len - seq.tree_len
        per_seq.append(tokens + -(-private // ps) * ps)
    cached = sum(len(n.secondary[g]) for n in cache.tree.nodes() if n.parent is not None and n.secondary[g] is not None)
    return per_seq, cached * ps - sum(keep.values())


def held(args: argparse.Namespace) -> None:
    m = llama4(args.window) if args.family == "llama4" else model(args.window)
    layers = LLAMA4_LAYERS if args.family == "llama4" else LAYERS
    ctx, ps = args.context, args.page_size
    slots = args.requests * (ctx + ps)
    window_slots = args.requests * (args.window + 2 * ps) + args.chunk + ps
    window_slots = -(-window_slots // ps) * ps
    engine = Engine(m, num_slots=slots, page_size=ps, max_batch_tokens=args.chunk, max_context_len=ctx + ps,
                    max_requests=args.requests, dtype=torch.float32,
                    groups=window_groups(m, window_slots, args.as_window), cascade=False)
    nw = len(engine.cache.groups[0].spec.layers)
    nf = layers - nw
    samples: dict[str, list[tuple[float, int]]] = {"forward": [], "between": []}
    kept: list[int] = []

    def sample(when: str) -> None:
        per_seq, tree_kept = held_window_tokens(engine)
        for seq, w in zip(engine.cache.sequences(), per_seq):
            samples[when].append(((nf * seq.kv_len + nw * w) / (layers * ctx), w))
        kept.append(tree_kept)

    batch = engine.cache.batch

    def sampled_batch(*a: object, **k: object) -> object:  # a step's chunks are reserved now: count them too
        sample("forward")
        return batch(*a, **k)

    engine.cache.batch = sampled_batch  # type: ignore[method-assign]
    engine.step_hooks.append(lambda: sample("between"))
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 256, (ctx - args.answer,), generator=g).tolist() for _ in range(args.requests)]
    engine.generate(prompts, max_new_tokens=args.answer, do_sample=False)
    engine.cache.check_invariants()
    last, fwd, between = samples["between"][-args.requests:], samples["forward"], samples["between"]
    chunked = args.family == "llama4" and not args.as_window
    floor = (nf + nw * (args.window / 2 if chunked else args.window) / ctx) / layers
    decode = [w for _, w in between[-args.requests * (args.answer - 1):]]  # window tokens held at decode steps
    print(f"held {args.family} {engine.cache.groups[0].spec.kind} size={args.window} ctx={ctx} page={ps} "
          f"chunk={args.chunk} requests={args.requests} window_pool={window_slots}: mean window tokens held per "
          f"request between steps {sum(w for _, w in between) / len(between):.1f} (decode steps "
          f"{sum(decode) / len(decode):.1f}); ratio at the end {max(r for r, _ in last):.4f} (window tokens "
          f"{max(w for _, w in last)}), peak between steps {max(r for r, _ in between):.4f} (window tokens "
          f"{max(w for _, w in between)}), peak during a forward {max(r for r, _ in fwd):.4f} (window tokens "
          f"{max(w for _, w in fwd)}), floor {floor:.4f}; tree keeps beyond that: max {max(kept)} window tokens "
          f"({max(kept) / window_slots:.2f} of the window pool)")


def conversations(convs: int, turns: int, seed: int = 0) -> tuple[list[list[int]], list[list[list[int]]]]:
    g = torch.Generator().manual_seed(seed)
    systems = [torch.randint(0, 256, (96,), generator=g).tolist() for _ in range(2)]
    msgs = [[torch.randint(0, 256, (int(torch.randint(16, 49, (1,), generator=g)),), generator=g).tolist()
             for _ in range(turns)] for _ in range(convs)]
    return [list(systems[c % 2]) for c in range(convs)], msgs


def hits(args: argparse.Namespace) -> None:
    layers = EVERY * 2  # the pattern's ratio (1 full : 5 sliding), fewer layers: hit rates do not depend on depth
    m = model(args.window, layers)
    nw = sum(len(g.layers) for g in layer_groups(m.config) if g.kind == "sliding")
    ps, budget = args.page_size, args.budget * layers  # layer-token slots, the same for both
    runs = {"full-KV only": dict(num_slots=args.budget, groups=())}
    # full pool F, window pools share * F each layer
    full = int(budget // (layers - nw + nw * args.window_share)) // ps * ps
    runs["radixkv windows"] = dict(num_slots=full, groups=window_groups(m, int(full * args.window_share) // ps * ps))
    outputs = {}
    for name, opts in runs.items():
        engine = Engine(m, page_size=ps, max_batch_tokens=256, max_context_len=1024, max_requests=args.convs,
                        dtype=torch.float32, **opts)
        used = sum(b.shape[0] for b in engine.cache.kv_pool.k_buffer)
        assert used <= budget, (name, used, budget)
        firsts, msgs = conversations(args.convs, args.turns)
        history, reused, total, later, later_total, outs = firsts, 0, 0, 0, 0, []
        for t in range(args.turns):
            prompts = [h + msg[t] for h, msg in zip(history, msgs)]
            answers = engine.generate(prompts, max_new_tokens=16, do_sample=False)
            reused += engine.last_stats.prefill_reused
            total += engine.last_stats.prompt_tokens
            if t:
                later += engine.last_stats.prefill_reused
                later_total += engine.last_stats.prompt_tokens
            history = [p + a for p, a in zip(prompts, answers)]
            outs.append(answers)
        engine.cache.check_invariants()
        outputs[name] = outs
        print(f"hits {name}: W={args.window} page={ps} budget={budget} layer-slots (used {used}): hit rate "
              f"{reused / total:.3f} ({later / later_total:.3f} turns >= 2), {total} prompt tokens, "
              f"full-KV tokens cached {engine.cache.sizes().cached}")
    assert len({str(o) for o in outputs.values()}) == 1, "greedy output differs between the caches"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", nargs="?", choices=["held", "hits"], default="held")
    p.add_argument("--window", type=int, default=64, help="sliding window, or chunk with --family llama4")
    p.add_argument("--family", choices=["gemma3", "llama4"], default="gemma3", help="layer pattern (held)")
    p.add_argument("--as-window", action="store_true", help="llama4: chunked layers in a window group of W = chunk")
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--answer", type=int, default=16)
    p.add_argument("--requests", type=int, default=2)
    p.add_argument("--chunk", type=int, default=128, help="max_batch_tokens (prefill chunk)")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--convs", type=int, default=16)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--budget", type=int, default=1024, help="full-KV-only pool in tokens (budget = that x layers)")
    p.add_argument("--window-share", type=float, default=0.5, help="window pool per layer / full pool (radixkv)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    (held if args.mode == "held" else hits)(args)


if __name__ == "__main__":
    main()
