"""bench/prior_ghosts.py (pure core only): ghost counts from the prior's LFU verdict, as a subclass of the policy,
with the stops round 25 scored (bench/RESULTS.md)."""

from __future__ import annotations

import pytest
from scripts import ROOT, load_script

from radixkv import COMPILED_CORE
from radixkv.bench.runner import replay
from radixkv.eviction import POLICIES

pytestmark = pytest.mark.skipif(COMPILED_CORE, reason="subclasses GhostLFU, which the compiled core does not allow")
CELL, SHARE = "seed:3063", 0.1  # check's canary cell: the prior picks LFU, which wins it; g1 loses it by 2 points


@pytest.fixture(scope="module")
def pg():  # noqa: ANN201 - a module
    return load_script(ROOT / "bench" / "prior_ghosts.py")


@pytest.fixture(scope="module")
def cell(pg):  # noqa: ANN001, ANN201 - the module; requests, capacity, page
    reqs, page, caps = pg.policy_grid.shares(CELL)
    return reqs, dict(caps)[SHARE], page


def hit(pg, cell, **constants) -> float:  # noqa: ANN001 - the module, the cell
    reqs, cap, page = cell
    POLICIES["prior-ghosts"] = type("Scored", (pg.PriorGhosts,), constants)
    try:
        return replay(reqs, cap, "prior-ghosts", page).hit_rate
    finally:
        del POLICIES["prior-ghosts"]


def test_without_ghosts_it_is_the_policy(pg, cell) -> None:  # noqa: ANN001
    reqs, cap, page = cell
    assert hit(pg, cell, GHOSTS_ON=False) == replay(reqs, cap, "adaptive", page).hit_rate


def test_ghosts_from_the_prior_lose_the_canary_and_the_sign_stop_with_faster_aging_keeps_it(pg, cell) -> None:  # noqa
    base = hit(pg, cell, GHOSTS_ON=False)
    assert hit(pg, cell) < base - 0.015  # g1: -1.97 points, lost while the LRU shadow is stopped
    assert hit(pg, cell, SIGN_OFF=1.0) < base - 0.015  # no lookup there favours LRU: the sign stop alone never fires
    assert hit(pg, cell, SIGN_OFF=1.0, AGE=256) > base - 0.0005
    assert hit(pg, cell, DUTY_OFF=True) > base - 0.0005  # off at the shadow's first stop
    assert hit(pg, cell, TWIN_OFF=0.0) < base - 0.015  # the plain-LFU twin stops with the shadow, before the loss


def test_aging_ghosts_halve_every_age_evictions(pg) -> None:  # noqa: ANN001
    g = pg.AgingGhosts()
    g.age = 3

    class Victim:  # the fields GhostLFU reads (eviction/view.py's NodeFields)
        def __init__(self, token: int) -> None:
            self.ns, self.depth, self.size, self.hit_count = b"", 0, 1, 4
            self.key = token.to_bytes(4, "little")

    for token in (1, 2):
        g.remember(Victim(token))
    assert sorted(v >> 40 for v in g.ghosts.values()) == [4, 4]
    g.remember(Victim(3))  # the third eviction: all halve
    assert sorted(v >> 40 for v in g.ghosts.values()) == [2, 2, 2] and g.aged == 0


def test_the_twin_stops_the_ghosts_where_plain_lfu_matches_more(pg) -> None:  # noqa: ANN001
    reqs, page, caps = pg.policy_grid.shares("moon:12")
    moon = reqs, dict(caps)[0.1], page  # LFU wins it; round 25: the twin's stop moves it -0.38 -> -0.57 points
    stops = {"SIGN_OFF": 1.0, "AGE": 256}
    assert hit(pg, moon, **stops, TWIN_OFF=0.02) < hit(pg, moon, **stops) - 0.001
