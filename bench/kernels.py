"""Kernel bandwidth: bytes moved / median time, against a plain copy measured in the same run.

    .venv/bin/python bench/kernels.py

On CUDA: times the Triton kernels (the launch alone, and the public launcher with its input
checks, which sync with the host) and their torch references with `triton.testing.do_bench`
(p20/p50/p80), checks each op against its reference first, and measures a device-to-device
`copy_` of 256 MiB as the ceiling. On CPU: times the torch references only (wall clock, same
quantiles) against a host `copy_`, and leaves the Triton columns empty: GPU numbers need a GPU.

Bytes counted per op (h kv heads, d head_dim, e element size, n tokens, S = sum(seq_lens)):
    store_kv          4 * n * h * d * e + 8 * n   (read k, v and slots; write two buffer rows)
    gather_kv         2 * n * h * d * e + 8 * n   (read one buffer row and a slot; write out)
    build_kv_indices  12 * S                      (read int32 table; write int64 indices)
    decode_attention  2 * S * h * d * e + 4 * S   (KV read through the table; q, out and the
                                                   fp32 split partials are < 1% and not counted)
    cascade_decode    sum over groups g of B_g * (2 * S_g * h * d * e + 8 * S_g)  (each group's KV once
                      per row block B_g; slots int64) + 8 * E * H * d (fp32 partials written, read
                      by the merge) for E entries, H query heads
A copy of B bytes moves 2 * B (read + write).

The gsp rows time one decode step of SGLang's generated-shared-prefix shape through a RadixCache:
GSP_GROUPS system prompts of GSP_SYSTEM tokens, each shared by GSP_PER_GROUP requests that add
GSP_OWN tokens of their own (prompt tail + tokens decoded so far), flat `decode_attention` against
`cascade_decode` over the plan `cache.batch(seqs, cascade=True)` builds.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from typing import Callable

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from radixkv import CacheConfig, RadixCache, kernels  # noqa: E402
from radixkv.kernels.cascade import launch_config  # noqa: E402
from radixkv.kernels.decode import _decode_launch, num_splits_for  # noqa: E402
from radixkv.kernels.gather import _gather_kv_launch  # noqa: E402
from radixkv.kernels.indices import _build_kv_indices_launch  # noqa: E402
from radixkv.kernels.store import _store_kv_launch  # noqa: E402

SEED = 0
KV_HEADS, HEADS, DIM = 8, 32, 128  # one layer of a Llama-3-8B-shaped model (GQA ratio 4)
STORE_N = 8192  # tokens stored / gathered
DECODE_BATCH, DECODE_LEN = 16, 2048  # S = 32768 tokens of context
NUM_SLOTS = 65536
COPY_BYTES = 256 * 2**20
GSP_GROUPS, GSP_PER_GROUP, GSP_SYSTEM, GSP_OWN = 8, 8, 512, 80  # bench/e2e.py's gsp, mid-decode
QUANTILES = (0.2, 0.5, 0.8)


def _time(fn: Callable[[], object], cuda: bool) -> tuple[float, float, float]:
    """(p20, p50, p80) milliseconds."""
    if cuda:
        import triton.testing

        return tuple(triton.testing.do_bench(fn, quantiles=list(QUANTILES)))
    fn()  # warm up
    samples, start = [], time.perf_counter()
    while len(samples) < 5 or (time.perf_counter() - start < 2.0 and len(samples) < 50):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    qs = statistics.quantiles(samples, n=10, method="inclusive")
    return qs[1], statistics.median(samples), qs[7]


def _interleaved(fns: list[Callable[[], object]], rounds: int) -> list[float]:
    """Best process CPU milliseconds of each function over `rounds` rounds that call each once, in
    turn (CPU time, not wall time: waiting for a core shared with other processes is not counted)."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = time.process_time()
            fn()
            best[i] = min(best[i], (time.process_time() - t0) * 1e3)
    return best


def _setup(device: str, dtype: torch.dtype) -> dict:
    g = torch.Generator(device="cpu").manual_seed(SEED)
    rnd = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    perm = torch.randperm(NUM_SLOTS, generator=g)
    total = DECODE_BATCH * DECODE_LEN
    table = perm[:total].view(DECODE_BATCH, DECODE_LEN).to(torch.int32).to(device)
    return dict(
        k_buf=rnd(NUM_SLOTS, KV_HEADS, DIM), v_buf=rnd(NUM_SLOTS, KV_HEADS, DIM),
        slots=perm[:STORE_N].to(device), k=rnd(STORE_N, KV_HEADS, DIM), v=rnd(STORE_N, KV_HEADS, DIM),
        q=rnd(DECODE_BATCH, HEADS, DIM), table=table,
        rows=torch.arange(DECODE_BATCH, dtype=torch.int32, device=device),
        lens=torch.full((DECODE_BATCH,), DECODE_LEN, dtype=torch.int32, device=device))


def _ops(t: dict, e: int) -> list[tuple[str, int, Callable, Callable, Callable]]:
    """(name, bytes moved, kernel launch alone, public launcher with its checks, reference)."""
    n, s, row = STORE_N, DECODE_BATCH * DECODE_LEN, KV_HEADS * DIM * e
    store = (t["k_buf"], t["v_buf"], t["slots"], t["k"], t["v"])
    gather = (t["k_buf"], t["slots"])
    index = (t["table"], t["rows"], t["lens"])
    decode = (t["q"], t["k_buf"], t["v_buf"], t["table"], t["rows"], t["lens"], DIM**-0.5)
    splits = num_splits_for(DECODE_BATCH, KV_HEADS, DECODE_LEN)
    return [
        ("store_kv", 4 * n * row + 8 * n, lambda: _store_kv_launch(*store),
         lambda: kernels.store_kv(*store), lambda: kernels.store_kv_ref(*store)),
        ("gather_kv", 2 * n * row + 8 * n, lambda: _gather_kv_launch(*gather),
         lambda: kernels.gather_kv(*gather), lambda: kernels.gather_kv_ref(*gather)),
        ("build_kv_indices", 12 * s, lambda: _build_kv_indices_launch(*index),
         lambda: kernels.build_kv_indices(*index), lambda: kernels.build_kv_indices_ref(*index)),
        ("decode_attention", 2 * s * row + 4 * s, lambda: _decode_launch(*decode, splits),
         lambda: kernels.decode_attention(*decode), lambda: kernels.decode_attention_ref(*decode)),
    ]


def _gsp_batch(device: str, dtype: torch.dtype, kv_heads: int = KV_HEADS, heads: int = HEADS,
               dim: int = DIM) -> dict:
    """One decode step of the gsp shape: the cache, its flat inputs and its cascade plan."""
    g = torch.Generator(device="cpu").manual_seed(SEED + 1)
    n = GSP_GROUPS * GSP_PER_GROUP
    cache = RadixCache(CacheConfig(num_layers=1, num_kv_heads=kv_heads, head_dim=dim, num_slots=16384,
                                   page_size=16, max_requests=n, max_context_len=1024, dtype=dtype, device=device))
    for buf in (cache.kv_pool.k_buffer[0], cache.kv_pool.v_buffer[0]):
        buf.copy_(torch.randn(buf.shape, generator=g).to(buf))
    seqs = []
    for _ in range(GSP_GROUPS):
        head = torch.randint(0, 32000, (GSP_SYSTEM,), generator=g).tolist()
        for _ in range(GSP_PER_GROUP):
            prompt = head + torch.randint(0, 32000, (GSP_OWN,), generator=g).tolist()
            seq = cache.open(prompt)
            cache.reserve(seq, len(prompt) - seq.kv_len)
            cache.commit(seq, prompt[seq.committed_len:])
            seqs.append(seq)
    for seq in seqs:
        cache.reserve(seq, 1)
    b = cache.batch(seqs, cascade=True)
    q = torch.randn(n, heads, dim, generator=g).to(device=device, dtype=dtype)
    return dict(cache=cache, b=b, q=q)


def _gsp_ops(t: dict, e: int) -> list[tuple[str, int, Callable, Callable, Callable]]:
    """Flat and cascade decode of the gsp batch: (name, bytes, launch, public launcher, reference)."""
    cache, b, q = t["cache"], t["b"], t["q"]
    kb, vb, plan = cache.kv_pool.k_buffer[0], cache.kv_pool.v_buffer[0], b.cascade
    (heads, dim), kv_heads = q.shape[1:], kb.shape[1]
    flat = (q, kb, vb, cache.req_pool.req_to_token, b.rows, b.seq_lens, dim**-0.5)
    s = int(b.seq_lens.sum())
    splits = num_splits_for(len(b.rows), kv_heads, int(b.seq_lens.max()))
    casc = (q, kb, vb, plan, dim**-0.5)
    return [
        ("decode_attention (gsp)", 2 * s * kv_heads * dim * e + 4 * s, lambda: _decode_launch(*flat, splits),
         lambda: kernels.decode_attention(*flat), lambda: kernels.decode_attention_ref(*flat)),
        ("cascade_decode (gsp)", _cascade_bytes(plan, kv_heads, heads, dim, e),
         lambda: kernels.cascade_decode_launch(*casc), lambda: kernels.cascade_decode(*casc),
         lambda: kernels.cascade_decode_ref(*casc)),
    ]


def _cascade_bytes(plan: kernels.CascadePlan, kv_heads: int, heads: int, dim: int, e: int) -> int:
    """The cascade_decode model of the module docstring."""
    total = 8 * plan.num_entries * heads * dim
    for lvl in plan.levels:
        blocks = launch_config(lvl.max_rows, heads // kv_heads, dim)["BLOCK_R"]
        rows = (lvl.qo_indptr[1:] - lvl.qo_indptr[:-1]).long()
        slots = (lvl.kv_indptr[1:] - lvl.kv_indptr[:-1]).long()
        reads = int((-(-rows // blocks) * slots).sum())  # slots read, once per group and row block
        total += reads * (2 * kv_heads * dim * e + 8)
    return total


def _check(name: str, fast: Callable, ref: Callable) -> None:
    if name in ("store_kv",):
        return  # in place; covered by tests/test_kernels_store_gather.py
    got, want = fast(), ref()
    for a, b in zip(*(x if isinstance(x, tuple) else (x,) for x in (got, want))):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3, msg=lambda m: f"{name}: {m}")


def _fmt(ms: tuple[float, ...] | None, nbytes: int) -> list[str]:
    if ms is None:
        return ["", ""]
    return [" / ".join(f"{x:.3f}" for x in ms), f"{nbytes / ms[1] / 1e6:.2f}"]


def main() -> None:
    torch.manual_seed(SEED)
    cuda = torch.cuda.is_available()
    if not cuda:
        os.environ.pop("TRITON_INTERPRET", None)  # the references run; never the interpreter here
    device, dtype = ("cuda", torch.float16) if cuda else ("cpu", torch.float32)
    where = (torch.cuda.get_device_name() if cuda
             else f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    t = _setup(device, dtype)
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_ms = _time(lambda: dst.copy_(src), cuda)
    copy_gbps = 2 * COPY_BYTES / copy_ms[1] / 1e6

    print(f"# radixkv kernels on {where}; {dtype}; kv_heads={KV_HEADS} heads={HEADS} head_dim={DIM}; "
          f"store/gather n={STORE_N}; decode batch={DECODE_BATCH} x seq_len={DECODE_LEN}")
    print(f"# {'device-to-device' if cuda else 'host'} copy_ of {COPY_BYTES >> 20} MiB: "
          f"{copy_gbps:.1f} GB/s (p50 {copy_ms[1]:.3f} ms)")
    print("| op | MB moved | torch ref ms p20/p50/p80 | ref GB/s | triton kernel ms p20/p50/p80 "
          "| triton GB/s | triton / copy | launcher with checks, ms p50 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    e = torch.finfo(dtype).bits // 8
    gsp = _gsp_ops(_gsp_batch(device, dtype), e)
    for name, nbytes, launch, public, ref in _ops(t, e) + gsp:
        fast_ms, checked = None, ""
        if cuda:
            _check(name, public, ref)
            fast_ms = _time(launch, cuda)
            checked = f"{_time(public, cuda)[1]:.3f}"
        ref_cells = _fmt(_time(ref, cuda), nbytes)
        ratio = f"{nbytes / fast_ms[1] / 1e6 / copy_gbps:.0%}" if fast_ms else ""
        cells = [name, f"{nbytes / 1e6:.1f}", *ref_cells, *_fmt(fast_ms, nbytes), ratio, checked]
        print("| " + " | ".join(cells) + " |")
    flat_mb, casc_mb = (op[1] / 1e6 for op in gsp)
    print(f"# gsp decode step ({GSP_GROUPS} x {GSP_PER_GROUP} requests, {GSP_SYSTEM} shared + {GSP_OWN} own "
          f"tokens): cascade moves {casc_mb:.1f} MB vs flat {flat_mb:.1f} MB ({flat_mb / casc_mb:.2f}x fewer)")
    if not cuda:  # the two references again, alternating, in this layer shape and in bench/e2e.py's model's
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # CPU time of one thread: idle OpenMP workers spinning would count too
        for shape, ops in (("this shape", gsp), ("8/2 heads of dim 32 (bench/e2e.py)",
                                                 _gsp_ops(_gsp_batch(device, dtype, 2, 8, 32), e))):
            best = _interleaved([ops[0][4], ops[1][4]], rounds=9)
            print(f"# gsp torch references, {shape}, 1 thread, interleaved, best CPU time of 9: flat "
                  f"{best[0]:.3f} ms, cascade {best[1]:.3f} ms (cascade / flat = {best[1] / best[0]:.2f})")
        torch.set_num_threads(threads)
        print("# no CUDA device: Triton columns are empty. GPU numbers need a GPU "
              "(the kernels were checked against the references under TRITON_INTERPRET=1 only).")


if __name__ == "__main__":
    main()
