"""Exponential backoff with jitter, per partition.

The n-th consecutive transient failure of a partition waits a random time in ``[d/2, d]`` with
``d = min(max, base * 2**(n-1))``: growing, capped, and spread so that many consumers (or
partitions) hitting the same outage do not retry in lockstep. A success resets the count.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    base_s: float = 0.2
    max_s: float = 30.0
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def __post_init__(self) -> None:
        if self.base_s <= 0 or self.max_s < self.base_s:
            raise ValueError(f"backoff needs 0 < base ({self.base_s}) <= max ({self.max_s})")

    def ceiling(self, attempt: int) -> float:
        """The upper bound of the delay after the ``attempt``-th consecutive failure (1-based)."""
        if attempt < 1:
            return 0.0
        exponent = min(attempt - 1, 62)  # 2**62 * base is beyond any cap; avoid float overflow
        return min(self.max_s, self.base_s * (2.0**exponent))

    def delay(self, attempt: int) -> float:
        """A jittered delay in ``[ceiling/2, ceiling]`` for the ``attempt``-th consecutive failure."""
        top = self.ceiling(attempt)
        return self.rng.uniform(top / 2, top)
