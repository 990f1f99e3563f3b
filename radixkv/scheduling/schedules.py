"""The schedules by name, for `Engine(model, schedule=...)` and `radixkv simulate --schedule`: the orders of
policies.py and `auto` (auto.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from radixkv.errors import InvalidArgumentError
from radixkv.scheduling.auto import Auto
from radixkv.scheduling.cost_model import CostModel
from radixkv.scheduling.policies import DfsWeight, FcfsMatch, LongestPrefix, Policy, ResponseRatio

if TYPE_CHECKING:
    from radixkv.scheduling.matcher import PrefixEstimates


POLICIES: dict[str, type[Policy]] = {p.name: p for p in (Policy, FcfsMatch, LongestPrefix, DfsWeight,
                                                         ResponseRatio, Auto)}


def make_policy(name: str, estimates: PrefixEstimates, full_cache: int | None = None) -> Policy:
    """`full_cache`: one H100's KV cache in the cache's slots; None: the cost model's
    `kv_capacity_tokens` (400k), right where a slot is a token (the Engine's cache)."""
    if not isinstance(name, str) or name not in POLICIES:
        raise InvalidArgumentError(f"unknown schedule {name!r}: choose from {', '.join(POLICIES)}")
    full = CostModel.kv_capacity_tokens if full_cache is None else full_cache
    if isinstance(full, bool) or not isinstance(full, int) or full < 1:
        raise InvalidArgumentError(f"full_cache must be an int >= 1 (slots), got {full_cache!r}")
    return POLICIES[name](estimates, full)
