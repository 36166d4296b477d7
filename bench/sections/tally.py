"""What the sections of a bench run measured, in the order they came."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqkeeper.bench.measure import Figure


@dataclass
class Tally:
    """A run's figures (absolute) and ratios (each against its baseline)."""

    figures: list[Figure] = field(default_factory=list)
    ratios: list[Figure] = field(default_factory=list)
