"""A Mamba (selective-scan) chunk continued from a carried state in one forward: Jamba's prefill chunks
after a reused prefix or an earlier chunk.

Jamba's mixer runs a chunk of several tokens through `mamba_selective_scan` (modeling_jamba), whose
every implementation (torch loop, mamba_ssm's kernel) starts the SSM state from zero; its conv already
continues (`cache.update_conv_state` hands back the carried left context). The scan is linear in its
initial state, so a chunk that starts from `h0` instead of zero differs by a term we add to the
library's own result, nothing of the modeling code copied:

    dt_t = softplus(dt_t + bias)                     [B, I, T]  (as the scan discretises)
    decay_t = exp(A * sum_{s <= t} dt_s)             [B, I, T, N]  (= prod of the scan's exp(A * dt_s))
    h_t = h_t(from zero) + decay_t * h0              the state after token t
    y_t = y_t(from zero) + (C_t . decay_t * h0) * silu(z_t)

`continued_scan(model_type, cache)` installs such a scan in the model's module for one forward and
restores the original afterwards. The scan learns which layer it runs for from the cache: the mixer reads
its layer's state (`cache.get_recurrent_state(layer_idx)`) right before it scans (`StateCache.last_read`),
and a mixer that has a carried state gets it back as `h0`. A fresh request (no state yet) scans from zero
unchanged. The Engine's thread only: the swap is visible to the whole process while the forward runs.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from radixkv.integrations.recurrent_state import StateCache

# model_type -> the module whose `mamba_selective_scan` its mixers call (scan starts from zero state)
CONTINUED_SCANS = {"jamba": "transformers.models.jamba.modeling_jamba"}
_SCAN = "mamba_selective_scan"


@contextlib.contextmanager
def continued_scan(model_type: str, cache: StateCache) -> Iterator[None]:
    """While open, `model_type`'s selective scan starts each layer from its state in `cache` (no-op for a
    model not in CONTINUED_SCANS)."""
    if model_type not in CONTINUED_SCANS:
        yield
        return
    module = importlib.import_module(CONTINUED_SCANS[model_type])
    original = getattr(module, _SCAN)
    setattr(module, _SCAN, _from_state(original, cache))
    try:
        yield
    finally:
        setattr(module, _SCAN, original)


def _from_state(scan: Callable[..., Any], cache: StateCache) -> Callable[..., Any]:
    def continued(hidden_states: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                  C: torch.Tensor, D: torch.Tensor | None = None, z: torch.Tensor | None = None,
                  delta_bias: torch.Tensor | None = None, delta_softplus: bool = False,
                  return_last_state: bool = False, **kwargs: Any) -> Any:
        h0 = cache.last_read()
        result = scan(hidden_states, dt, A, B, C, D=D, z=z, delta_bias=delta_bias, delta_softplus=delta_softplus,
                      return_last_state=return_last_state, **kwargs)
        if h0 is None:
            return result
        out, last = result if return_last_state else (result, None)
        carried = _carried(h0, dt, A, delta_bias, delta_softplus)  # [B, I, T, N]
        extra = torch.einsum("bitn,bnt->bit", carried, C.float())
        if z is not None:
            extra = extra * F.silu(z.float())
        out = out + extra.to(out.dtype)
        if last is None:
            return out
        return out, last + carried[:, :, -1].to(last.dtype)
    return continued


def _carried(h0: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, delta_bias: torch.Tensor | None,
             delta_softplus: bool) -> torch.Tensor:
    """`decay_t * h0`: what the initial state contributes to the state after each token, `[B, I, T, N]`."""
    dt = _discretised(dt, delta_bias, delta_softplus)
    decay = torch.exp(A.float()[None, :, None, :] * torch.cumsum(dt, dim=-1)[..., None])
    return decay * h0.float()[:, :, None, :]


def _discretised(dt: torch.Tensor, delta_bias: torch.Tensor | None, delta_softplus: bool) -> torch.Tensor:
    dt = dt.float()
    if delta_bias is not None:
        dt = dt + delta_bias.float()[..., None]
    return F.softplus(dt) if delta_softplus else dt
