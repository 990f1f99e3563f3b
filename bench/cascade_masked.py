"""Masked (sliding-window, chunked) decode: flat vs cascade, K/V bytes the kernels load and time.

    .venv/bin/python bench/cascade_masked.py [--groups 4 --per-group 4 --system 512 --own 64]

One decode step of SGLang's generated-shared-prefix shape through a real RadixCache (page 16):
`groups` system prompts of `system` tokens, each shared by `per_group` requests with `own` tokens of
their own; bench/e2e.py's layer shape (2 kv heads, 8 query heads, head_dim 32), fp32. For each mask
(windows shorter than the shared prefix, straddling it, longer than every request; chunks):

- flat: `decode_attention` (reads each request's `[first_key, seq_len)` through req_to_token);
- cascade: `cascade_decode` on the plan `cache.batch(seqs, cascade=True)` builds, as a GPU runs it
  (the kernel masks keys by position and streams only the part of a run its rows see);
- cascade, cut: the same on `radixkv.cascade.for_layer`'s plan (runs cut to the keys some row sees:
  what the Engine runs off CUDA).

Bytes are counted, not modelled: every K/V element the Triton kernels load under the interpreter
(`TRITON_INTERPRET=1`; each masked load's addresses inside the K or V buffer, times 4 bytes), summed.
Time: process CPU time of the interpreted kernels (best of `--interp-rounds`) and of the torch
references the CPU Engine runs (flat `decode_attention_ref`, `cascade_decode_ref` on the cut plan; one
thread, best of `--rounds` interleaved). Interpreter times say how much work a kernel does, never how fast it is
on a GPU: no GPU time is claimed.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before any @triton.jit is defined

import numpy as np  # noqa: E402
import torch  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from radixkv import RadixCache, kernels  # noqa: E402
from radixkv.cascade import for_layer  # noqa: E402
from radixkv.cli_args import positive_int  # noqa: E402
from radixkv.kernels import AttentionVariant  # noqa: E402
# (bench/ is the script's sys.path[0])
from cascade_kernels import gsp_batch, gsp_parser, interleaved as best_cpu_ms  # noqa: E402

SEED, KV_HEADS, HEADS, DIM = 1, 2, 8, 32


class LoadCounter:
    """Counts bytes the interpreted kernels load from the given buffers (masked loads; K/V tiles are)."""

    def __init__(self, *bufs: torch.Tensor) -> None:
        self.ranges = [(b.data_ptr(), b.data_ptr() + b.numel() * b.element_size(), b.element_size()) for b in bufs]
        self.bytes = 0
        self._orig = interpreter.InterpreterBuilder.create_masked_load

    def __enter__(self) -> LoadCounter:
        orig, ranges = self._orig, self.ranges

        def counting(builder: object, ptrs, mask, other, *rest):  # noqa: ANN001, ANN202
            addr = ptrs.data[mask.data] if mask is not None else ptrs.data.ravel()
            for lo, hi, size in ranges:
                self.bytes += int(((addr >= lo) & (addr < hi)).sum()) * size
            return orig(builder, ptrs, mask, other, *rest)

        interpreter.InterpreterBuilder.create_masked_load = counting
        return self

    def __exit__(self, *exc: object) -> None:
        interpreter.InterpreterBuilder.create_masked_load = self._orig


def gsp_step(a: argparse.Namespace) -> tuple[RadixCache, kernels.CascadePlan, object, torch.Tensor]:
    t = gsp_batch(a, "cpu", torch.float32, KV_HEADS, HEADS, DIM, stagger=True, max_context_len=4096)
    return t["cache"], t["b"].cascade, t["b"], t["q"]


def measure(a: argparse.Namespace, variant: AttentionVariant) -> dict[str, float]:
    cache, plan, b, q = gsp_step(a)
    kb, vb, scale = cache.kv_pool.k_buffer[0], cache.kv_pool.v_buffer[0], DIM**-0.5
    flat = (q, kb, vb, cache.req_pool.req_to_token, b.rows, b.seq_lens, scale)
    cut = for_layer(plan, variant)
    want = kernels.decode_attention_ref(*flat, variant)
    row = {}
    runs = {"flat": lambda: kernels.decode_attention(*flat, variant),
            "cascade": lambda: kernels.cascade_decode(q, kb, vb, plan, scale, variant),
            "cascade, cut": lambda: kernels.cascade_decode(q, kb, vb, cut, scale, variant)}
    for name, fn in runs.items():
        with LoadCounter(kb, vb) as counter:
            out = fn()
        torch.testing.assert_close(out, want, atol=2e-5, rtol=2e-5)  # every run is checked against flat
        row[f"{name} MB"] = counter.bytes / 1e6
    lens = b.seq_lens.long()
    seen = lens - kernels.variant.first_key_ref(variant, lens - 1)  # keys each row sees
    assert row["flat MB"] * 1e6 == int(seen.sum()) * 2 * KV_HEADS * DIM * 4  # the counter sees every K/V load
    times = best_cpu_ms([fn for fn in runs.values()], a.interp_rounds)
    row.update({f"{name} interp ms": t for name, t in zip(runs, times)})
    os.environ["TRITON_INTERPRET"] = "0"  # the torch references, as the CPU Engine runs them
    torch.set_num_threads(1)
    refs = best_cpu_ms([lambda: kernels.decode_attention_ref(*flat, variant),
                        lambda: kernels.cascade_decode_ref(q, kb, vb, cut, scale, variant)], a.rounds)
    os.environ["TRITON_INTERPRET"] = "1"
    row.update({"flat ref ms": refs[0], "cascade ref ms": refs[1], "levels": len(plan.levels),
                "cut levels": len(cut.levels)})
    return row


def main(argv: list[str] | None = None) -> None:
    ap = gsp_parser(__doc__, 4, 64, " (+ 0..per_group-1)")
    ap.add_argument("--rounds", type=positive_int, default=5,
                    help="torch references: best CPU time of this many rounds")
    ap.add_argument("--interp-rounds", type=positive_int, default=1, help="interpreted kernels: rounds (slow)")
    a = ap.parse_args(argv)
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    longest = a.system + a.own + a.per_group
    masks = [("window 32 (inside the own tokens)", AttentionVariant(window=32)),
             (f"window 128 (straddles the {a.system}-token prefix)", AttentionVariant(window=128)),
             (f"window {2 * longest} (longer than every request)", AttentionVariant(window=2 * longest)),
             ("chunks of 256 (a boundary inside the prefix)", AttentionVariant(chunk=256))]
    print(f"gsp decode step: {a.groups} x {a.per_group} requests, {a.system} shared + {a.own}.. own tokens; "
          f"{KV_HEADS} kv heads, {HEADS} heads, dim {DIM}, fp32; K/V MB loaded (counted), CPU ms (best of "
          f"{a.interp_rounds} interpreted, {a.rounds} torch)")
    print("| mask | flat MB | cascade MB | cut MB | flat / cascade | flat interp ms | cascade interp ms | "
          "cut interp ms | flat ref ms | cascade ref ms (cut) | levels (cut) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for label, variant in masks:
        r = measure(a, variant)
        print(f"| {label} | {r['flat MB']:.3f} | {r['cascade MB']:.3f} | {r['cascade, cut MB']:.3f} | "
              f"{r['flat MB'] / r['cascade MB']:.2f}x | {r['flat interp ms']:.0f} | {r['cascade interp ms']:.0f} | "
              f"{r['cascade, cut interp ms']:.0f} | {r['flat ref ms']:.2f} | {r['cascade ref ms']:.2f} | "
              f"{r['levels']} ({r['cut levels']}) |")


if __name__ == "__main__":
    main()
