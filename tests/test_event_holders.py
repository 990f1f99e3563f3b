"""Holders (events/holders.py) against a Counter per (hash, medium, group): random adds and removes
of runs of distinct hashes, shared and not, on two media and two groups."""

from __future__ import annotations

import random
from collections import Counter

from radixkv.events.holders import Holders


def test_holders_report_first_and_last_holders_as_a_counter_does() -> None:
    rng = random.Random(0)
    holders, model = Holders(), Counter()
    live: list[tuple[list[int], str, int]] = []  # what was added and not yet removed
    fast = slow = 0
    for _ in range(3000):
        if live and rng.random() < 0.45:
            hashes, medium, group = live.pop(rng.randrange(len(live)))
            want = [h for h in hashes if model[(h, medium, group)] == 1]
            model.subtract((h, medium, group) for h in hashes)
            assert holders.remove(list(hashes), medium, group) == want
        else:
            hashes = rng.sample(range(40), rng.randint(1, 6))  # distinct within a call, often shared across calls
            medium, group = rng.choice(("GPU", "CPU")), rng.randint(0, 1)
            want = [model[(h, medium, group)] == 0 for h in hashes]
            model.update((h, medium, group) for h in hashes)
            new = holders.add(hashes, medium, group)
            fast, slow = fast + (new is None), slow + (new is not None)
            assert (new if new is not None else [True] * len(hashes)) == want
            live.append((hashes, medium, group))
    for hashes, medium, group in live:  # everything goes: every block is reported removed exactly once
        want = [h for h in hashes if model[(h, medium, group)] == 1]
        model.subtract((h, medium, group) for h in hashes)
        assert holders.remove(hashes, medium, group) == want
    assert fast and slow  # both paths ran
    assert not +model
    assert all(not held and not extra for held, extra in holders._by_medium.values())
