"""Torch references of the cascade kernels (cascade.py): same arguments, same results, no checks
and no host syncs. A level is padded to `[groups, max_rows]` rows and `[groups, max_kv]` slots, each
group's K/V gathered once, heads-major, and every product is one batched matmul in fp32; a window or
chunks become a -inf bias outside each query's `[first_key(q_pos), q_pos]`."""

from __future__ import annotations

import torch

from radixkv.kernels.cascade_plan import CascadeLevel, CascadePlan, PaddedLevel, pad_level
from radixkv.kernels.merge import merge_padded_ref, merge_states_ref
from radixkv.kernels.variant import CAUSAL, AttentionVariant, cap_scores_ref, first_key_ref


def partial_states(entries: int, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty fp32 partial states `(o [entries, heads, dim], lse [entries, heads])` for q's heads."""
    heads, dim = q.shape[1:]
    return (torch.empty((entries, heads, dim), dtype=torch.float32, device=q.device),
            torch.empty((entries, heads), dtype=torch.float32, device=q.device))


def cascade_attention_ref(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, level: CascadeLevel,
                          sm_scale: float, softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference of `cascade_attention` (same arguments, same result; no checks, no host
    syncs): pads the level to `[groups, max_rows]` rows and `[groups, max_kv]` slots, gathers each
    group's K/V once, heads-major, and runs one batched matmul per product in fp32."""
    o, lse = partial_states(level.qo_indices.numel(), q)
    _level_states_ref(q, k_buf, v_buf, level, sm_scale, AttentionVariant(softcap=softcap), None, o, lse)
    return o, lse


def _level_states_ref(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, level: CascadeLevel,
                      sm_scale: float, variant: AttentionVariant, q_pos: torch.Tensor | None,
                      o_out: torch.Tensor, lse_out: torch.Tensor) -> None:
    """Writes the level's states into o_out `[entries, heads, dim]` and lse_out `[entries, heads]`
    (a masked variant reads `q_pos` and `level.kv_pos`)."""
    dim, kv_heads = q.shape[2], k_buf.shape[1]
    groups, entries, width = level.qo_indptr.numel() - 1, level.qo_indices.numel(), level.max_rows
    if entries == 0 or level.kv_indices.numel() == 0 or level.max_kv == 0:
        o_out.zero_()
        lse_out.fill_(float("-inf"))
        return
    pad = level.padded if level.padded is not None else pad_level(level)
    rows_hm = (pad.slots[None] * kv_heads + torch.arange(kv_heads, device=q.device)[:, None, None]).flatten()

    def heads_major(buf: torch.Tensor) -> torch.Tensor:  # [kv_heads x groups, max_kv, dim], fp32
        return buf.reshape(-1, dim).index_select(0, rows_hm).view(kv_heads * groups, -1, dim).float()

    k, v = heads_major(k_buf), heads_major(v_buf)
    qg = q[pad.rows].view(groups, width, kv_heads, -1, dim)  # [groups, max_rows, kv_heads, group, dim]
    qg = qg.permute(2, 0, 1, 3, 4).reshape(kv_heads * groups, -1, dim).float()  # [.., max_rows x group, dim]
    bias = _bias_ref(pad, level, variant, q_pos, q.shape[1] // kv_heads)  # [groups, max_rows x group or 1, max_kv]
    bias = bias[None].expand(kv_heads, -1, -1, -1).reshape(kv_heads * groups, -1, bias.shape[-1])
    if variant.softcap:
        s = cap_scores_ref(torch.bmm(qg, k.transpose(-1, -2)) * sm_scale, variant) + bias
    else:
        s = torch.baddbmm(bias, qg, k.transpose(-1, -2), alpha=sm_scale)  # [.., max_rows x group, max_kv]
    top = s.amax(-1, keepdim=True)
    top.masked_fill_(top == float("-inf"), 0.0)  # a group without KV: every weight exp(-inf) = 0
    p = s.sub_(top).exp_()  # one exp per score, in place
    total = p.sum(-1, keepdim=True)
    lse = total.log().add_(top)  # -inf for a group without KV
    o = torch.bmm(p, v).div_(total.masked_fill_(total == 0, 1.0))  # [.., max_rows x group, dim]
    o_out.view(entries, kv_heads, -1, dim).copy_(o.view(kv_heads, groups * width, -1, dim).transpose(0, 1)[pad.at])
    lse_out.view(entries, kv_heads, -1).copy_(lse.view(kv_heads, groups * width, -1).transpose(0, 1)[pad.at])


def _bias_ref(pad: PaddedLevel, level: CascadeLevel, variant: AttentionVariant, q_pos: torch.Tensor | None,
              group: int) -> torch.Tensor:
    """0 where a query vector sees a key, -inf elsewhere: `[groups, 1, max_kv]` (padding only), or
    `[groups, max_rows x group, max_kv]` when masked (keys outside [first_key(q_pos), q_pos] too)."""
    if not variant.masked:
        return pad.bias[:, None]
    assert q_pos is not None and level.kv_pos is not None  # the checked launcher refuses a plan without
    key = level.kv_pos[:, None].long() + torch.arange(pad.slots.shape[1], device=pad.slots.device)  # [groups, max_kv]
    qp = q_pos[pad.rows].long()  # [groups, max_rows]
    seen = (key[:, None] >= first_key_ref(variant, qp)[..., None]) & (key[:, None] <= qp[..., None])
    bias = pad.bias[:, None].masked_fill(~seen, float("-inf"))  # [groups, max_rows, max_kv]
    return bias.repeat_interleave(group, dim=1)


def cascade_decode_ref(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, plan: CascadePlan,
                       sm_scale: float, variant: AttentionVariant = CAUSAL) -> torch.Tensor:
    """Torch reference of `cascade_decode` (same arguments, same result; no checks, no host syncs)."""
    o, lse = partial_states(plan.num_entries, q)
    start = 0
    for lvl in plan.levels:
        n = lvl.qo_indices.numel()
        _level_states_ref(q, k_buf, v_buf, lvl, sm_scale, variant, plan.q_pos, o[start:start + n],
                          lse[start:start + n])
        start += n
    if plan.merge_padded is None:
        return merge_states_ref(o, lse, plan.merge_indptr, plan.merge_indices, plan.max_entries, q.dtype,
                                variant.sinks)
    return merge_padded_ref(o, lse, *plan.merge_padded, q.dtype, variant.sinks)
