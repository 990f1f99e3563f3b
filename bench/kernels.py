"""Kernel bandwidth: bytes moved / median time, against a plain copy measured in the same run.

    .venv/bin/python bench/kernels.py [--batch 16 --seq-len 2048 ...] [--markdown]

On CUDA: checks each op against its torch reference, then times with `triton.testing.do_bench`
(p20/p50/p80) the Triton kernel through its unchecked launcher (the per-layer path: no checks, no
host sync), the checked public launcher (its input checks sync with the host), and the torch
reference; a device-to-device `copy_` of 256 MiB is the ceiling. On CPU: times the torch
references (wall clock, median of repeated runs, same quantiles) and the checked launchers against
a host `copy_`, and leaves the Triton columns empty: GPU numbers need a GPU.

Bytes counted per op (h kv heads, d head_dim, e element size, n tokens, S = sum(seq_lens)):
    store_kv          4 * n * h * d * e + 8 * n   (read k, v and slots; write two buffer rows)
    gather_kv         2 * n * h * d * e + 8 * n   (read one buffer row and a slot; write out)
    build_kv_indices  12 * S                      (read int32 table; write int64 indices)
    decode_attention  2 * S * h * d * e + 4 * S   (KV read through the table; q, out and the
                                                   fp32 split partials are < 1% and not counted)
    extend_attention  2 * (P + E) * h * d * e     (prefix P and new E tokens' K/V, each read once:
                                                   the lower bound; the kernel re-reads per block)
A copy of B bytes moves 2 * B (read + write).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from typing import Callable, NamedTuple

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from radixkv import kernels  # noqa: E402

SEED = 0
COPY_BYTES = 256 * 2**20
QUANTILES = (0.2, 0.5, 0.8)


class Op(NamedTuple):
    name: str
    nbytes: int
    unchecked: Callable[[], object]  # the per-layer launcher (Triton on CUDA, the reference on CPU)
    checked: Callable[[], object]  # the public launcher, input checks included
    ref: Callable[[], object]  # the torch reference


def _time(fn: Callable[[], object], cuda: bool, min_s: float) -> tuple[float, float, float]:
    """(p20, p50, p80) milliseconds: do_bench on CUDA, repeated wall-clock runs on CPU."""
    if cuda:
        import triton.testing

        return tuple(triton.testing.do_bench(fn, quantiles=list(QUANTILES)))
    fn()  # warm up
    samples, start = [], time.perf_counter()
    while len(samples) < 5 or (time.perf_counter() - start < min_s and len(samples) < 50):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    qs = statistics.quantiles(samples, n=10, method="inclusive")
    return qs[1], statistics.median(samples), qs[7]


def _ops(a: argparse.Namespace, device: str, dtype: torch.dtype) -> list[Op]:
    g = torch.Generator(device="cpu").manual_seed(SEED)
    rnd = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    heads, kv, dim, e = a.kv_heads * a.group, a.kv_heads, a.head_dim, torch.finfo(dtype).bits // 8
    num_slots = max(a.store_n, a.batch * a.seq_len, a.extend_batch * (a.prefix_len + a.extend_len))
    perm = torch.randperm(num_slots, generator=g)
    k_buf, v_buf = rnd(num_slots, kv, dim), rnd(num_slots, kv, dim)
    i32 = lambda x, n: torch.full((n,), x, dtype=torch.int32, device=device)  # noqa: E731
    # decode: batch x seq_len cached positions
    s = a.batch * a.seq_len
    table = perm[:s].view(a.batch, a.seq_len).to(torch.int32).to(device)
    rows, lens = torch.arange(a.batch, dtype=torch.int32, device=device), i32(a.seq_len, a.batch)
    decode = (rnd(a.batch, heads, dim), k_buf, v_buf, table, rows, lens, dim**-0.5)
    # extend: extend_batch requests, prefix_len cached + extend_len new tokens each
    nb, p, n_new = a.extend_batch, a.prefix_len, a.extend_len
    ext_table = torch.zeros(nb, p + n_new, dtype=torch.int32)
    ext_table[:, :p] = perm[:nb * p].view(nb, p).to(torch.int32)
    ext_rows = torch.arange(nb, dtype=torch.int32, device=device)
    extend = (rnd(nb * n_new, heads, dim), rnd(nb * n_new, kv, dim), rnd(nb * n_new, kv, dim), k_buf, v_buf,
              ext_table.to(device), ext_rows, i32(p, nb), i32(n_new, nb), dim**-0.5)
    ext_lens = kernels.ExtendLens.read(*extend[6:9])
    store = (k_buf, v_buf, perm[:a.store_n].to(device), rnd(a.store_n, kv, dim), rnd(a.store_n, kv, dim))
    gather, index, row = (k_buf, perm[:a.store_n].to(device)), (table, rows, lens), kv * dim * e
    return [
        Op("store_kv", 4 * a.store_n * row + 8 * a.store_n, lambda: kernels.store_kv_unchecked(*store),
           lambda: kernels.store_kv(*store), lambda: kernels.store_kv_ref(*store)),
        Op("gather_kv", 2 * a.store_n * row + 8 * a.store_n, lambda: kernels.gather_kv_unchecked(*gather),
           lambda: kernels.gather_kv(*gather), lambda: kernels.gather_kv_ref(*gather)),
        Op("build_kv_indices", 12 * s, lambda: kernels.build_kv_indices_unchecked(*index, num_tokens=s),
           lambda: kernels.build_kv_indices(*index), lambda: kernels.build_kv_indices_ref(*index)),
        Op("decode_attention", 2 * s * row + 4 * s,
           lambda: kernels.decode_attention_unchecked(*decode, a.seq_len),
           lambda: kernels.decode_attention(*decode), lambda: kernels.decode_attention_ref(*decode)),
        Op("extend_attention", 2 * nb * (p + n_new) * row,
           lambda: kernels.extend_attention_unchecked(*extend, ext_lens),
           lambda: kernels.extend_attention(*extend), lambda: kernels.extend_attention_ref(*extend)),
    ]


def _check(op: Op) -> None:
    if op.name == "store_kv":
        return  # in place; covered by tests/test_kernels_store_gather.py
    got, want = op.unchecked(), op.ref()
    for x, y in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        torch.testing.assert_close(x, y, atol=2e-3, rtol=2e-3, msg=lambda m: f"{op.name}: {m}")


def _cells(ms: tuple[float, ...] | None, nbytes: int) -> list[str]:
    if ms is None:
        return ["", ""]
    return [" / ".join(f"{x:.3f}" for x in ms), f"{nbytes / ms[1] / 1e6:.2f}"]


def _print_markdown(title: list[str], header: list[str], rows: list[list[str]]) -> None:
    """For RESULTS.md (and where rich is not installed)."""
    print("\n".join(f"# {t}" for t in title))
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def _print(title: list[str], header: list[str], rows: list[list[str]], markdown: bool) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        markdown = True
    if markdown:
        return _print_markdown(title, header, rows)
    table = Table(title="\n".join(title), title_justify="left")
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*r)
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--kv-heads", type=int, default=8, help="KV heads (default 8: Llama-3-8B)")
    parser.add_argument("--group", type=int, default=4, help="query heads per KV head (default 4)")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--store-n", type=int, default=8192, help="tokens stored / gathered")
    parser.add_argument("--batch", type=int, default=16, help="decode requests")
    parser.add_argument("--seq-len", type=int, default=2048, help="cached positions per decode request")
    parser.add_argument("--extend-batch", type=int, default=4, help="extend requests")
    parser.add_argument("--prefix-len", type=int, default=1024, help="cached prefix per extend request")
    parser.add_argument("--extend-len", type=int, default=256, help="new tokens per extend request")
    parser.add_argument("--min-time", type=float, default=2.0, help="CPU: seconds of samples per op")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table, not a rich one")
    a = parser.parse_args(argv)
    torch.manual_seed(SEED)
    cuda = torch.cuda.is_available()
    if not cuda:
        os.environ.pop("TRITON_INTERPRET", None)  # the references run; never the interpreter here
    device, dtype = ("cuda", torch.float16) if cuda else ("cpu", torch.float32)
    where = (torch.cuda.get_device_name() if cuda
             else f"CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_ms = _time(lambda: dst.copy_(src), cuda, a.min_time)
    copy_gbps = 2 * COPY_BYTES / copy_ms[1] / 1e6
    rows = []
    for op in _ops(a, device, dtype):
        fast = None
        if cuda:
            _check(op)
            fast = _time(op.unchecked, cuda, a.min_time)
        checked = _time(op.checked, cuda, a.min_time)[1]
        ratio = f"{op.nbytes / fast[1] / 1e6 / copy_gbps:.0%}" if fast else ""
        rows.append([op.name, f"{op.nbytes / 1e6:.1f}", *_cells(_time(op.ref, cuda, a.min_time), op.nbytes),
                     *_cells(fast, op.nbytes), ratio, f"{checked:.3f}"])
    title = [f"radixkv kernels on {where}; {dtype}; kv_heads={a.kv_heads} heads={a.kv_heads * a.group} "
             f"head_dim={a.head_dim}; store/gather n={a.store_n}; decode {a.batch} x {a.seq_len}; "
             f"extend {a.extend_batch} x ({a.prefix_len} cached + {a.extend_len} new)",
             f"{'device-to-device' if cuda else 'host'} copy_ of {COPY_BYTES >> 20} MiB: "
             f"{copy_gbps:.1f} GB/s (p50 {copy_ms[1]:.3f} ms)"]
    if not cuda:
        title.append("no CUDA device: Triton columns are empty; GPU numbers need a GPU (the kernels "
                     "are checked against the references under TRITON_INTERPRET=1 only)")
    header = ["op", "MB moved", "torch ref ms p20/p50/p80", "ref GB/s", "triton (unchecked) ms p20/p50/p80",
              "triton GB/s", "triton / copy", "checked launcher ms p50"]
    _print(title, header, rows, a.markdown)


if __name__ == "__main__":
    main()
