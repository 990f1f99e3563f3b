"""ThreadOwner: which thread drives a RadixCache (DESIGN.md: a cache is driven by one thread).

The thread that built the cache owns it until some thread calls `adopt()`; the first adopter takes
it over from the builder, and after that a thread adopts only a cache whose owner released it
(`release()`) or has ended. `check()` runs first in every public call of the cache and of its
secondary groups, and raises ThreadOwnershipError from any other thread.
"""

from __future__ import annotations

import threading
from typing import Final

from radixkv.errors import ThreadOwnershipError

# Final: compiled, a C static (not a module-dict lookup per call); its int result is compared unboxed
_get_ident: Final = threading.get_ident
_RELEASED: Final = 0  # the owner's ident when no thread owns the cache (no running thread has ident 0)


class ThreadOwner:
    def __init__(self) -> None:
        self._ident: int = _get_ident()  # (not `_thread`: mypyc 2.4 names its C field __thread, a C keyword)
        self._adopted = False  # an adopt() took the cache over: a second needs it released or ended
        self._adopt_lock = threading.Lock()

    @property
    def thread(self) -> int | None:
        """The owning thread's ident (None: released)."""
        return None if self._ident == _RELEASED else self._ident

    def check(self) -> None:
        if _get_ident() != self._ident:
            raise ThreadOwnershipError(
                "a RadixCache is driven by one thread; this call came from another one. Call every "
                "method from the scheduler thread (or hand the cache over: release_thread(), then adopt_thread())")

    def adopt(self) -> None:
        me = _get_ident()
        with self._adopt_lock:
            owner = self._ident
            if self._adopted and owner not in (_RELEASED, me) and any(t.ident == owner for t in threading.enumerate()):
                raise ThreadOwnershipError(
                    f"adopt_thread: thread {owner} adopted this RadixCache and is still running; it must "
                    "call release_thread() before another thread adopts the cache")
            self._ident, self._adopted = me, True

    def release(self) -> None:
        self.check()
        self._ident = _RELEASED
