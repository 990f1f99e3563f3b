"""Prefix hit rate of a hybrid (attention + recurrent) model on a multi-turn workload, by snapshot policy.

A hybrid model can resume a cached prefix only where it has the recurrent state too, so the hit rate
depends on where states are kept:

- `snapshots-flops`: radixkv's policy (integrations/recurrent.py): branch points, and per request a
  chain from the prompt's last page boundary through decode of which the latest is kept; a full
  state group gives up the snapshot with the lowest recency + FLOPs saved per byte (Marconi's
  choice, state_store.py); `snapshots-lru`: the same, giving up the least recently used;
- `align-B`: vLLM's "align" mode: a state at every multiple of a block of B tokens, nowhere else;
- `none`: no state kept (no snapshot taken), so nothing is reused;
- `kv bound`: what the tree's KV alone would give (each request's KV match at admission): the rate
  a pure attention model would see with the same arrivals, an upper bound for the others.

Workload: `--convs` conversations over `--systems` shared system prompts; each turn appends a user
message (uniform in [16, 48] tokens) to the conversation so far (prompt + answer) and generates
`--answer` tokens greedily; all conversations' turn t run in one `generate` call. Same model, same
prompts (greedy output does not depend on the policy: checked), same state budget for every policy.
Prints one line per policy: hit rate over all prompt tokens and over turns >= 2. `--state-bytes`
prints instead the per-request state of full-size configs (transformers' defaults: Jamba-v0.1,
Qwen3-Next-80B-A3B, Falcon-H1), measured on one mixer built at full size and run in bf16.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

if sys.path and sys.path[0].rstrip("/").endswith("bench"):  # see bench/e2e.py: bench/kernels.py shadows
    del sys.path[0]  # the `kernels` package transformers probes for

import torch  # noqa: E402

from radixkv import GroupSpec  # noqa: E402
from radixkv.integrations.layer_groups import layer_groups  # noqa: E402
from radixkv.integrations.recurrent import RecurrentRunner  # noqa: E402
from radixkv.integrations.recurrent_state import RecurrentState, StateCache  # noqa: E402
from radixkv.integrations.model_cache import kv_layers  # noqa: E402
from radixkv.integrations.transformers import Engine  # noqa: E402
from radixkv.pools import TokenToKVPool  # noqa: E402
from radixkv.testing.hybrid_models import FAMILIES, build_hybrid  # noqa: E402


class MeasuredRunner(RecurrentRunner):
    """radixkv's policy, also summing the KV match of every admitted request (the `kv bound`)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.kv_matched = 0

    def snapshot_points(self, tokens: list[int], start: int) -> frozenset[int]:
        self.kv_matched += self.cache.locate(tokens[:len(tokens) - 1]).end  # full KV, snapshots or not
        return super().snapshot_points(tokens, start)


class AlignedRunner(MeasuredRunner):
    """vLLM's align mode: snapshots only at multiples of `block` tokens (prefill and decode alike)."""

    block = 256

    def snapshot_points(self, tokens: list[int], start: int) -> frozenset[int]:
        super().snapshot_points(tokens, start)
        limit = self.cache.config.max_context_len
        return frozenset(range((start // self.block + 1) * self.block, limit + 1, self.block))

    def chain_start(self, tokens: list[int]) -> int:
        return self.cache.config.max_context_len + 1  # no chain: block multiples only


class NoStateRunner(MeasuredRunner):
    """Takes no snapshot at all."""

    def snapshot_points(self, tokens: list[int], start: int) -> frozenset[int]:
        super().snapshot_points(tokens, start)
        return frozenset()

    def chain_start(self, tokens: list[int]) -> int:
        return self.cache.config.max_context_len + 1


def conversations(args: argparse.Namespace) -> tuple[list[list[int]], list[list[list[int]]]]:
    """System prompt of each conversation, and its user messages per turn."""
    g = torch.Generator().manual_seed(args.seed)
    systems = [torch.randint(0, 256, (args.system,), generator=g).tolist() for _ in range(args.systems)]
    firsts = [systems[c % args.systems] for c in range(args.convs)]
    msgs = [[torch.randint(0, 256, (int(torch.randint(16, 49, (1,), generator=g)),), generator=g).tolist()
             for _ in range(args.turns)] for _ in range(args.convs)]
    return firsts, msgs


def run(model: torch.nn.Module, policy: str, args: argparse.Namespace, budget: int) -> tuple[list, ...]:
    """Every turn of every conversation under `policy`: per turn (reused, kv-matched, prompt) tokens,
    every answer, and (model forwards, seconds)."""
    engine = Engine(model, num_slots=8192, page_size=args.page_size, dtype=torch.float32, max_context_len=1024,
                    max_requests=args.convs, max_batch_tokens=256, groups=(GroupSpec("state", budget),))
    if policy.startswith("align"):
        AlignedRunner.block = int(policy.split("-")[1])
        engine.recurrent = AlignedRunner(model, engine.cache, None)
    else:
        engine.recurrent = (NoStateRunner if policy == "none" else MeasuredRunner)(model, engine.cache, None)
    engine.recurrent.store.policy = "lru" if policy == "snapshots-lru" else "flops"
    engine.step_hooks[:] = [engine.recurrent.flush]
    engine.recurrent.resumes_chunks &= not args.token_by_token
    firsts, msgs = conversations(args)
    history = [list(s) for s in firsts]
    reused, kv, total, outputs = [], [], [], []
    forwards: list[int] = []
    hook = model.register_forward_hook(lambda *_: forwards.append(1))
    start = time.perf_counter()
    for t in range(args.turns):
        prompts = [h + m[t] for h, m in zip(history, msgs)]
        before = engine.recurrent.kv_matched
        answers = engine.generate(prompts, max_new_tokens=args.answer)
        reused.append(engine.last_stats.prefill_reused)
        kv.append(engine.recurrent.kv_matched - before)
        total.append(engine.last_stats.prompt_tokens)
        outputs.extend(answers)
        history = [p + a for p, a in zip(prompts, answers)]
    hook.remove()
    return reused, kv, total, outputs, (len(forwards), time.perf_counter() - start)


def full_size_state_bytes() -> None:
    """Per-request recurrent state of full-size configs: one mixer at full size, one bf16 forward."""
    import transformers
    from transformers.models.falcon_h1 import modeling_falcon_h1 as falcon
    from transformers.models.jamba.modeling_jamba import JambaMambaMixer
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet
    for name, config, mixer in [("Jamba-v0.1", transformers.JambaConfig(), JambaMambaMixer),
                                ("Qwen3-Next-80B-A3B", transformers.Qwen3NextConfig(), Qwen3NextGatedDeltaNet),
                                ("Falcon-H1 (FalconH1Config())", transformers.FalconH1Config(), falcon.FalconH1Mixer)]:
        module = mixer(config, layer_idx=0)
        if mixer is falcon.FalconH1Mixer:  # set by FalconH1Model, not by the mixer itself
            module.register_buffer("mup_vector", falcon.compute_mup_vector(config), persistent=False)
        module = module.to(torch.bfloat16)
        cache = StateCache({0: 1}, 1, [RecurrentState()])
        with torch.no_grad():
            module(torch.randn(1, 5, config.hidden_size, dtype=torch.bfloat16), cache=cache)
        per_layer = RecurrentState.take(cache, 0, 1).nbytes
        layers = sum(len(g.layers) for g in layer_groups(config) if g.kind == "recurrent")
        print(f"{name}: {per_layer:,} B per recurrent layer x {layers} of {config.num_hidden_layers} layers = "
              f"{per_layer * layers / 2**20:.2f} MiB per request; {pool_bytes(config)}")


def pool_bytes(config: Any) -> str:
    """KV bytes per token slot (bf16) of the Engine's pool, attention layers only vs every layer."""
    cfg = config.get_text_config(decoder=True)
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    shape = (1, cfg.num_hidden_layers, cfg.num_key_value_heads, dim, torch.bfloat16, "cpu")
    ours, every = TokenToKVPool(*shape, kv_layers=kv_layers(config)), TokenToKVPool(*shape)
    return (f"pool KV {ours.bytes_per_token:,} B per token ({len(ours.kv_layers)} attention layers) vs "
            f"{every.bytes_per_token:,} B with a buffer for every layer ({ours.bytes_per_token / every.bytes_per_token:.3f})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default="falcon_h1", choices=FAMILIES)
    parser.add_argument("--convs", type=int, default=16, help="conversations")
    parser.add_argument("--systems", type=int, default=2, help="distinct system prompts")
    parser.add_argument("--system", type=int, default=96, help="system prompt tokens")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--answer", type=int, default=16, help="new tokens per turn")
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--policies", default="snapshots-flops,snapshots-lru,align-64,align-256,none")
    parser.add_argument("--snapshots-per-request", type=int, default=4, help="state budget, in states per conversation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--token-by-token", action="store_true",
                        help="run chunks that continue a state token by token (as Jamba did before recurrent_scan.py)")
    parser.add_argument("--state-bytes", action="store_true", help="print full-size configs' state bytes instead")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.state_bytes:
        full_size_state_bytes()
        return
    model = build_hybrid(args.model)
    probe = Engine(model, num_slots=256, page_size=1, dtype=torch.float32, max_context_len=64)
    probe.generate([[1, 2, 3]], max_new_tokens=1)
    one = probe.recurrent.store.nbytes // len(probe.recurrent.store)
    budget = args.snapshots_per_request * args.convs
    print(f"{args.model} (tests' tiny config): {one:,} bytes of recurrent state per request; "
          f"a state group of {budget} snapshots ({budget * one:,} bytes) for every policy")
    baseline = None
    for policy in args.policies.split(","):
        reused, kv, total, outputs, (forwards, seconds) = run(model, policy, args, budget)
        assert baseline is None or outputs == baseline, f"{policy} changed the greedy output"
        baseline = outputs
        later = sum(total[1:])
        print(f"{policy:>10}: hit rate {sum(reused) / sum(total):.3f} ({sum(reused)}/{sum(total)} prompt tokens), "
              f"turns>=2 {sum(reused[1:]) / later:.3f}; kv bound {sum(kv) / sum(total):.3f}, "
              f"turns>=2 {sum(kv[1:]) / later:.3f}; {forwards} model forwards, {seconds:.1f} s")


if __name__ == "__main__":
    main()
