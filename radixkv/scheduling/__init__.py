"""Cache-aware scheduling: queue orders (policies.py), bounded queue matching (matcher.py) and the
`radixkv simulate` serving simulator (cost_model.py, sim_trace.py, simulate.py)."""

from __future__ import annotations

from radixkv.scheduling.matcher import PrefixEstimates
from radixkv.scheduling.policies import POLICIES, Policy, make_policy

__all__ = ["POLICIES", "Policy", "PrefixEstimates", "make_policy"]
