"""DutyCycle: when the adaptive policy's other-expert shadow stops, and when it starts again.

In steady state adaptive.py's shadow of the expert not followed runs on every request, most of the
policy's cost. Where it keeps losing it is stopped (freed): when, over a window of `quiet` turnovers
with no switch's shadow left, its paired leads sum to `quiet_z` standard deviations in the followed
expert's favour, or do so together with the windows just before it (up to `span` windows in all, each
in that favour: a short run, 150-400 requests, sees only 3-4 windows, none alone at 3 sd where the
followed expert leads by 2.4-2.6 sd in each; bench/RESULTS.md, round 13), or when every one of at
least `sign` differing lookups in the window favoured it (a sign test, 2^-sign at even odds: lookups
all one way whose z a few long ones hold under `quiet_z`). The decayed sums the switch
test reads are no test here: a switch hands them over already in the new expert's favour
(bench/RESULTS.md, round 12: stopping on them held a wrong switch on chat 25%, -0.62 -> -8.83
points). It restarts after `off` turnovers (doubling with each stop since the last switch, up to
`off_max`), or as soon as the real cache's hit ratio over a window of `canary`
turnovers falls `drop` below that of the window that stopped it (the traffic changed). The restart is
a copy of the real cache running the other expert, in transient: its leads count from `rewarm`
turnovers on.

This class only counts; adaptive.py frees and copies the shadow. Turnovers are tokens newly cached,
in units of `capacity` (the most tokens the real cache has held).
"""

from __future__ import annotations


class DutyCycle:
    """The counters of adaptive.py's duty-cycled shadow (module docstring)."""

    def __init__(self, quiet: float, quiet_z: float, span: int, off: float, off_max: float, rewarm: float,
                 drop: float, canary: float, sign: int = 0) -> None:
        self.quiet, self.quiet_z, self.span, self.off, self.off_max = quiet, quiet_z, span, off, off_max
        self.rewarm, self.drop, self.canary, self.sign = rewarm, drop, canary, sign
        self.calm = 0  # tokens cached in the quiet window so far
        self.calm_lead = 0  # sum of the window's leads
        self.calm_var = 0  # sum of their squares
        self.calm_for = 0  # its lookups where the followed expert matched more
        self.calm_against = 0  # ... and those where the other one did
        self.calm_hit = 0  # tokens the real cache matched in the window (of calm_asked asked)
        self.calm_asked = 0
        self.run: list[tuple[int, int]] = []  # (lead, squares) of the last windows (up to span), each in the
        # followed expert's favour: a window is judged alone and with those before it
        self.pause = off  # turnovers the next stop lasts
        self.floor = 0.0  # while stopped: the hit ratio below which it restarts early
        self.seen = 0  # while stopped: tokens cached in the canary window so far,
        self.seen_hit = 0  # ... the real cache's matched tokens there
        self.seen_asked = 0  # ... and the tokens asked
        self.left = 0  # tokens the real cache must still cache before the stopped shadow restarts
        self.warm = 0  # tokens a restarted shadow must still cache before its leads count

    def lookup(self, lead: int, hit: int, asked: int) -> None:
        """A lookup with the shadow running and warm: its paired lead, the real cache's hit, the tokens asked."""
        self.calm_lead += lead
        self.calm_var += lead * lead
        if lead < 0:
            self.calm_for += 1
        elif lead > 0:
            self.calm_against += 1
        self.calm_hit += hit
        self.calm_asked += asked

    def idle_lookup(self, hit: int, asked: int) -> None:
        """A lookup while the shadow is stopped: the canary's hit ratio."""
        self.seen_hit += hit
        self.seen_asked += asked

    def cached(self, added: int, capacity: int, steady: bool) -> bool:
        """`added` tokens newly cached with the shadow running; `steady`: no switch's shadow is left.
        True: stop the shadow now."""
        if self.warm > 0:
            self.warm -= added
            return False
        if not steady or self.quiet_z <= 0.0:
            self.run.clear()
            self._restart_window()
            return False
        self.calm += added
        if self.calm < self.quiet * capacity:
            return False
        stop = self._judge(self.calm_lead, self.calm_var)  # the window is over
        if stop:
            self.left = int(self.pause * capacity)
            self.pause = min(2 * self.pause, self.off_max)
            self.floor = self.calm_hit / max(1, self.calm_asked) - self.drop
            self.seen = self.seen_hit = self.seen_asked = 0
        self._restart_window()
        return stop

    def idle(self, added: int, capacity: int) -> bool:
        """`added` tokens newly cached with the shadow stopped. True: restart it now (then warming)."""
        self.left -= added
        self.seen += added
        if self.seen >= self.canary * capacity:
            if self.seen_hit < self.floor * self.seen_asked:  # the traffic changed: judge it now
                self.left = 0
                self.pause = self.off
            self.seen = self.seen_hit = self.seen_asked = 0
        if self.left > 0:
            return False
        self.warm = int(self.rewarm * capacity)
        return True

    def switched(self) -> None:
        """The policy switched experts: the next stop lasts `off` again."""
        self.pause = self.off

    def _judge(self, lead: int, var: int) -> bool:
        """Stop if the window that ends, alone or with the windows just before it (each in the followed
        expert's favour, up to `span` in all), favours the followed expert by `quiet_z` sd, or if at least
        `sign` of its lookups differed and all of them favoured it."""
        run = self.run
        if lead >= 0:
            run.clear()
            return False
        if 0 < self.sign <= self.calm_for and self.calm_against == 0:
            run.clear()
            return True
        run.append((lead, var))
        del run[:-self.span]
        z2, total, squares = self.quiet_z * self.quiet_z, 0, 0
        for before, before_var in reversed(run):
            total += before
            squares += before_var
            if total * total > z2 * squares:
                run.clear()
                return True
        return False

    def _restart_window(self) -> None:
        self.calm = self.calm_lead = self.calm_var = self.calm_hit = self.calm_asked = 0
        self.calm_for = self.calm_against = 0
