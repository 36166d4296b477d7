"""Retention of the audit store by category: how long each category's rows
are kept (``SEQKEEPER_AUDIT_RETENTION``, e.g. ``orders=90d,payments=7y,*=inf``).

Invariants (tests/spark_sink/test_retention.py):

* a row is removed only when its whole day lies before its category's
  horizon, ``today - N days``: a row of day ``d`` is kept while
  ``d >= today - N``, so nothing younger than its retention ever goes;
* a category not named takes ``*`` 's retention, and with no ``*`` (or
  ``inf``) is kept forever; an empty policy keeps everything;
* parsing is strict: one malformed entry refuses the whole setting.

Units: ``d`` (days), ``w`` (7 days), ``y`` (365 days), or ``inf``. A
category is written as the store names it, or as its topic (``-`` becomes
``_``, as the store derives it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

#: Days per unit.
UNITS = {"d": 1, "w": 7, "y": 365}
#: The entry that applies to the categories not named.
OTHERS = "*"
_ENTRY = re.compile(r"^(?P<category>\*|[A-Za-z0-9_.-]+)=(?:(?P<n>[0-9]+)(?P<unit>[dwy])|inf)$")
EXAMPLE = "orders=90d,payments=7y,*=inf"


@dataclass(frozen=True)
class AuditRetention:
    """Days each category's rows are kept (``None``: forever)."""

    days: tuple[tuple[str, int | None], ...] = ()

    @classmethod
    def parse(cls, text: str) -> AuditRetention:
        """``text`` as a policy, or a ValueError saying what was expected."""
        entries: dict[str, int | None] = {}
        for raw in text.split(",") if text.strip() else ():
            entry = raw.strip()
            match = _ENTRY.match(entry)
            if match is None:
                raise ValueError(
                    f"{entry!r} is not <category>=<N>d|w|y or <category>=inf (e.g. {EXAMPLE})"
                )
            category = match["category"].replace("-", "_")
            if category in entries:
                raise ValueError(f"category {category!r} is given twice")
            n = match["n"]
            if n is not None and int(n) < 1:
                raise ValueError(f"{entry!r}: a retention is at least 1 {match['unit']}")
            entries[category] = None if n is None else int(n) * UNITS[match["unit"]]
        return cls(tuple(sorted(entries.items())))

    def __str__(self) -> str:
        """The policy as the setting's text (days as ``d``): parsed, it is
        this policy again."""
        return ",".join(f"{c}={'inf' if n is None else f'{n}d'}" for c, n in self.days)

    def of(self, category: str) -> int | None:
        """The days ``category``'s rows are kept (``None``: forever)."""
        named = dict(self.days)
        return named[category] if category in named else named.get(OTHERS)

    def horizon(self, category: str, today: date) -> date | None:
        """The first day of ``category`` that is kept (``None``: all are)."""
        days = self.of(category)
        return None if days is None else today - timedelta(days=days)

    def expired(self, category: str, day: date, today: date) -> bool:
        """Whether ``category``'s rows of ``day`` are past their retention."""
        horizon = self.horizon(category, today)
        return horizon is not None and day < horizon

    @property
    def keeps_everything(self) -> bool:
        return all(days is None for _, days in self.days)
