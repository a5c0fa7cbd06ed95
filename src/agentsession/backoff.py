"""One retry schedule for every retry of the library: :class:`Backoff`.

Two kinds of waiting share it. After a **lost connection or an unreachable server** a write
tries again with a growing pause (20 ms, doubling up to 1 s) until the store's
``reconnect_timeout`` has passed since the first such pause. When **other writers keep getting
ahead** of a write (a conditional append that found the log moved, an encrypted append that
must seal again), the first four tries go on at once and then each waits a random pause whose
bound doubles from 0.5 ms up to 50 ms, so that one writer gets ahead. Both count tries against
one limit.
"""

from __future__ import annotations

import random
import time

__all__ = ["Backoff"]


class Backoff:
    """The tries of one retried operation: ``while backoff.next_try(): ...``, pausing for
    :meth:`contention_pause` or :meth:`reconnect_pause` before a try that follows a failure.

    ``tries`` bounds the number of tries (``next_try`` turns False after it);
    ``reconnect_timeout`` is how many seconds :meth:`reconnect_pause` keeps answering, from
    its first call (0: it answers None at once, and the caller gives up)."""

    __slots__ = ("_deadline", "_pause", "attempt", "reconnect_timeout", "tries")

    def __init__(self, *, tries: int, reconnect_timeout: float = 0.0) -> None:
        self.tries = tries
        self.reconnect_timeout = reconnect_timeout
        self.attempt = -1
        """The index of the current try (from 0; -1 before the first)."""
        self._deadline: float | None = None
        self._pause = 0.02

    def next_try(self) -> bool:
        """Count a new try; False when ``tries`` are spent."""
        self.attempt += 1
        return self.attempt < self.tries

    def contention_pause(self) -> float:
        """Seconds to wait before the current try of a write that other writers keep getting
        ahead of: none for the first four tries, then a random pause whose bound doubles from
        0.5 ms up to 50 ms."""
        attempt = self.attempt
        if attempt < 4:
            return 0.0
        return random.uniform(0, min(0.05, 0.0005 * 2 ** min(attempt - 4, 16)))

    def reconnect_pause(self) -> float | None:
        """Seconds to wait before the next try after a lost connection or an unreachable
        server: 20 ms, doubling up to 1 s, until ``reconnect_timeout`` seconds from the first
        call have passed; then None (give up)."""
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.reconnect_timeout
        left = self._deadline - now
        if left <= 0:
            return None
        pause = min(self._pause, left)
        self._pause = min(self._pause * 2, 1.0)
        return pause

    def __repr__(self) -> str:
        return f"<Backoff try {self.attempt + 1} of {self.tries}>"
