"""Evidence: the adaptive policy's decayed statistics of the paired leads over one horizon.

Per lookup, eviction/adaptive.py takes the paired lead (tokens the other expert matched minus those the
followed one matched) and keeps, over each horizon (WINDOW cache sizes of newly cached tokens, and the
shorter LEAVE_WINDOW from the last switch), decayed sums of the leads, their squares, the tokens asked,
the sign count and the count of lookups where the experts differed. This class holds one horizon's
sums, so that a field added to them is added, decayed and reset in one place.
"""

from __future__ import annotations


class Evidence:
    """One horizon's decayed sums (module docstring)."""

    lead: float  # sum of the leads
    var: float  # sum of their squares
    asked: float  # tokens asked
    sign: float  # lookups where the other expert matched more minus those where it matched less
    count: float  # lookups where the experts differed

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """No evidence (a horizon that starts now)."""
        self.lead = self.var = self.asked = self.sign = self.count = 0.0

    def add(self, lead: int, asked: int) -> None:
        """A lookup's paired lead and the tokens it asked."""
        self.lead += lead
        self.var += lead * lead
        self.asked += asked
        if lead:
            self.sign += 1.0 if lead > 0 else -1.0
            self.count += 1.0

    def decay(self, f: float) -> None:
        """Scale every sum by `f` (0 <= f <= 1; the squares by f * f)."""
        self.lead *= f
        self.var *= f * f
        self.asked *= f
        self.sign *= f
        self.count *= f

    def flip(self) -> None:
        """The same evidence seen from the other expert's side (after a switch)."""
        self.lead = -self.lead
        self.sign = -self.sign
