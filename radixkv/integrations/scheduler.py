"""The Engine's Scheduler, kept importable here for external code: it lives in
radixkv/scheduling/scheduler.py, beside the policies and the simulator that drive it."""

from __future__ import annotations

from radixkv.scheduling.scheduler import Plan, Request, Scheduler

__all__ = ["Plan", "Request", "Scheduler"]
