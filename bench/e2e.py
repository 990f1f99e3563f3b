"""End-to-end generation on CPU: radixkv Engine vs plain `model.generate` vs transformers `generate_batch`.

Same tiny random Llama (seeded; 4 layers, hidden 256, 8 heads / 2 KV heads), same prompts, greedy,
one measured run per system after a short warm-up. Two workloads:

- gsp: `groups` system prompts of `system` tokens, each shared by `per_group` prompts that add
  `own` tokens of their own (SGLang's generated-shared-prefix shape);
- multiturn: `convs` conversations of `turns` turns; turn t's prompt is the whole conversation so far
  (earlier prompts and each system's own answers) plus a new user message;
- unique: gsp's shape with nothing shared (`groups * per_group` prompts of `system + own` tokens).

(a) is the radixkv Engine as shipped (cascade decode on), (f) the same with `cascade=False` (flat
decode only). Peers: (b) `model.generate` one prompt at a time (DynamicCache, sdpa); (c) `generate_batch`
(continuous batching, paged cache, block sharing) with its default ContinuousBatchingConfig, as the
issue measured it; (t) the same with radixkv's block size (16) and token budget.

Reported per system: output tokens/s (all output tokens / wall time), prefill tokens computed vs
skipped (found in a cache), time to first token p50/p90/p99 (all requests of a call arrive at its
start), and for radixkv where its time went. `--repeat N` runs the chosen systems N times each, in
turn (a fresh Engine every time), and reports each system's fastest run with every run's tok/s, so
that load from other processes hits all systems alike. Usage: `python bench/e2e.py [--quick]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# `python bench/e2e.py` puts bench/ first on sys.path, where bench/kernels.py would shadow the
# `kernels` package that transformers probes for at import: drop that entry before importing it.
if sys.path and sys.path[0].rstrip("/").endswith("bench"):
    del sys.path[0]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: E402
from transformers.generation.continuous_batching import cache as cb_cache  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402

from radixkv.cli_args import HelpFormatter, csv_of, one_of, positive_int  # noqa: E402
from radixkv.integrations.stats import GenerateStats  # noqa: E402
from radixkv.integrations.transformers import Engine  # noqa: E402

SEED = 0
VOCAB = 32000  # Llama-2's vocabulary: lm_head is a realistic share of each decode step


def build_model() -> LlamaForCausalLM:
    torch.manual_seed(SEED)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096,
                      initializer_range=0.1, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LlamaForCausalLM(cfg).eval()


def gsp_prompts(groups: int, per_group: int, system: int, own: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(SEED + 1)
    prompts = []
    for _ in range(groups):
        head = torch.randint(0, VOCAB, (system,), generator=g).tolist()
        prompts += [head + torch.randint(0, VOCAB, (own,), generator=g).tolist() for _ in range(per_group)]
    return prompts


@dataclass
class Tally:
    """What one system did over a whole workload."""
    name: str
    wall_s: float = 0.0
    cpu_s: float = 0.0  # process CPU time of the whole workload (steadier than wall time on a shared box)
    output_tokens: int = 0
    computed: int = 0  # prompt tokens whose KV was computed
    skipped: int | None = 0  # prompt tokens found in a cache (None: not measurable)
    ttft_s: list[float] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)  # of the last call
    profile: dict[str, float] = field(default_factory=dict)

    @property
    def tok_s(self) -> float:
        return self.output_tokens / self.wall_s

    @property
    def tok_cpu_s(self) -> float:
        return self.output_tokens / self.cpu_s

    def add(self, wall_s: float, outs: list[list[int]], computed: int, skipped: int | None,
            ttft_s: list[float]) -> None:
        self.wall_s += wall_s
        self.output_tokens += sum(len(o) for o in outs)
        self.computed += computed
        self.skipped = None if skipped is None or self.skipped is None else self.skipped + skipped
        self.ttft_s += ttft_s
        self.outputs = outs


class FirstTokenTimer(BaseStreamer):
    """`model.generate` streamer: the first put() is the prompt, the second the first new token."""

    def __init__(self) -> None:
        self.puts, self.first_token_at = 0, float("nan")

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first_token_at = time.perf_counter()

    def end(self) -> None:
        pass


def run_plain(model: LlamaForCausalLM, prompts: list[list[int]], n: int, tally: Tally) -> None:
    gen = GenerationConfig(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    outs, ttft = [], []
    start = time.perf_counter()
    with torch.inference_mode():
        for p in prompts:
            timer = FirstTokenTimer()
            ids = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                 generation_config=gen, streamer=timer)
            outs.append(ids[0, len(p):].tolist())
            ttft.append(timer.first_token_at - start)
    tally.add(time.perf_counter() - start, outs, sum(map(len, prompts)), 0, ttft)


class PrefixHits:
    """Counts the prompt tokens transformers' paged cache reports as prefix matches (block sharing)."""

    def __init__(self) -> None:
        self.tokens = 0
        self._orig = cb_cache.PagedAttentionCache.search_prefix_match

    def __enter__(self) -> PrefixHits:
        orig, hits = self._orig, self

        def counted(cache: object, request_id: str, prompt_ids: list[int]) -> int:
            matched = orig(cache, request_id, prompt_ids)
            hits.tokens += matched
            return matched

        cb_cache.PagedAttentionCache.search_prefix_match = counted
        return self

    def __exit__(self, *exc: object) -> None:
        cb_cache.PagedAttentionCache.search_prefix_match = self._orig


def run_cb(model: LlamaForCausalLM, prompts: list[list[int]], n: int, tally: Tally,
           cb: ContinuousBatchingConfig | None) -> None:
    """`generate_batch` over all prompts; `cb` None: transformers' default ContinuousBatchingConfig."""
    gen = GenerationConfig(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0, eos_token_id=-1)
    start = time.perf_counter()
    with PrefixHits() as hits:  # generate_batch runs in its own thread: no inference_mode here
        res = model.generate_batch(prompts, generation_config=gen, continuous_batching_config=cb,
                                   record_timestamps=True, progress_bar=False)
    wall = time.perf_counter() - start
    ordered = [res[f"req_{i}"] for i in range(len(prompts))]
    ttft = [o.timestamps[0] - start for o in ordered if o.timestamps]  # perf_counter stamps
    total = sum(map(len, prompts))
    tally.add(wall, [list(o.generated_tokens) for o in ordered], total - hits.tokens, hits.tokens, ttft)


def run_engine(engine: Engine, prompts: list[list[int]], n: int, tally: Tally) -> None:
    outs = engine.generate(prompts, max_new_tokens=n)
    st: GenerateStats = engine.last_stats
    tally.add(st.wall_s, outs, st.prefill_computed, st.prefill_reused, st.ttft_s)
    for k, v in st.profile().items():
        tally.profile[k] = tally.profile.get(k, 0.0) + v


Runner = Callable[[list[list[int]], int, Tally], None]


def gsp(run: Runner, tally: Tally, args: argparse.Namespace) -> None:
    run(gsp_prompts(args.groups, args.per_group, args.system, args.own), args.new, tally)


def unique(run: Runner, tally: Tally, args: argparse.Namespace) -> None:
    run(gsp_prompts(args.groups * args.per_group, 1, args.system, args.own), args.new, tally)


def multiturn(run: Runner, tally: Tally, args: argparse.Namespace) -> None:
    g = torch.Generator().manual_seed(SEED + 2)
    history = [torch.randint(0, VOCAB, (args.system,), generator=g).tolist() for _ in range(args.convs)]
    for _ in range(args.turns):
        prompts = [h + torch.randint(0, VOCAB, (args.own,), generator=g).tolist() for h in history]
        run(prompts, args.new, tally)
        history = [p + o for p, o in zip(prompts, tally.outputs)]


def report(con: Console, workload: str, runs: dict[str, list[Tally]]) -> None:
    tallies = [max(ts, key=lambda t: t.tok_s) for ts in runs.values()]
    t = Table(title=f"{workload}: best of {max(len(ts) for ts in runs.values())} run(s); "
                    "TTFT = time to first token, seconds from the call's start")
    for col in ("system", "out tok/s", "wall s", "tok/CPU s", "prefill computed", "skipped", "TTFT p50", "p90", "p99"):
        t.add_column(col, justify="left" if col == "system" else "right")
    for x in tallies:
        skipped = "n/a" if x.skipped is None else f"{x.skipped:,}"
        ttft = np.percentile(x.ttft_s, [50, 90, 99]) if x.ttft_s else [float("nan")] * 3
        t.add_row(x.name, f"{x.tok_s:.1f}", f"{x.wall_s:.2f}", f"{x.tok_cpu_s:.1f}", f"{x.computed:,}", skipped,
                  *(f"{v:.3f}" for v in ttft))
    con.print(t)
    if any(len(ts) > 1 for ts in runs.values()):
        for name, ts in runs.items():
            con.print(f"  {name}: every run's out tok/s (tok/CPU s) "
                      + ", ".join(f"{x.tok_s:.1f} ({x.tok_cpu_s:.1f})" for x in ts))
    by = {x.name[1]: x for x in tallies}
    if "a" in by and "f" in by:
        best_cpu = {k: max(runs[by[k].name], key=lambda x: x.tok_cpu_s).tok_cpu_s for k in "af"}
        con.print(f"radixkv cascade on / off = {by['a'].tok_s / by['f'].tok_s:.3f}x out tok/s, "
                  f"{best_cpu['a'] / best_cpu['f']:.3f}x out tok/CPU s (best runs); greedy tokens (last call): "
                  f"{'identical' if by['a'].outputs == by['f'].outputs else 'DIFFERENT'}")
    if "a" in by and "b" in by:
        same = "identical" if by["a"].outputs == by["b"].outputs else "DIFFERENT"
        con.print(f"radixkv/generate = {by['a'].tok_s / by['b'].tok_s:.2f}x; greedy tokens (last call): {same}")
    if "a" in by and "c" in by:
        con.print(f"radixkv/generate_batch (default config) = {by['a'].tok_s / by['c'].tok_s:.2f}x")
    if "a" in by and "t" in by:
        con.print(f"radixkv/generate_batch (page 16, 1024-token batches) = {by['a'].tok_s / by['t'].tok_s:.2f}x")
    for key in "af":
        if key in by:
            prof = by[key].profile
            total = sum(prof.values())
            con.print(f"radixkv ({key}) profile: " + ", ".join(f"{k} {v:.2f}s ({100 * v / total:.0f}%)"
                                                             for k, v in prof.items()))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    ap.add_argument("--groups", type=positive_int, default=8, help="gsp: system prompts")
    ap.add_argument("--per-group", type=positive_int, default=8, help="gsp: prompts sharing each system prompt")
    ap.add_argument("--system", type=positive_int, default=512, help="tokens of each system prompt")
    ap.add_argument("--own", type=positive_int, default=64, help="tokens each prompt (or user turn) adds")
    ap.add_argument("--new", type=positive_int, default=32, help="new tokens per request")
    ap.add_argument("--convs", type=positive_int, default=16, help="multiturn: conversations")
    ap.add_argument("--turns", type=positive_int, default=4, help="multiturn: turns per conversation")
    ap.add_argument("--max-batch-tokens", type=positive_int, default=1024, help="radixkv's token budget per forward")
    ap.add_argument("--page-size", type=positive_int, default=16, help="radixkv's page size")
    ap.add_argument("--workloads", type=csv_of(one_of(["gsp", "multiturn", "unique"])), default="gsp,multiturn",
                    help="unique: gsp's shape with nothing shared")
    ap.add_argument("--systems", default="abct", help="which of (a), (f), (b), (c), (t) to run, in this order")
    ap.add_argument("--repeat", type=positive_int, default=1, help="runs of each system, interleaved; the best is reported")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--quick", action="store_true", help="a small smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.groups, args.per_group, args.system, args.own, args.new, args.convs, args.turns = 2, 2, 64, 8, 4, 2, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    model = build_model()
    con = Console(width=200)
    con.print(f"radixkv e2e: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
              f"torch {torch.__version__}, 1-min load average {os.getloadavg()[0]:.1f}; Llama 4x256, 8/2 heads, "
              f"vocab {VOCAB}, fp32, greedy")
    warm = [[1, 2, 3, 4, 5, 6, 7, 8]] * 2
    # Peer (t): generate_batch with the block size and token budget radixkv uses (it is ~4x faster
    # here than with its defaults: 256-token pages, budget and blocks sized for a GPU).
    tuned = ContinuousBatchingConfig(page_size=16, num_blocks=4096, max_batch_tokens=args.max_batch_tokens)
    def engine(cascade: bool) -> Runner:  # a fresh Engine (empty cache) for each run of a workload
        e = Engine(model, num_slots=65536, page_size=args.page_size, max_requests=128, max_context_len=4096,
                   max_batch_tokens=args.max_batch_tokens, cascade=cascade)
        return lambda p, n, t: run_engine(e, p, n, t)

    systems: list[tuple[str, Callable[[], Runner]]] = [
        ("(a) radixkv Engine", lambda: engine(True)),
        ("(f) radixkv Engine, cascade off", lambda: engine(False)),
        ("(b) model.generate, one at a time", lambda: lambda p, n, t: run_plain(model, p, n, t)),
        ("(c) generate_batch, default config", lambda: lambda p, n, t: run_cb(model, p, n, t, None)),
        ("(t) generate_batch, page 16, 1024 tok", lambda: lambda p, n, t: run_cb(model, p, n, t, tuned)),
    ]
    chosen = [s for key in args.systems for s in systems if s[0][1] == key]  # in the order asked for
    for wl_name in args.workloads:
        workload = {"gsp": gsp, "multiturn": multiturn, "unique": unique}[wl_name]
        runs: dict[str, list[Tally]] = {name: [] for name, _ in chosen}
        for _ in range(args.repeat):
            for name, make in chosen:
                run = make()
                run(warm, 2, Tally("warm-up"))
                runs[name].append(Tally(name))
                cpu = time.process_time()
                workload(run, runs[name][-1], args)
                runs[name][-1].cpu_s = time.process_time() - cpu
        report(con, wl_name, runs)


if __name__ == "__main__":
    main()
