"""The router-engine loop, closed: what the router predicted each instance holds for a request, what
the instance actually matched, and the difference, in Prometheus text.

Per routed request the router knows the prefix it predicted the chosen instance holds (its score
in blocks x block_size, at most the prompt); the instance reports the tokens its `open()` /
`match_prefix` actually matched. Per instance:

    radixkv_router_prompt_tokens_total             prompt tokens routed to it
    radixkv_router_predicted_hit_tokens_total      of those, predicted cached there (the index's view)
    radixkv_router_delivered_hit_tokens_total      actually matched there (vLLM: prefix_cache_hits)
    radixkv_router_stale_miss_tokens_total         predicted but not matched: the index was stale
                                                   (blocks evicted or never stored since it learnt of them)
    radixkv_router_unpredicted_hit_tokens_total    matched beyond the prediction: the index lagged behind

delivered = predicted - stale_miss + unpredicted. All are token counters with the labels
`model_name` and `instance` (vLLM labels its prefix-cache counters with model_name).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, fields

from radixkv.metrics import prometheus_family

_MAX_PENDING = 100_000  # routed requests awaiting their report; older ones are forgotten (counted)


@dataclass
class LoopStats:
    prompt_tokens: int = 0
    predicted_hit_tokens: int = 0
    delivered_hit_tokens: int = 0
    stale_miss_tokens: int = 0
    unpredicted_hit_tokens: int = 0
    requests: int = 0


HELP = {
    "prompt_tokens": "Prompt tokens of the requests routed to the instance (and reported back).",
    "predicted_hit_tokens": "Prompt tokens the router predicted the instance had cached when it routed there.",
    "delivered_hit_tokens": "Prompt tokens the instance actually found in its prefix cache.",
    "stale_miss_tokens": "Predicted cached tokens the instance did not have: the index was stale.",
    "unpredicted_hit_tokens": "Cached tokens the instance had beyond the prediction: the index lagged behind.",
    "requests": "Routed requests whose outcome the instance reported.",
}


class Loop:
    """Predictions awaiting reports, and per-instance LoopStats. Written by the Router only."""

    def __init__(self) -> None:
        self.pending: OrderedDict[int, tuple[str, int, int]] = OrderedDict()  # id -> instance, predicted, prompt
        self.by_instance: dict[str, LoopStats] = {}
        self.forgotten = 0

    def predict(self, request_id: int, instance: str, predicted: int, prompt: int) -> None:
        self.pending[request_id] = (instance, predicted, prompt)
        if len(self.pending) > _MAX_PENDING:
            self.pending.popitem(last=False)
            self.forgotten += 1

    def report(self, request_id: int, matched: int) -> bool:
        entry = self.pending.pop(request_id, None)
        if entry is None:
            return False
        instance, predicted, prompt = entry
        st = self.by_instance.setdefault(instance, LoopStats())
        matched = min(max(0, matched), prompt)
        st.requests += 1
        st.prompt_tokens += prompt
        st.predicted_hit_tokens += predicted
        st.delivered_hit_tokens += matched
        st.stale_miss_tokens += max(0, predicted - matched)
        st.unpredicted_hit_tokens += max(0, matched - predicted)
        return True

    def total(self) -> LoopStats:
        out = LoopStats()
        for st in self.by_instance.values():
            for f in fields(LoopStats):
                setattr(out, f.name, getattr(out, f.name) + getattr(st, f.name))
        return out

    def prometheus(self, model_name: str) -> str:
        text = []
        for f in fields(LoopStats):
            samples = [({"model_name": model_name, "instance": inst}, getattr(st, f.name))
                       for inst, st in sorted(self.by_instance.items())]
            text.append(prometheus_family(f"radixkv_router_{f.name}_total", "counter", HELP[f.name], samples))
        return "".join(text)
