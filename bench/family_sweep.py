"""Every causal-LM family transformers builds, through the Engine: served exactly, or refused?

For each model_type in transformers' MODEL_FOR_CAUSAL_LM_MAPPING_NAMES: a tiny config of its own
config class (radixkv/testing/tiny_configs.py), random weights (torch.manual_seed(0)), then
  1. the reference: `model.generate` greedy, one prompt at a time (eager attention where the model has it);
  2. `Engine(model, page_size=p)` for p in 1 and 16;
  3. round 1: two prompts longer than any window (26 and 33 tokens, sharing 20), 10 new tokens each;
     round 2: new prompts on the same 20-token prefix and the next turns of round 1 (reuse).
Each family lands in one class:
  EXACT    greedy output equals model.generate token for token (a first mismatch at a reference
           near-tie, top-2 gap < 1e-3, is excused), both page sizes, both rounds;
  REFUSED  Engine() raised UnsupportedModelError (its reason shown);
  WRONG    Engine() accepted it and some token differs;
  CRASH    Engine() or generate raised anything else (or the process died or ran past the timeout);
  SKIPPED  the tiny config or model could not be built, or model.generate itself fails (why shown).
Each family runs in a forked child with a timeout. Usage (OMP_NUM_THREADS=1: a shared box):
    OMP_NUM_THREADS=1 .venv/bin/python bench/family_sweep.py [--only llama gemma2 ...] [--timeout 60]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection

if sys.path and sys.path[0].rstrip("/").endswith("bench"):  # see bench/e2e.py: bench/kernels.py shadows
    del sys.path[0]  # the `kernels` package transformers probes for

import torch  # noqa: E402

TIE = 1e-3
NEW_TOKENS = 10
PAGES = (1, 16)


def prompts() -> tuple[list[list[int]], list[list[int]]]:
    g = torch.Generator().manual_seed(3)
    head = torch.randint(3, 250, (20,), generator=g).tolist()
    first = [head + torch.randint(3, 250, (6,), generator=g).tolist(),
             head + torch.randint(3, 250, (13,), generator=g).tolist()]
    second = [head + [7, 8, 9, 10, 11], first[1] + [12, 13, 14]]
    return first, second


def generation_config() -> object:
    """Greedy, no EOS, nothing else: the tiny vocabulary holds none of the model's own special tokens."""
    from transformers import GenerationConfig
    return GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)


def reference(model: torch.nn.Module, batch: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
    gen = generation_config()
    tokens, gaps = [], []
    with torch.no_grad():
        for p in batch:
            out = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                 generation_config=gen, output_logits=True, return_dict_in_generate=True)
            tokens.append(out.sequences[0, len(p):].tolist())
            gaps.append([float(t[0] - t[1]) for t in (s[0].float().topk(2).values for s in out.logits)])
    return tokens, gaps


def mismatch(got: list[list[int]], want: tuple[list[list[int]], list[list[float]]]) -> str | None:
    for i, (a, b) in enumerate(zip(got, want[0])):
        if a == b:
            continue
        k = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        if k < len(a) and k < len(b) and want[1][i][k] < TIE:
            continue  # a near-tie in the reference
        return f"prompt {i}: first wrong token at {k} of {len(b)}"
    return None


def classify(model_type: str, stage: Callable[[str], None] = lambda s: None) -> tuple[str, str]:
    """(class, detail) of one family; `stage` hears where it is ("build", "reference", "engine")."""
    from radixkv import UnsupportedModelError
    from radixkv.integrations.transformers import Engine
    from radixkv.testing.tiny_configs import tiny_model
    stage("build")
    try:
        model = tiny_model(model_type)
    except Exception as e:
        return "SKIPPED", f"build: {type(e).__name__}: {_short(e)}"
    try:
        model.set_attn_implementation("eager")
    except Exception:
        pass  # no eager path: the default one is the reference
    model.generation_config = generation_config()  # the Engine's defaults: no special token of the real vocab
    first, second = prompts()
    stage("reference")
    try:
        want = [reference(model, first), reference(model, second)]
    except Exception as e:
        return "SKIPPED", f"model.generate: {type(e).__name__}: {_short(e)}"
    reused = []
    stage("engine")
    for page in PAGES:
        try:
            engine = Engine(model, num_slots=512, page_size=page, max_batch_tokens=32, max_context_len=128)
        except UnsupportedModelError as e:
            return "REFUSED", _short(e, 400)
        except Exception as e:
            return "CRASH", f"Engine(): {type(e).__name__}: {_short(e)}"
        for r, (batch, ref) in enumerate(zip((first, second), want)):
            try:
                got = engine.generate(batch)
            except Exception as e:
                where = traceback.extract_tb(e.__traceback__)[-1]
                return "CRASH", (f"generate (page {page}, round {r + 1}): {type(e).__name__}: {_short(e)} "
                                 f"[{os.path.basename(where.filename)}:{where.lineno}]")
            bad = mismatch(got, ref)
            if bad:
                return "WRONG", f"page {page}, round {r + 1}: {bad}"
        reused.append(engine.last_stats.prefill_reused)
    return "EXACT", f"round-2 reused tokens (pages {PAGES}): {reused}"


def _short(e: BaseException, n: int = 160) -> str:
    return " ".join(str(e).split())[:n]


def _child(model_type: str, conn: Connection) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    try:
        conn.send(classify(model_type, lambda s: conn.send(("stage", s))))
    except BaseException as e:  # noqa: BLE001: a sweep reports, it does not stop
        conn.send(("CRASH", f"{type(e).__name__}: {_short(e)}"))


def run(model_type: str, timeout: float) -> tuple[str, str, float]:
    """classify() in a forked child; past `timeout` (or if the child dies) the stage it was in decides:
    building the model or running model.generate is SKIPPED, the Engine is CRASH."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    start = time.perf_counter()
    proc = ctx.Process(target=_child, args=(model_type, child))
    proc.start()
    child.close()
    stage, result = "build", None
    while result is None:
        left = timeout - (time.perf_counter() - start)
        try:
            message = parent.recv() if left > 0 and parent.poll(left) else None
        except EOFError:
            message = None
        if message is None:
            proc.join(0.1)
            why = f"the process died (exit code {proc.exitcode})" if proc.exitcode else f"timed out ({timeout:.0f} s)"
            result = ("CRASH" if stage == "engine" else "SKIPPED", f"{stage}: {why}")
        elif message[0] == "stage":
            stage = message[1]
        else:
            result = message
    if proc.is_alive():
        proc.kill()
    proc.join()
    return result[0], result[1], time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--only", nargs="*", help="model types to run; none: every causal-LM model type")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per family")
    args = parser.parse_args(argv)
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    import radixkv.integrations.transformers  # noqa: F401: imported once, before the forks
    transformers.logging.set_verbosity_error()
    types = args.only or sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    counts: dict[str, int] = {}
    start = time.perf_counter()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {len(types)} model types")
    print("| model_type | class | s | detail |\n|---|---|---|---|")
    for t in types:
        verdict, detail, secs = run(t, args.timeout)
        counts[verdict] = counts.get(verdict, 0) + 1
        print(f"| {t} | {verdict} | {secs:.1f} | {detail.replace('|', '/')} |", flush=True)
    print(f"\n{dict(sorted(counts.items()))} in {time.perf_counter() - start:.0f} s")
    return 1 if counts.get("WRONG") or counts.get("CRASH") else 0


if __name__ == "__main__":
    sys.exit(main())
