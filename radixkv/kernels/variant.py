"""AttentionVariant: what an attention layer adds to plain causal softmax attention, for every kernel.

    keys a query at position q sees:   k <= q                                  (causal, always)
      window W (sliding layers):       q - W < k          (W counts the query itself: transformers'
                                                            `sliding_window`, Mistral, Gemma, gpt-oss)
      chunk C (chunked layers):        k // C == q // C   (Llama 4's `attention_chunk_size`)
    scores:                            s = sm_scale * q . k
      soft-capping c (Gemma 2):        s = c * tanh(s / c)
    softmax over the keys seen, with sinks (gpt-oss): one logit per query head, unscaled, joins the
    denominator and weighs no value:   p_k = exp(s_k) / (sum_j exp(s_j) + exp(sink[h]))

Both masks are a lower bound on the key position, `first_key(q)`: a kernel starts reading there, so
a sliding layer's decode reads at most W keys whatever the context length. The defaults (all 0 /
None) are plain causal attention, the variant every kernel compiles first.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import torch

from radixkv.kernels._common import KernelInputError, check_same_device, check_tensor, tl, triton


class AttentionVariant(NamedTuple):
    window: int = 0  # sliding window W: a query sees itself and the W - 1 keys before it (0: no window)
    chunk: int = 0  # chunk size C: a query sees the keys of its own chunk up to itself (0: no chunks)
    softcap: float = 0.0  # logit soft-capping c > 0: scores become c * tanh(s / c) (0: none)
    sinks: torch.Tensor | None = None  # fp32 [num_heads]: per-head sink logit in the denominator (None: none)

    @property
    def masked(self) -> bool:
        """True when some earlier key is hidden from a query (a window or chunks)."""
        return self.window > 0 or self.chunk > 0

    def span(self, length: int) -> int:
        """The most keys one query sees in a sequence of `length` positions."""
        if self.window:
            length = min(length, self.window)
        return min(length, self.chunk) if self.chunk else length


CAUSAL = AttentionVariant()


def check_variant(variant: AttentionVariant, num_heads: int, device: torch.device) -> None:
    """Types and ranges of a variant (no host sync: sinks are checked by shape, dtype and device)."""
    if not isinstance(variant, AttentionVariant):
        raise KernelInputError(f"variant must be an AttentionVariant, got {type(variant).__name__}")
    for name in ("window", "chunk"):
        value = getattr(variant, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise KernelInputError(f"variant.{name} must be an int >= 0 (0: none), got {value!r}")
    cap = variant.softcap
    if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not math.isfinite(cap) or cap < 0:
        raise KernelInputError(f"variant.softcap must be a finite number >= 0 (0: none), got {cap!r}")
    if variant.sinks is not None:
        check_tensor("variant.sinks", variant.sinks, 1, (torch.float32,))
        check_same_device(sinks=variant.sinks, q=torch.empty(0, device=device))
        if variant.sinks.numel() != num_heads:
            raise KernelInputError(f"variant.sinks has {variant.sinks.numel()} logits for {num_heads} query heads")


def launch_args(variant: AttentionVariant, like: torch.Tensor) -> dict[str, object]:
    """The kernel arguments of a variant: runtime window/chunk/softcap, compile-time switches."""
    sinks = variant.sinks if variant.sinks is not None else torch.empty(0, dtype=torch.float32, device=like.device)
    return dict(window=variant.window, chunk=variant.chunk, softcap=float(variant.softcap), sinks_ptr=sinks,
                MASKED=variant.masked, SOFTCAP=variant.softcap > 0, SINKS=variant.sinks is not None)


# ---- Triton helpers (inlined into the attention kernels) ----

@triton.jit
def first_key(q_pos, window, chunk, MASKED: tl.constexpr):
    """Lowest key position a query at `q_pos` sees (0 without a window or chunks)."""
    if MASKED:
        lo = tl.where(window > 0, q_pos - window + 1, 0)
        lo = tl.maximum(lo, tl.where(chunk > 0, q_pos - q_pos % tl.maximum(chunk, 1), 0))
        return tl.maximum(lo, 0)
    return q_pos * 0


@triton.jit
def cap_scores(s, softcap, SOFTCAP: tl.constexpr):
    """softcap * tanh(s / softcap), with tanh from one exp (accurate to fp32 rounding)."""
    if SOFTCAP:
        x = s / softcap
        t = tl.exp(-2.0 * tl.abs(x))
        th = (1.0 - t) / (1.0 + t)
        return softcap * tl.where(x < 0, -th, th)
    return s


@triton.jit
def online_step(s, m_i, l_i):
    """The online-softmax update for a block of scores s [M, N] (-inf where masked), safe for rows
    that have seen no key yet: returns (m_new, alpha, p)."""
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, tl.exp(m_i - shift), tl.exp(s - shift[:, None])


# ---- torch reference helpers ----

def first_key_ref(variant: AttentionVariant, q_pos: torch.Tensor) -> torch.Tensor:
    lo = torch.zeros_like(q_pos)
    if variant.window:
        lo = torch.maximum(lo, q_pos - variant.window + 1)
    if variant.chunk:
        lo = torch.maximum(lo, q_pos - q_pos % variant.chunk)
    return lo


def cap_scores_ref(s: torch.Tensor, variant: AttentionVariant) -> torch.Tensor:
    return s if not variant.softcap else torch.tanh(s / variant.softcap) * variant.softcap


def softmax_ref(s: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """softmax over the last dim of fp32 scores s (every row keeps a key: causal rows see
    themselves); `sinks` (None, or fp32 shaped to broadcast against `s[..., :1]`: each row's query
    head's sink) joins each row's denominator, as gpt-oss's eager attention does."""
    if sinks is None:
        return torch.softmax(s, dim=-1)
    return torch.softmax(torch.cat([s, sinks.expand(*s.shape[:-1], 1)], dim=-1), dim=-1)[..., :-1]
