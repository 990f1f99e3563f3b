"""Compile every radixkv kernel for sm_80 and sm_90 without a GPU; report registers, spills, shared.

    .venv/bin/python bench/compile_check.py            # the full grid (650 compiles, ~7 CPU-minutes)
    .venv/bin/python bench/compile_check.py --quick    # one small and one large shape per kernel

Each case calls the op's own launch function (`decode_launch`, `extend_launch`, ...: the public
launch layer, `radixkv.kernels.launch`) on small CPU tensors of the case's shape, with the launch
configuration the op's choice function returns for that target (`decode_config`, `extend_config`),
so what is compiled is what runs on that GPU. The attention kernels compile twice: plain causal, and
with every AttentionVariant switch on (window/chunk mask, soft-capping, sinks: suffix `-var`). The
launch is captured as Triton's own compile-warmup does (`KernelInterface.__getitem__` replaced by
`kernel.warmup`), with a stand-in driver that names the target, so `triton.compile` builds the
specialised kernel ahead of time; the ptxas bundled with Triton (`-v`) reports registers and
spills, and the compiled metadata the shared memory. One line per kernel, configuration and target:

    <kernel> <config> sm_<cap> regs=<n> spill=<bytes> shared=<bytes>

where <config> is the case (`d128-g4-fp16[-var]`: head_dim, GQA group or kv heads, dtype) and, after a
slash, the warps and stages launched. Exits 1 on a compile error or, unless --allow-spills, on
any spilled byte. TRITON_INTERPRET is ignored (interpreted kernels cannot be compiled).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, NamedTuple

os.environ.pop("TRITON_INTERPRET", None)  # before any @triton.jit is defined
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, without its warning
os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # ptxas runs (and logs) even where a cache holds the kernel

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime import driver  # noqa: E402
from triton.runtime.jit import KernelInterface  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from radixkv.cascade import _GPU_KV_CHUNK, _build  # noqa: E402
from radixkv.kernels import CAUSAL, AttentionVariant  # noqa: E402
from radixkv.kernels.launch import (build_kv_indices_launch, cascade_launch, decode_config,  # noqa: E402
                                    decode_launch, extend_config, extend_launch, gather_kv_launch,
                                    store_kv_launch, write_req_to_token_launch)

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
# attention cases: Llama-3-8B's 8 kv heads, so num_heads = 8 x group is specialised (divisible by 16
# or not) as in real models; the number of kv heads itself only sizes the grid
KV_HEADS = 8
SLOTS, ROWS, CONTEXT = 64, 4, 64  # tiny buffers: compiling reads shapes and strides, not values


class Case(NamedTuple):
    op: str  # a key of OPS
    head_dim: int
    heads: int  # GQA group (attention), kv heads (store/gather), splits (decode reduce), entries (merge)
    dtype: str  # a key of DTYPES
    cap: int  # compute capability, 80 or 90
    variant: bool = False  # attention ops: every AttentionVariant switch on (VARIANT_OPS)

    @property
    def label(self) -> str:
        if self.op in ("write_req_to_token", "build_kv_indices"):
            return "rows-int32"
        axis = {"decode_reduce": "splits", "merge": "e", "store_kv": "h", "gather_kv": "h"}.get(self.op, "g")
        return f"d{self.head_dim}-{axis}{self.heads}-{self.dtype}" + ("-var" if self.variant else "")

    def attention_variant(self, num_heads: int) -> AttentionVariant:
        """Window (the same MASKED switch as chunks), soft-capping and sinks, or plain causal."""
        return AttentionVariant(window=4, softcap=30.0, sinks=torch.zeros(num_heads)) if self.variant else CAUSAL


VARIANT_OPS = ("decode_split", "decode_reduce", "extend", "cascade", "merge")  # kernels with variant switches


class Result(NamedTuple):
    case: Case
    kernel: str
    warps: int
    stages: int
    regs: int
    spill: int  # bytes of spill stores (ptxas -v)
    shared: int
    error: str = ""
    block_rows: int = 0  # cascade: the rows of a group one program takes (launch_config's BLOCK_R)

    def line(self) -> str:
        label = self.case.label + (f"-r{self.block_rows}" if self.block_rows else "")
        if self.error:
            return f"{self.kernel} {label} sm_{self.case.cap} ERROR {self.error}"
        return (f"{self.kernel} {label}/w{self.warps}s{self.stages} sm_{self.case.cap} "
                f"regs={self.regs} spill={self.spill} shared={self.shared}")


def _decode(c: Case, target: tuple[int, int], splits: int) -> None:
    dt = DTYPES[c.dtype]
    group = c.heads if c.op == "decode_split" else 4
    q = torch.zeros(ROWS, KV_HEADS * group, c.head_dim, dtype=dt)
    buf = torch.zeros(SLOTS, KV_HEADS, c.head_dim, dtype=dt)
    table, rows = torch.zeros(ROWS, CONTEXT, dtype=torch.int32), torch.arange(ROWS, dtype=torch.int32)
    config = decode_config(c.head_dim, group, dt, target)
    decode_launch(q, buf, buf, table, rows, rows + 1, 0.1, splits, config, target, c.attention_variant(q.shape[1]))


def _extend(c: Case, target: tuple[int, int]) -> None:
    dt = DTYPES[c.dtype]
    q = torch.zeros(ROWS, KV_HEADS * c.heads, c.head_dim, dtype=dt)
    kv = torch.zeros(ROWS, KV_HEADS, c.head_dim, dtype=dt)
    buf = torch.zeros(SLOTS, KV_HEADS, c.head_dim, dtype=dt)
    table, rows = torch.zeros(ROWS, CONTEXT, dtype=torch.int32), torch.arange(ROWS, dtype=torch.int32)
    ones = torch.ones(ROWS, dtype=torch.int32)
    config = extend_config(c.head_dim, c.heads, dt, target)
    extend_launch(q, kv, kv, buf, buf, table, rows, ones, ones, 0.1, 1, config, target, c.attention_variant(q.shape[1]))


def _cascade(c: Case, target: tuple[int, int]) -> None:
    """A plan built by radixkv/cascade.py's own builder, with its GPU chunking. cascade: a binary
    tree of 128 rows (level l: groups of 64 >> l rows, 2 groups of 64 down to 128 tails), so every
    row block `launch_config` picks is compiled. merge: 4 rows sharing a run of (entries - 1) chunks
    of `_GPU_KV_CHUNK` slots, then each row's tail: `c.heads` entries per row."""
    if c.op == "cascade":
        sizes = [[(list(range(g * 64 >> l, (g + 1) * 64 >> l)), 16) for g in range(2 << l)] for l in range(7)]
    else:
        sizes = [[(list(range(4)), (c.heads - 1) * _GPU_KV_CHUNK)], [([r], 16) for r in range(4)]]
    levels = [[(rows, np.zeros(n, np.int64), 0) for rows, n in groups] for groups in sizes]
    plan = _build(levels, np.full(len(sizes[-1]), 1 << 20, np.int32), torch.device("cpu"), _GPU_KV_CHUNK)
    dt = DTYPES[c.dtype]
    q = torch.zeros(plan.num_rows, KV_HEADS * (c.heads if c.op == "cascade" else 4), c.head_dim, dtype=dt)
    buf = torch.zeros(SLOTS, KV_HEADS, c.head_dim, dtype=dt)
    cascade_launch(q, buf, buf, plan, 0.1, c.attention_variant(q.shape[1]))


def _copy(c: Case, target: tuple[int, int]) -> None:
    dt = DTYPES[c.dtype]
    buf = torch.zeros(SLOTS, c.heads, c.head_dim, dtype=dt)
    slots = torch.arange(ROWS)
    if c.op == "store_kv":
        src = torch.zeros(ROWS, c.heads, c.head_dim, dtype=dt)
        store_kv_launch(buf, buf, slots, src, src)
    else:
        gather_kv_launch(buf, slots)


def _indices(c: Case, target: tuple[int, int]) -> None:
    table, rows = torch.zeros(ROWS, CONTEXT, dtype=torch.int32), torch.arange(ROWS, dtype=torch.int32)
    if c.op == "write_req_to_token":
        write_req_to_token_launch(table, rows, rows, torch.arange(int(rows.sum())), rows)
    else:
        build_kv_indices_launch(table, rows, rows + 1, num_tokens=int((rows + 1).sum()))


# op -> (kernel it checks, the call that launches it for a case and a target)
OPS: dict[str, tuple[str, Callable[[Case, tuple[int, int]], None]]] = {
    "decode_split": ("_decode_split_kernel", lambda c, t: _decode(c, t, 4)),
    "decode_reduce": ("_decode_reduce_kernel", lambda c, t: _decode(c, t, c.heads)),
    "extend": ("_extend_kernel", _extend),
    "cascade": ("_cascade_kernel", _cascade),
    "merge": ("_merge_states_kernel", _cascade),
    "store_kv": ("_store_kv_kernel", _copy),
    "gather_kv": ("_gather_kv_kernel", _copy),
    "write_req_to_token": ("_write_req_to_token_kernel", _indices),
    "build_kv_indices": ("_build_kv_indices_kernel", _indices),
}


class _Target:
    """A stand-in for Triton's CUDA driver that only names the target: enough for compiling."""

    def __init__(self, cap: int) -> None:
        self.target = GPUTarget("cuda", cap, 32)

    def get_current_device(self) -> int:
        return self.target.arch  # one JIT cache per target

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return self.target


_SEEN: dict[str, tuple[int, int]] = {}  # compiled kernel hash -> (regs, spill), per worker process


def _compile(case: Case) -> list[Result]:
    """Run the case's launch with every `kernel[grid](...)` turned into `kernel.warmup(...)`; one
    result per distinct compiled kernel (a cascade plan's levels may launch several configurations)."""
    want, run = OPS[case.op]
    captured: dict[str, Result] = {}  # compiled kernel hash -> its result

    def getitem(kernel: triton.JITFunction, grid: tuple) -> Callable[..., None]:
        def warmup(*args: object, **kwargs: object) -> None:
            if kernel.fn.__name__ != want:
                return
            log = io.StringIO()
            with contextlib.redirect_stdout(log):
                compiled = kernel.warmup(*args, grid=grid, **kwargs)
            regs, spill = _ptxas_usage(compiled.hash, log.getvalue())
            meta = compiled.metadata
            captured.setdefault(compiled.hash, Result(case, want, meta.num_warps, meta.num_stages, regs, spill,
                                                      meta.shared, block_rows=int(kwargs.get("BLOCK_R", 0))))
        return warmup

    previous = KernelInterface.__getitem__
    driver.set_active(_Target(case.cap))
    triton.knobs.nvidia.dump_ptxas_log = True
    KernelInterface.__getitem__ = getitem
    try:
        run(case, (case.cap // 10, case.cap % 10))
    except Exception as e:  # a compile error is a result to report, not a crash of the check
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        return [Result(case, want, 0, 0, 0, 0, 0, error=f"{type(e).__name__}: {first[:200]}")]
    finally:
        KernelInterface.__getitem__ = previous
    if not captured:
        return [Result(case, want, 0, 0, 0, 0, 0, error="the launch did not reach the kernel")]
    return list(captured.values())


def _ptxas_usage(kernel_hash: str, log: str) -> tuple[int, int]:
    """(registers, spill-store bytes) from ptxas -v; a kernel compiled earlier in this process
    comes from Triton's in-memory cache without a log."""
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores", log)
    if regs and spill:
        _SEEN[kernel_hash] = (int(regs.group(1)), int(spill.group(1)))
    return _SEEN[kernel_hash]


def cases(quick: bool, caps: list[int], head_dims: list[int], groups: list[int],
          dtypes: list[str], ops: list[str]) -> list[Case]:
    """The grid: attention kernels over head_dim x group x dtype x (causal, every variant switch on)
    (cascade: every row-block size of its plan), copies over head_dim x kv heads x dtype, the reduce over head_dim x splits x dtype,
    the merge over head_dim x entries per row x dtype, the index kernels once, each per target.
    --quick: one common shape (d128, GQA 4 / 8 kv heads, fp16) on sm_80 and one large (d256,
    GQA 8, bf16) on sm_90 per kernel."""
    if quick:
        shapes = {80: [(128, 4, "fp16")], 90: [(256, 8, "bf16")]}
        out = []
        for cap in caps:
            for dim, group, dt in shapes.get(cap, shapes[80]):
                attention = [Case("decode_split", dim, group, dt, cap), Case("extend", dim, group, dt, cap),
                             Case("decode_reduce", dim, 16, dt, cap), Case("cascade", dim, group, dt, cap),
                             Case("merge", dim, 16, dt, cap)]
                out += attention + [c._replace(variant=True) for c in attention]
                out += [Case("store_kv", dim, 8, dt, cap), Case("gather_kv", dim, 8, dt, cap)]
            out += [Case("write_req_to_token", 0, 0, "-", cap), Case("build_kv_indices", 0, 0, "-", cap)]
        return [c for c in out if c.op in ops]
    axis = {"decode_reduce": [1, 2, 4, 8, 16], "merge": [2, 4, 8, 16, 32, 128], "store_kv": groups,
            "gather_kv": groups}
    out = []
    for op in ops:
        for cap in caps:
            if op in ("write_req_to_token", "build_kv_indices"):
                out.append(Case(op, 0, 0, "-", cap))
                continue
            out += [Case(op, d, h, dt, cap, var) for d in head_dims for h in axis.get(op, groups) for dt in dtypes
                    for var in ((False, True) if op in VARIANT_OPS else (False,))]
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--quick", action="store_true", help="two shapes per kernel (the test suite's run)")
    parser.add_argument("--caps", type=_ints, default=[80, 90], help="compute capabilities (default 80,90)")
    parser.add_argument("--head-dims", type=_ints, default=[64, 128, 256], help="default 64,128,256")
    parser.add_argument("--groups", type=_ints, default=[1, 2, 4, 8],
                        help="GQA groups; kv heads for store/gather (default 1,2,4,8)")
    parser.add_argument("--dtypes", type=lambda s: s.split(","), default=list(DTYPES),
                        help=f"of {','.join(DTYPES)} (default all)")
    parser.add_argument("--ops", type=lambda s: s.split(","), default=list(OPS),
                        help=f"of {','.join(OPS)} (default all)")
    parser.add_argument("--allow-spills", action="store_true", help="report spills without failing")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compiler processes")
    args = parser.parse_args(argv)
    unknown = [x for x in args.ops if x not in OPS] + [x for x in args.dtypes if x not in DTYPES]
    if unknown:
        parser.error(f"unknown ops or dtypes: {unknown}")
    todo = cases(args.quick, args.caps, args.head_dims, args.groups, args.dtypes, args.ops)
    failed = compiled = 0
    with tempfile.TemporaryDirectory(prefix="radixkv-compile-check-") as cache_dir, \
            ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        os.environ["TRITON_CACHE_DIR"] = cache_dir  # read by the workers, which start on first use
        for result in (r for results in pool.map(_compile, todo) for r in results):
            print(result.line(), flush=True)
            compiled += 1
            failed += bool(result.error) or (result.spill > 0 and not args.allow_spills)
    print(f"# {compiled} kernels compiled for sm_{',sm_'.join(map(str, args.caps))} with Triton "
          f"{triton.__version__}; {failed} failed" + ("" if args.allow_spills else " (errors or spills)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
