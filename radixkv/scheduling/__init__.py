"""Cache-aware scheduling: the continuous-batching Scheduler (scheduler.py), queue orders (policies.py, auto.py;
by name: schedules.py), bounded queue matching (matcher.py) and the `radixkv simulate` serving simulator
(cost_model.py, sim_trace.py, simulate.py)."""

from __future__ import annotations

from radixkv.scheduling.matcher import PrefixEstimates
from radixkv.scheduling.policies import Policy
from radixkv.scheduling.schedules import POLICIES, make_policy
from radixkv.scheduling.scheduler import Plan, Request, Scheduler

__all__ = ["POLICIES", "Plan", "Policy", "PrefixEstimates", "Request", "Scheduler", "make_policy"]
