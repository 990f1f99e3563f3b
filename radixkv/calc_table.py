"""`radixkv calc` output: one rich table row per model, and a note under it for every model whose
weights leave no room for KV or whose attention heads the tensor-parallel degree cannot split."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from radixkv.calc import GIB, min_tensor_parallel, size, tp_error, with_tp_note
from radixkv.errors import InvalidArgumentError
from radixkv.model_spec import ModelSpec, get_model

COLUMNS = ("model", "KV layout per rank", "KV bytes/token", "MiB/request", "weights GiB/rank", "KV GiB/rank",
           "fit (paged)", "max_model_len", "fit (pre-alloc)")


def calc_table(names: list[str], a: argparse.Namespace, *, strict: bool) -> tuple[Table, list[str]]:
    """The table and its notes for the models `names`, sized with the `radixkv calc` arguments `a`.

    With `strict` (models the user named), a tensor-parallel degree that does not fit a model raises
    InvalidArgumentError; otherwise (`all`) that model gets a note instead of numbers."""
    tp = a.tensor_parallel_size
    if a.max_model_len != "auto" and a.context > a.max_model_len:
        raise InvalidArgumentError(f"--context {a.context} exceeds --max-model-len {a.max_model_len}")
    models = [get_model(n) for n in names]
    if strict:
        errors = [e for m in models if (e := tp_error(m, tp))]
        if errors:
            raise InvalidArgumentError("; ".join(errors) + " (vLLM refuses this too)")
    t = Table(title=f"KV cache on {a.gpu_gib:g} GiB x tp {tp}, gpu_memory_utilization {a.gpu_memory_utilization:g}, "
                    f"context {a.context:,} tokens, page {a.page_size}")
    for col in COLUMNS:
        t.add_column(col, justify="left" if col == "model" else "right")
    notes = []
    for m in models:
        row, note = _row(m, a)
        t.add_row(*row)
        if note:
            notes.append(f"[yellow]{escape(m.name)}:[/] {escape(note)}")
    return t, notes


def _row(m: ModelSpec, a: argparse.Namespace) -> tuple[list[str], str | None]:
    tp, util = a.tensor_parallel_size, a.gpu_memory_utilization
    weight_dtype = getattr(a, "quantization", None) or ((m.weight_dtype or m.dtype) if a.dtype == "auto" else a.dtype)
    kv_dtype = (m.dtype if a.dtype == "auto" else a.dtype) if a.kv_cache_dtype == "auto" else a.kv_cache_dtype
    if (err := tp_error(m, tp)) is not None:
        return [m.name, "-", "-", "-", "-", "-", "-", "-", "-"], err + " (vLLM refuses it)"
    max_len = m.max_position if a.max_model_len == "auto" else a.max_model_len
    s = size(m, context=a.context, gpu_gib=a.gpu_gib, dtype=kv_dtype, weight_dtype=weight_dtype, tp=tp,
             page_size=a.page_size, max_len=max_len, util=util)
    note = None
    if a.context > max_len:
        note = f"--context {a.context:,} exceeds its max_position_embeddings {max_len:,}."
    if not s.weights_fit:
        need = min_tensor_parallel(m, gpu_gib=a.gpu_gib, weight_dtype=weight_dtype, util=util)
        note = (f"the {weight_dtype} weights need {s.weight_bytes / GIB:,.1f} GiB per rank, more than the "
                f"{s.usable_bytes / GIB:,.1f} GiB usable ({a.gpu_gib:g} GiB x {util:g}): no room for KV. "
                + (f"The smallest -tp that leaves room is {need}." if need else "No -tp up to 1024 leaves room."))
    if m.window_layers and s.window_ratio < 1 and note is None:
        note = (f"{m.window_layers} of its {m.num_layers} layers read at most {m.window:,} tokens: MiB/request "
                f"and fit count their KV capped at the window's pages, {s.window_ratio:.3f} of the "
                f"{s.bytes_per_request_full / 2**20:,.1f} MiB that keeping every layer's KV takes (radixkv's "
                f"Engine holds this for sliding layers; chunked layers keep all of it).")
    kv_gib = f"{s.kv_budget_bytes / GIB:,.1f}" if s.weights_fit else "none"
    row = [m.name, f"{with_tp_note(m, tp)}, {kv_dtype}", f"{s.bytes_per_token:,.0f}",
           f"{s.bytes_per_request / 2**20:,.1f}", f"{s.weight_bytes / GIB:,.1f}", kv_gib, f"{s.fit_paged:,}",
           f"{max_len:,}", f"{s.fit_prealloc:,}"]
    return row, note
