"""Prefix hit rate of a hybrid (attention + recurrent) model on a multi-turn workload, by snapshot policy.

A hybrid model can resume a cached prefix only where it has the recurrent state too, so the hit rate
depends on where states are kept:

- `snapshots`: radixkv's policy (integrations/recurrent.py): branch point, the prompt's last page
  boundaries, the latest page boundary of decode;
- `align-B`: vLLM's "align" mode: a state at every multiple of a block of B tokens, nowhere else;
- `none`: no state kept (a state store of 0 bytes), so nothing is reused;
- `kv bound`: what the tree's KV alone would give (the match at admission): the rate a pure
  attention model would see, an upper bound for the others.

Workload: `--convs` conversations over `--systems` shared system prompts; each turn appends a user
message (uniform in [16, 48] tokens) to the conversation so far (prompt + answer) and generates
`--answer` tokens greedily; all conversations' turn t run in one `generate` call. Same model, same
prompts (greedy output does not depend on the policy: checked), same state budget for every policy.
Prints one line per policy: hit rate over all prompt tokens and over turns >= 2.
"""

from __future__ import annotations

import argparse

import torch

from radixkv.integrations.recurrent import RecurrentRunner
from radixkv.integrations.transformers import Engine
from radixkv.testing.hybrid_models import FAMILIES, build_hybrid


class AlignedRunner(RecurrentRunner):
    """vLLM's align mode: snapshots only at multiples of `block` tokens (prefill and decode alike)."""

    block = 256

    def snapshot_points(self, tokens: list[int], start: int) -> frozenset[int]:
        limit = self.cache.config.max_context_len
        return frozenset(range((start // self.block + 1) * self.block, limit + 1, self.block))


def conversations(args: argparse.Namespace) -> tuple[list[list[int]], list[list[list[int]]]]:
    """System prompt of each conversation, and its user messages per turn."""
    g = torch.Generator().manual_seed(args.seed)
    systems = [torch.randint(0, 256, (args.system,), generator=g).tolist() for _ in range(args.systems)]
    firsts = [systems[c % args.systems] for c in range(args.convs)]
    msgs = [[torch.randint(0, 256, (int(torch.randint(16, 49, (1,), generator=g)),), generator=g).tolist()
             for _ in range(args.turns)] for _ in range(args.convs)]
    return firsts, msgs


def run(model: torch.nn.Module, policy: str, args: argparse.Namespace, budget: int) -> tuple[list[int], ...]:
    engine = Engine(model, num_slots=8192, page_size=args.page_size, dtype=torch.float32, max_context_len=1024,
                    max_requests=args.convs, max_batch_tokens=256)
    if policy.startswith("align"):
        AlignedRunner.block = int(policy.split("-")[1])
        engine.recurrent = AlignedRunner(model, engine.cache, None, budget)
        engine.step_hooks[:] = [engine.recurrent.flush]
    elif policy == "none":
        engine.recurrent = RecurrentRunner(model, engine.cache, None, 0)
        engine.step_hooks[:] = [engine.recurrent.flush]
    else:
        engine.recurrent = RecurrentRunner(model, engine.cache, None, budget)
        engine.step_hooks[:] = [engine.recurrent.flush]
    firsts, msgs = conversations(args)
    history = [list(s) for s in firsts]
    reused, kv, total, outputs = [], [], [], []
    for t in range(args.turns):
        prompts = [h + m[t] for h, m in zip(history, msgs)]
        kv.append(sum(engine.cache.match_prefix(p[:-1]).length for p in prompts))
        answers = engine.generate(prompts, max_new_tokens=args.answer)
        reused.append(engine.last_stats.prefill_reused)
        total.append(engine.last_stats.prompt_tokens)
        outputs.extend(answers)
        history = [p + a for p, a in zip(prompts, answers)]
    state_bytes = engine.recurrent.store.nbytes // max(1, len(engine.recurrent.store))
    return reused, kv, total, outputs, [state_bytes]


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
    parser.add_argument("--policies", default="snapshots,align-64,align-256,none")
    parser.add_argument("--snapshots-per-request", type=int, default=4, help="state budget, in states per conversation")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = build_hybrid(args.model)
    probe = Engine(model, num_slots=256, page_size=1, dtype=torch.float32, max_context_len=64)
    probe.generate([[1, 2, 3]], max_new_tokens=1)
    one = probe.recurrent.store.nbytes // len(probe.recurrent.store)
    budget = args.snapshots_per_request * args.convs * one
    print(f"{args.model} (tests' tiny config): {one:,} bytes of recurrent state per request; "
          f"budget {budget:,} bytes for every policy")
    baseline = None
    for policy in args.policies.split(","):
        reused, kv, total, outputs, _ = run(model, policy, args, budget)
        assert baseline is None or outputs == baseline, f"{policy} changed the greedy output"
        baseline = outputs
        later = sum(total[1:])
        print(f"{policy:>10}: hit rate {sum(reused) / sum(total):.3f} ({sum(reused)}/{sum(total)} prompt tokens), "
              f"turns>=2 {sum(reused[1:]) / later:.3f}; kv bound {sum(kv) / sum(total):.3f}, "
              f"turns>=2 {sum(kv[1:]) / later:.3f}")


if __name__ == "__main__":
    main()
