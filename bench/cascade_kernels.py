"""Flat vs cascade decode of one gsp decode step: bytes moved and time, side by side.

    .venv/bin/python bench/cascade_kernels.py [--groups 8 --per-group 8 --system 512 --own 80]

The batch is SGLang's generated-shared-prefix shape built through a real RadixCache: `groups`
system prompts of `system` tokens, each shared by `per_group` requests that add `own` tokens of
their own (prompt tail + tokens decoded so far). Flat `decode_attention` reads every request's
whole context; `cascade_decode` runs the plan `cache.batch(seqs, cascade=True)` builds, reading
each shared run once per group and kv head.

Bytes counted (h kv heads, H query heads, d head_dim, e element size, S = sum(seq_lens)):
    decode_attention  2 * S * h * d * e + 4 * S
    cascade_decode    sum over groups g of B_g * (2 * S_g * h * d * e + 8 * S_g)  (each group's KV
                      once per row block B_g; slots int64) + 8 * E * H * d (fp32 partials written
                      and read by the merge) for E entries
On CUDA: `triton.testing.do_bench` of the unchecked launchers. On CPU: the torch references'
process CPU time on one thread, interleaved rounds, best of each, in this layer shape and in
bench/e2e.py's model's (8 heads of dim 32 over 2 kv heads).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from radixkv import CacheConfig, RadixCache, kernels  # noqa: E402
from radixkv.cascade import cascade_pays  # noqa: E402
from radixkv.cli_args import HelpFormatter, positive_int  # noqa: E402
from radixkv.kernels.cascade import launch_config  # noqa: E402

SEED = 1


def gsp_batch(a: argparse.Namespace, device: str, dtype: torch.dtype, kv_heads: int, heads: int, dim: int,
              stagger: bool = False, max_context_len: int = 1024) -> dict:
    """One decode step of the gsp shape: the cache, its flat inputs and its cascade plan (`stagger`:
    the i-th request of a group has i more tokens of its own, so rows sit at different positions)."""
    g = torch.Generator(device="cpu").manual_seed(SEED)
    n = a.groups * a.per_group
    longest = a.system + a.own + (a.per_group - 1) * stagger + 1  # the decode position included
    pages = a.groups * (-(-a.system // 16) + a.per_group * (-(-(longest - a.system) // 16) + 1))
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=kv_heads, head_dim=dim,
                                   num_slots=max(16384, 16 * pages), page_size=16, max_requests=n,
                                   max_context_len=max(max_context_len, longest), dtype=dtype,
                                   device=device))
    for buf in (cache.kv_pool.k_buffer[0], cache.kv_pool.v_buffer[0]):
        buf.copy_(torch.randn(buf.shape, generator=g).to(buf))
    seqs = []
    for _ in range(a.groups):
        head = torch.randint(0, 32000, (a.system,), generator=g).tolist()
        for i in range(a.per_group):
            prompt = head + torch.randint(0, 32000, (a.own + i * stagger,), generator=g).tolist()
            seq = cache.open(prompt)
            cache.reserve(seq, len(prompt) - seq.kv_len)
            cache.commit(seq, prompt[seq.committed_len:])
            seqs.append(seq)
    for seq in seqs:
        cache.reserve(seq, 1)
    # every plan, paying or not (cache.batch skips those that do not): this bench measures where it pays
    b = cache.seqs.batch(seqs, True)
    return dict(cache=cache, b=b, q=torch.randn(n, heads, dim, generator=g).to(device=device, dtype=dtype))


def ops(t: dict, e: int) -> list[tuple[str, int, Callable, Callable]]:
    """(name, bytes moved, unchecked launcher, torch reference) for flat and cascade decode."""
    cache, b, q = t["cache"], t["b"], t["q"]
    kb, vb, plan = cache.kv_pool.k_buffer[0], cache.kv_pool.v_buffer[0], b.cascade
    (heads, dim), kv_heads = q.shape[1:], kb.shape[1]
    flat = (q, kb, vb, cache.req_pool.req_to_token, b.rows, b.seq_lens, dim**-0.5)
    s, longest = int(b.seq_lens.sum()), int(b.seq_lens.max())
    casc = (q, kb, vb, plan, dim**-0.5)
    return [
        ("decode_attention", 2 * s * kv_heads * dim * e + 4 * s,
         lambda: kernels.decode_attention_unchecked(*flat, longest), lambda: kernels.decode_attention_ref(*flat)),
        ("cascade_decode", cascade_bytes(plan, kv_heads, heads, dim, e),
         lambda: kernels.cascade_decode_launch(*casc), lambda: kernels.cascade_decode_ref(*casc)),
    ]


def cascade_bytes(plan: kernels.CascadePlan, kv_heads: int, heads: int, dim: int, e: int) -> int:
    """The cascade_decode model of the module docstring."""
    total = 8 * plan.num_entries * heads * dim
    for lvl in plan.levels:
        blocks = launch_config(lvl.max_rows, heads // kv_heads, dim, {2: torch.float16, 4: torch.float32}[e])["BLOCK_R"]
        rows = (lvl.qo_indptr[1:] - lvl.qo_indptr[:-1]).long()
        slots = (lvl.kv_indptr[1:] - lvl.kv_indptr[:-1]).long()
        total += int((-(-rows // blocks) * slots).sum()) * (2 * kv_heads * dim * e + 8)
    return total


def interleaved(fns: list[Callable[[], object]], rounds: int) -> list[float]:
    """Best process CPU milliseconds of each function over `rounds` rounds that call each once, in
    turn (CPU time, not wall time: waiting for a core shared with other processes is not counted)."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = time.process_time()
            fn()
            best[i] = min(best[i], (time.process_time() - t0) * 1e3)
    return best


def gsp_parser(doc: str | None, groups: int, own: int, own_help: str = "") -> argparse.ArgumentParser:
    """The shared-system-prompt decode batch's options (this script's and bench/cascade_masked.py's)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=HelpFormatter)
    ap.add_argument("--groups", type=positive_int, default=groups, help="system prompts")
    ap.add_argument("--per-group", type=positive_int, default=groups, help="requests sharing each system prompt")
    ap.add_argument("--system", type=positive_int, default=512, help="tokens of each system prompt")
    ap.add_argument("--own", type=positive_int, default=own, help=f"tokens of each request's own{own_help}")
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = gsp_parser(__doc__, 8, 80)
    ap.add_argument("--rounds", type=positive_int, default=9, help="CPU: interleaved rounds, best of each")
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda:
        os.environ.pop("TRITON_INTERPRET", None)  # the references run; never the interpreter here
    device, dtype = ("cuda", torch.float16) if cuda else ("cpu", torch.float32)
    e = torch.finfo(dtype).bits // 8
    shapes = (("Llama-3-8B layer (8 kv heads, 32 heads, dim 128)", 8, 32, 128),
              ("bench/e2e.py's model (2 kv heads, 8 heads, dim 32)", 2, 8, 32))
    print(f"gsp decode step: {a.groups} x {a.per_group} requests, {a.system} shared + {a.own} own tokens; {dtype}")
    for label, kv_heads, heads, dim in shapes:
        t = gsp_batch(a, device, dtype, kv_heads, heads, dim)
        (flat_name, flat_b, flat_fn, flat_ref), (casc_name, casc_b, casc_fn, casc_ref) = ops(t, e)
        pays = cascade_pays(t["b"].cascade.saved_positions, 2 * kv_heads * dim * e, torch.device("cuda"))
        print(f"{label}: flat moves {flat_b / 1e6:.1f} MB, cascade {casc_b / 1e6:.1f} MB "
              f"({flat_b / casc_b:.2f}x fewer); on CUDA the Engine would run {'cascade' if pays else 'flat'}")
        if cuda:
            import triton.testing

            ms = [triton.testing.do_bench(fn) for fn in (flat_fn, casc_fn)]
            print(f"  triton p50: flat {ms[0]:.3f} ms, cascade {ms[1]:.3f} ms")
        else:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # CPU time of one thread: idle OpenMP workers spinning would count too
            best = interleaved([flat_ref, casc_ref], a.rounds)
            torch.set_num_threads(threads)
            print(f"  torch references, 1 thread, best CPU time of {a.rounds} interleaved rounds: flat "
                  f"{best[0]:.3f} ms, cascade {best[1]:.3f} ms (cascade / flat = {best[1] / best[0]:.2f})")
    if not cuda:
        print("no CUDA device: no Triton timings (the kernels are checked against the references under "
              "TRITON_INTERPRET=1 only)")


if __name__ == "__main__":
    main()
