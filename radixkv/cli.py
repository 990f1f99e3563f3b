"""The `radixkv` command (also `python -m radixkv`): `bench` (prefix-sharing benchmark), `calc`
(KV-cache sizing), `demo` (a radix tree you can read) and `simulate` (schedules on traces with arrival times).

Flags that exist in vLLM keep vLLM's names: `--tensor-parallel-size/-tp`, `--kv-cache-dtype`,
`--dtype` (the weights' dtype), `--max-model-len`, `--gpu-memory-utilization`, `--block-size`
(alias of SGLang's `--page-size`). A mistake in the arguments is one line on stderr and exit
status 2; a peer that fails while running (SGLang) is one line and exit status 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from radixkv import __version__, core_loader

# Everything else is imported where it is used, so that `radixkv --version` never loads torch or numpy.
WEIGHT_DTYPES = ["auto", "float16", "half", "fp16", "bfloat16", "bf16", "float32", "float", "fp32"]  # vLLM's --dtype
QUANTIZATIONS = ["fp8", "int4"]  # vLLM's --quantization, as the bytes a quantized weight takes
CORE_MODULES = core_loader.CORE  # what a compiled core compiles (radixkv/build.py)


class _Parser(argparse.ArgumentParser):
    """A usage error is one line on stderr (and exit status 2), not the whole usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def core_build(package_dir: str | None = None) -> str:
    """"compiled core" when the compiled core runs (radixkv/core_loader.py: every CORE module built,
    the build stamp matching the sources, RADIXKV_PURE_PYTHON not set), else "pure Python".
    Reads the files; imports nothing of the core."""
    return "compiled core" if core_loader.state(package_dir or core_loader.PACKAGE_DIR)[0] else "pure Python"


def version_line() -> str:
    return f"radixkv {__version__} ({core_build()})"


def _console():  # noqa: ANN202 - a rich Console
    """A rich Console; outside a terminal (logs, pipes, CI) wide enough that tables do not wrap."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=200)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _auto(dtype: str, model: str) -> str:
    """`auto` is the checkpoint's dtype, as in vLLM."""
    from radixkv.model_spec import get_model

    return get_model(model).dtype if dtype == "auto" else dtype


def cmd_bench(a: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from radixkv.bench import plots
    from radixkv.bench.main import run_bench, summary_tables, write_json
    from radixkv.bench.sglang_peer import Peer, PeerError
    from radixkv.bench.traces import read_traces
    from radixkv.bench.workloads import DEFAULT_WORKLOADS
    from radixkv.errors import TraceFormatError

    peer = Peer(a.sglang_harness, a.sglang_python)
    if a.sglang and (why := peer.problem()) is not None:
        a.parser.error(f"--sglang: SGLang cannot run: {why}")
    workloads = a.workloads if a.workloads is not None else ([] if a.trace else list(DEFAULT_WORKLOADS))
    try:
        traces = read_traces(a.trace or [], taken=workloads)
    except TraceFormatError as e:
        a.parser.error(f"--trace: {e}")
    con = _console()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=con) as prog:
        try:
            rep = run_bench(workloads, a.fracs, a.policies, page_size=a.page_size, seed=a.seed, scale=a.scale,
                            model=a.model, dtype=_auto(a.kv_cache_dtype, a.model),
                            peer=peer if a.sglang else None, strict=a.sglang, progress=prog,
                            events_cost=a.events_cost, speed_repeats=a.speed_repeats, traces=traces)
        except PeerError as e:
            a.parser.exit(1, f"{a.parser.prog}: error: SGLang peer failed: {e}\n")
    for t in summary_tables(rep):
        con.print(t)
    if rep.sglang_version:
        con.print(f"SGLang {rep.sglang_version} RadixCache ran the same traces (peer harness {peer.harness}).")
    elif a.sglang:
        con.print(f"[yellow]SGLang peer skipped:[/] {escape(rep.sglang_note or '')}")
    con.print("OPT* = lower bound (a repeated output broke the exactness condition, see radixkv/bench/opt.py)"
              if any(not c.opt_exact for c in rep.cells)
              else "OPT is exact on every trace (Belady, see radixkv/bench/opt.py).")
    os.makedirs(a.out, exist_ok=True)
    write_json(rep, os.path.join(a.out, "bench.json"))
    paths: list[str] = []
    if a.no_plots:
        pass
    elif not _installed("matplotlib"):
        con.print("[yellow]no plots:[/] matplotlib is not installed (pip install 'radixkv\\[plots]')")
    else:
        paths = plots.write_all(rep, a.out)
    load = " -> ".join(f"{x:.1f}" for x in rep.load_average)
    con.print(f"{rep.seconds:.1f} s (1-min load average {load} on {os.cpu_count()} cpus); "
              f"wrote {os.path.join(a.out, 'bench.json')} {' '.join(paths)}")
    return 0


def cmd_calc(a: argparse.Namespace) -> int:
    from radixkv.calc import PRESETS
    from radixkv.calc_table import calc_table
    from radixkv.errors import InvalidArgumentError
    from radixkv.model_spec import get_model

    names = list(PRESETS) if a.model == "all" else [m.strip() for m in a.model.split(",") if m.strip()]
    try:
        if a.max_model_len != "auto":
            for name in names:
                if a.max_model_len > (limit := get_model(name).max_position):
                    raise InvalidArgumentError(f"--max-model-len {a.max_model_len} is above {name}'s maximum "
                                               f"{limit} (max_position_embeddings; vLLM refuses it too)")
        table, notes = calc_table(names, a, strict=a.model != "all")
    except InvalidArgumentError as e:
        a.parser.error(str(e))
    con = _console()
    con.print(table)
    for note in notes:
        con.print(note)
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    from radixkv.demo import main as demo

    demo(policy=a.policy, capacity=a.capacity, console=_console())
    return 0


def _auto_or_int(s: str) -> str | int:
    from radixkv.cli_args import positive_int

    return s if s == "auto" else positive_int(s)


def _capacity(s: str) -> int:
    from radixkv.cli_args import positive_int
    from radixkv.demo import min_capacity

    v = positive_int(s)
    if v < min_capacity():
        raise argparse.ArgumentTypeError(f"must be >= {min_capacity()} (the locked request plus the long "
                                         f"prompt that forces eviction), got {v}")
    return v


def _subparser(sub: argparse._SubParsersAction,
               name: str, help: str, fn) -> argparse.ArgumentParser:  # noqa: A002, ANN001
    p = sub.add_parser(name, help=help, description=help, allow_abbrev=False,
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.set_defaults(fn=fn, parser=p)
    return p


def _bench_parser(sub: argparse._SubParsersAction) -> None:
    from radixkv.bench.main import DEFAULT_FRACS, DEFAULT_POLICIES
    from radixkv.bench.sglang_peer import Peer
    from radixkv.bench.workloads import DEFAULT_WORKLOADS, WORKLOADS
    from radixkv.calc import DTYPE_BYTES
    from radixkv.cli_args import csv_of, fraction, model_name, nonneg_int, one_of, positive_int
    from radixkv.eviction import POLICIES

    dtypes = ["auto", *DTYPE_BYTES]
    b = _subparser(sub, "bench", "prefix-sharing benchmark: hit rate vs OPT, throughput, memory, plots", cmd_bench)
    b.add_argument("--workloads", type=csv_of(one_of(WORKLOADS)), default=None,
                   help=f"comma-separated workloads, of {','.join(WORKLOADS)}; None: {','.join(DEFAULT_WORKLOADS)}, "
                        "or none when --trace is given")
    b.add_argument("--trace", action="append", metavar="FILE",
                   help="replay a JSON-lines trace, plain or gzipped ({\"tokens\": [...], \"prompt_len\": n} or "
                        "{\"hash_ids\": [...], \"input_length\": n, \"block_size\": 512} per line; "
                        "radixkv/bench/traces.py); repeatable, each named by its file")
    b.add_argument("--fracs", type=csv_of(fraction), default=",".join(map(str, DEFAULT_FRACS)),
                   help="cache capacities, each a fraction in (0, 1] of the trace's unique tokens")
    b.add_argument("--policies", type=csv_of(one_of(POLICIES)), default=",".join(DEFAULT_POLICIES),
                   help=f"eviction policies, from {','.join(POLICIES)}")
    b.add_argument("--page-size", "--block-size", type=positive_int, default=1, help="tokens per page")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--scale", type=fraction, default=1.0, help="keep this fraction of each trace (quick runs)")
    b.add_argument("--model", type=model_name, default="llama-3-8b",
                   help="preset, config.json or folder, for the KV memory column")
    b.add_argument("--kv-cache-dtype", choices=dtypes, default="auto", metavar="DTYPE",
                   help=f"KV dtype of the memory column, one of {','.join(dtypes)} (auto: the model's)")
    b.add_argument("--sglang", action="store_true",
                   help="also run SGLang's RadixCache on the same traces, side by side; fail if it cannot run")
    env = Peer.from_env()
    b.add_argument("--sglang-harness", default=env.harness,
                   help="SGLang peer harness (env RADIXKV_SGLANG_HARNESS; relative paths from the current directory)")
    b.add_argument("--sglang-python", default=env.python,
                   help="interpreter that imports sglang, when this one does not (env RADIXKV_SGLANG_PYTHON; "
                        "`make sglang` builds .venv-sglang)")
    b.add_argument("--out", default=os.path.join("bench", "out"), help="directory for bench.json and the PNGs")
    b.add_argument("--no-plots", action="store_true")
    b.add_argument("--speed-repeats", type=nonneg_int, default=3, metavar="N",
                   help="with --sglang: rounds of requests/s side by side (radixkv, SGLang RadixCache, SGLang Rust "
                        "core): best of N each, and the median of the N rounds' own ratios; 0 skips them")
    b.add_argument("--events-cost", type=nonneg_int, default=0, metavar="N",
                   help="also time the first of --policies with KV events off and on, N interleaved runs each "
                        "(best of N)")


def _calc_parser(sub: argparse._SubParsersAction) -> None:
    from radixkv.calc import DTYPE_BYTES, PRESETS
    from radixkv.cli_args import fraction, positive_float, positive_int

    dtypes = ["auto", *DTYPE_BYTES]
    c = _subparser(sub, "calc", "KV-cache sizing for model presets, a config.json or a model folder", cmd_calc)
    c.add_argument("model", nargs="?", default="all",
                   help=f"'all', comma-separated presets ({','.join(PRESETS)}), a config.json, or a folder with one")
    c.add_argument("-tp", "--tensor-parallel-size", type=positive_int, default=1, help="tensor-parallel degree")
    c.add_argument("--kv-cache-dtype", choices=dtypes, default="auto", metavar="DTYPE",
                   help=f"KV dtype, one of {','.join(dtypes)} (auto: the model's compute dtype, or --dtype)")
    c.add_argument("--dtype", choices=WEIGHT_DTYPES, default="auto", metavar="DTYPE",
                   help=f"weights' and activations' dtype, one of {','.join(WEIGHT_DTYPES)} (auto: the checkpoint's); "
                        "quantized weights are --quantization, as in vLLM")
    c.add_argument("-q", "--quantization", choices=QUANTIZATIONS, default=None,
                   help="quantized weights (bytes per parameter: fp8 1, int4 0.5); default: the checkpoint's, "
                        "e.g. fp8 for deepseek-v3")
    c.add_argument("--gpu-gib", type=positive_float, default=80.0, help="memory per GPU, GiB")
    c.add_argument("--gpu-memory-utilization", type=fraction, default=0.9,
                   help="fraction of GPU memory for weights + KV")
    c.add_argument("--context", type=positive_int, default=4096, help="tokens per request (paged)")
    c.add_argument("--max-model-len", type=_auto_or_int, default="auto",
                   help="tokens pre-allocated per request without paging, at most the model's maximum "
                        "(auto: the model's maximum)")
    c.add_argument("--page-size", "--block-size", type=positive_int, default=16, help="tokens per KV page")


def build_parser() -> argparse.ArgumentParser:
    from radixkv.eviction import POLICIES
    from radixkv.scheduling import command as simulate_command

    p = _Parser(prog="radixkv", description=__doc__.split("\n\n")[0], allow_abbrev=False,
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--version", action="version", version=version_line())
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{bench,calc,demo,simulate}")
    _bench_parser(sub)
    _calc_parser(sub)
    d = _subparser(sub, "demo", "print a small radix tree, then evict under pressure", cmd_demo)
    d.add_argument("--policy", choices=sorted(POLICIES), default="lru", help="eviction policy")
    d.add_argument("--capacity", type=_capacity, default=32, help="token slots in the demo cache")
    simulate_command.add_parser(sub, _subparser)
    return p


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--version"]:  # answered before the parser, whose choices import numpy and torch
        print(version_line())
        return 0
    a = build_parser().parse_args(args)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
