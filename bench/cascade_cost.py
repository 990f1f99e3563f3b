"""What cascade decode costs and saves in the Engine, in CPU time (steadier than wall time on a shared box).

Same model and prompts as bench/e2e.py (gsp: 8 system prompts x 8 requests; unique: the same shape with
nothing shared). Each round runs the Engine with cascade on and off (a fresh Engine each, the order
alternating between rounds) and measures, on this thread: CPU seconds of the whole `generate`, CPU
milliseconds inside `cache.batch()` (where the plan is built), and the seconds the attention function
spent in decode attention. Prints the best of `--rounds` for each. Usage:
`python bench/cascade_cost.py [--rounds 3] [--workloads gsp,unique]`.
"""

from __future__ import annotations

import argparse
import sys
import time

if sys.path and sys.path[0].rstrip("/").endswith("bench"):  # see bench/e2e.py: bench/kernels.py shadows
    del sys.path[0]  # the `kernels` package transformers probes for

import torch  # noqa: E402

from radixkv.integrations.transformers import Engine  # noqa: E402

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from e2e import build_model, gsp_prompts  # noqa: E402


def measure(model: torch.nn.Module, prompts: list[list[int]], new: int, cascade: bool) -> tuple[float, float, float]:
    """(generate CPU s, batch() CPU ms, decode attention s) of one run on a fresh Engine."""
    engine = Engine(model, num_slots=65536, page_size=16, max_requests=128, max_context_len=4096,
                    max_batch_tokens=1024, cascade=cascade)
    batch, spent = engine.cache.batch, [0.0]

    def timed(*args: object, **kwargs: object) -> object:
        t0 = time.thread_time()
        out = batch(*args, **kwargs)
        spent[0] += time.thread_time() - t0
        return out

    engine.cache.batch = timed  # type: ignore[method-assign]
    t0 = time.thread_time()
    engine.generate(prompts, max_new_tokens=new)
    return time.thread_time() - t0, spent[0] * 1e3, engine.last_stats.decode_attention_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default="gsp,unique")
    ap.add_argument("--new", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = build_model()
    prompts = {"gsp": gsp_prompts(8, 8, 512, 64), "unique": gsp_prompts(64, 1, 512, 64)}
    print(f"radixkv cascade cost: 1 torch thread, torch {torch.__version__}, best of {args.rounds} rounds")
    print("| workload | cascade | generate CPU s | batch() CPU ms | decode attention s |")
    print("|---|---|---:|---:|---:|")
    for name in args.workloads.split(","):
        best = {True: [float("inf")] * 3, False: [float("inf")] * 3}
        for r in range(args.rounds):
            for cascade in ((True, False) if r % 2 == 0 else (False, True)):
                best[cascade] = [min(a, b) for a, b in zip(best[cascade], measure(model, prompts[name], args.new, cascade))]
        for cascade in (True, False):
            cpu, plan_ms, decode = best[cascade]
            print(f"| {name} | {'on' if cascade else 'off'} | {cpu:.2f} | {plan_ms:.1f} | {decode:.2f} |")
        print(f"# {name}: generate CPU on / off = {best[True][0] / best[False][0]:.3f}; "
              f"decode attention on / off = {best[True][2] / best[False][2]:.3f}")


if __name__ == "__main__":
    main()
