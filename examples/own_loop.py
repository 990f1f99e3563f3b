"""A greedy decode loop over radixkv's request API (open/reserve/batch/commit/close) and kernels; copy me."""

from __future__ import annotations

import torch
from torch import nn

from radixkv import CacheConfig, RadixCache
from radixkv.kernels import (ExtendLens, cascade_decode_launch, decode_attention_unchecked,
                             extend_attention_unchecked, store_kv_unchecked)  # no checks, no host syncs

V, D, H, HKV, L, HD = 128, 64, 4, 2, 2, 16  # vocab, hidden, heads, kv heads, layers, head dim


class Toy(nn.Module):  # learned positions, grouped-query attention
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.pos, self.head = nn.Embedding(V, D), nn.Embedding(256, D), nn.Linear(D, V)
        self.qkv = nn.ModuleList(nn.Linear(D, (H + 2 * HKV) * HD) for _ in range(L))
        self.out = nn.ModuleList(nn.Linear(D, D) for _ in range(L))

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, attend) -> torch.Tensor:  # ids, pos: [T]
        x = self.emb(ids) + self.pos(pos)
        for i in range(L):
            q, k, v = self.qkv[i](x).split([H * HD, HKV * HD, HKV * HD], -1)
            x = x + self.out[i](attend(i, q.view(-1, H, HD), k.view(-1, HKV, HD), v.view(-1, HKV, HD)).flatten(1))
        return self.head(x)  # [T, V]


def generate(model: Toy, cache: RadixCache, prompts: list[list[int]], max_new: int, cascade=True) -> tuple:
    seqs = [cache.open(p, max_reuse=len(p) - 1) for p in prompts]  # reuse cached prefixes, lock them
    todo, outs = [p[s.committed_len:] for p, s in zip(prompts, seqs)], [[] for _ in prompts]  # todo: no KV yet
    for _ in range(max_new):
        for s, t in zip(seqs, todo):
            cache.reserve(s, len(t))  # slots for positions [kv_len, kv_len + len(t))
        b, decode = cache.batch(seqs, cascade), all(len(t) == 1 for t in todo)  # inputs checked once per step
        pos, longest = torch.cat([torch.arange(s.committed_len, s.kv_len) for s in seqs]), max(s.kv_len for s in seqs)
        r2t, kv, lens = cache.req_pool.req_to_token, cache.kv_pool, ExtendLens.read(b.rows, b.prefix_lens, b.extend_lens)
        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # per layer: no syncs
            kb, vb = kv.k_buffer[i], kv.v_buffer[i]
            store_kv_unchecked(kb, vb, b.out_slots, k, v)  # new K/V into their slots
            return (cascade_decode_launch(q, kb, vb, b.cascade, HD**-0.5) if decode and b.cascade else
                    decode_attention_unchecked(q, kb, vb, r2t, b.rows, b.seq_lens, HD**-0.5, longest) if decode else
                    extend_attention_unchecked(q, k, v, kb, vb, r2t, b.rows, b.prefix_lens, b.extend_lens, HD**-0.5, lens))
        logits = model(torch.tensor(sum(todo, [])), pos, attend)[b.extend_lens.long().cumsum(0) - 1]
        for s, t in zip(seqs, todo):
            cache.commit(s, t)  # KV written: full pages become shareable now
        todo = [[t] for t in logits.argmax(-1).tolist()]
        outs = [o + t for o, t in zip(outs, todo)]
    for s in seqs:
        cache.close(s)  # unlock, free the partial page and the row; committed pages stay cached
    return outs, [s.cached_len for s in seqs]


def no_cache(model: Toy, prompt: list[int], max_new: int) -> list[int]:
    def dense(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # causal, no cache
        q, k, v = (x.transpose(0, 1) for x in (q, k, v))  # [heads, T, HD]
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(0, 1)
    toks = list(prompt)
    for _ in range(max_new):
        toks.append(int(model(torch.tensor(toks), torch.arange(len(toks)), dense)[-1].argmax()))
    return toks[len(prompt):]


@torch.inference_mode()
def main() -> None:
    torch.manual_seed(0)
    model, system = Toy(), torch.randint(0, V, (24,)).tolist()  # system: a prompt every request starts with
    cache = RadixCache(CacheConfig(num_layers=L, num_kv_heads=HKV, head_dim=HD, num_slots=1024, page_size=4,
                                   max_requests=8, max_context_len=256, dtype=torch.float32))
    for turn in range(2):  # the second turn reuses the system prompt the first one committed
        prompts = [system + torch.randint(0, V, (3 + i,)).tolist() for i in range(3)]
        outs, reused = generate(model, cache, prompts, max_new=8)
        assert outs == [no_cache(model, p, 8) for p in prompts], "cached decode diverged from no-cache"
        print(f"turn {turn}: {len(prompts)} requests x 8 tokens == no-cache; reused {reused} prompt tokens")


if __name__ == "__main__":
    main()
