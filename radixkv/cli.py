"""The `radixkv` command: `bench` (prefix-sharing benchmark), `calc` (KV sizing), `demo`."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from radixkv.bench.main import DEFAULT_FRACS, DEFAULT_POLICIES
from radixkv.bench.workloads import DEFAULT_WORKLOADS, WORKLOADS
from radixkv.calc import DTYPE_BYTES, PRESETS


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _console():  # noqa: ANN202 - rich is imported late (the [bench] extra)
    """A rich Console; outside a terminal (logs, pipes, CI) wide enough that tables do not wrap."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=200)


def cmd_bench(a: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from radixkv.bench import plots, sglang_peer
    from radixkv.bench.main import run_bench, summary_tables, write_json

    con = _console()
    # SGLang runs when asked (--sglang: in-process or through the peer venv) or, unless --no-sglang,
    # when it is importable here (installed beside radixkv): then it costs no subprocess.
    sglang = a.sglang or (not a.no_sglang and importlib.util.find_spec("sglang") is not None)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=con) as prog:
        rep = run_bench(_csv(a.workloads) if a.workloads is not None else ([] if a.trace else list(DEFAULT_WORKLOADS)),
                        [float(x) for x in _csv(a.fracs)], _csv(a.policies),
                        page_size=a.page_size, seed=a.seed, scale=a.scale, model=a.model, dtype=a.dtype,
                        sglang=sglang, progress=prog, traces=_read_traces(a.trace or []))
    for t in summary_tables(rep):
        con.print(t)
    if rep.sglang_version:
        con.print(f"SGLang {rep.sglang_version} RadixCache ran the same traces (peer harness {sglang_peer.harness_path()}).")
    elif sglang:
        con.print(f"[yellow]SGLang peer skipped:[/] {rep.sglang_note}")
    con.print("OPT* = lower bound (a repeated output broke the exactness condition, see radixkv/bench/opt.py)"
              if any(not c.opt_exact for c in rep.cells) else "OPT is exact on every trace (Belady, see radixkv/bench/opt.py).")
    os.makedirs(a.out, exist_ok=True)
    write_json(rep, os.path.join(a.out, "bench.json"))
    paths = plots.write_all(rep, a.out) if not a.no_plots else []
    con.print(f"{rep.seconds:.1f} s; wrote {os.path.join(a.out, 'bench.json')} {' '.join(paths)}")
    return 0


def _read_traces(paths: list[str]) -> dict:
    from radixkv.bench.traces import read_trace

    return {os.path.splitext(os.path.basename(p))[0]: read_trace(p) for p in paths}


def cmd_calc(a: argparse.Namespace) -> int:
    from rich.table import Table

    from radixkv.calc import get_model, size, with_tp_note

    con = _console()
    names = list(PRESETS) if a.model == "all" else _csv(a.model)
    t = Table(title=f"KV cache on {a.gpu_gib:g} GiB x tp {a.tp}, KV {a.dtype}, weights {a.weight_dtype}, "
                    f"context {a.context}, page {a.page_size}, util {a.util}")
    for col in ("model", "KV layout", "bytes/token", "MiB/request", "weights GiB/rank", "KV GiB/rank",
                "fit (paged)", "max_len", "fit (pre-alloc)"):
        t.add_column(col, justify="right")
    for n in names:
        m = get_model(n)
        max_len = a.max_len or m.max_position
        s = size(m, context=a.context, gpu_gib=a.gpu_gib, dtype=a.dtype, weight_dtype=a.weight_dtype, tp=a.tp,
                 page_size=a.page_size, max_len=max_len, util=a.util)
        t.add_row(m.name, with_tp_note(m, a.tp), f"{s.bytes_per_token:,.0f}", f"{s.bytes_per_request / 2**20:,.1f}",
                  f"{s.weight_bytes / 2**30:,.1f}", f"{s.kv_budget_bytes / 2**30:,.1f}", f"{s.fit_paged:,}",
                  f"{max_len:,}", f"{s.fit_prealloc:,}")
    con.print(t)
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    from radixkv.demo import main as demo

    demo(policy=a.policy, capacity=a.capacity, console=_console())
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="radixkv", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="prefix-sharing benchmark: hit rate vs OPT, throughput, memory, plots")
    b.add_argument("--workloads", default=None,
                   help=f"comma list of {','.join(WORKLOADS)} (default: {','.join(DEFAULT_WORKLOADS)}; "
                        "none when --trace is given)")
    b.add_argument("--trace", action="append", metavar="FILE",
                   help="replay a JSON-lines trace ({\"tokens\": [...], \"prompt_len\": n} or {\"hash_ids\": "
                        "[...], \"input_length\": n, \"block_size\": 512} per line); repeatable (default: none)")
    b.add_argument("--fracs", default=",".join(map(str, DEFAULT_FRACS)), help="capacities as fractions of unique tokens")
    b.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    b.add_argument("--page-size", type=int, default=1)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--scale", type=float, default=1.0, help="keep this fraction of each trace (quick runs)")
    b.add_argument("--model", default="llama-3-8b", help="preset or config.json for the memory column")
    b.add_argument("--dtype", default="bf16", choices=sorted(DTYPE_BYTES))
    b.add_argument("--sglang", action="store_true",
                   help="also run SGLang's RadixCache (peer harness; see radixkv/bench/sglang_peer.py)")
    b.add_argument("--no-sglang", action="store_true", help="never run SGLang")
    b.add_argument("--out", default="bench/out", help="directory for bench.json and the PNGs")
    b.add_argument("--no-plots", action="store_true")
    b.set_defaults(fn=cmd_bench)
    c = sub.add_parser("calc", help="KV-cache sizing for model presets or a config.json")
    c.add_argument("model", nargs="?", default="all", help=f"'all', a comma list of {','.join(PRESETS)}, or config.json")
    c.add_argument("--dtype", default="bf16", choices=sorted(DTYPE_BYTES), help="KV dtype")
    c.add_argument("--weight-dtype", default="bf16", choices=sorted(DTYPE_BYTES))
    c.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    c.add_argument("--gpu-gib", type=float, default=80.0, help="memory per GPU")
    c.add_argument("--context", type=int, default=4096, help="tokens per request (paged)")
    c.add_argument("--max-len", type=int, default=None, help="pre-allocated length (default: the model's max)")
    c.add_argument("--page-size", type=int, default=16)
    c.add_argument("--util", type=float, default=0.9, help="fraction of GPU memory the engine may use")
    c.set_defaults(fn=cmd_calc)
    d = sub.add_parser("demo", help="print a small radix tree, then evict under pressure")
    d.add_argument("--policy", default="lru")
    d.add_argument("--capacity", type=int, default=32)
    d.set_defaults(fn=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
