"""``@value``: the cores' value classes, immutable by contract.

For the type checker a ``@value`` class is a frozen dataclass (assigning a
field is a mypy error: ``dataclass_transform(frozen_default=True)``). At run
time it is a slotted dataclass without frozen's per-field guard: a frozen
dataclass sets every field through ``object.__setattr__`` when it is built,
and the hot path builds several per message. Equality and hashing are by
value, as for a frozen dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from typing_extensions import dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, eq_default=True, field_specifiers=(field,))
def value(cls: type[T]) -> type[T]:
    built: Any = dataclass(slots=True, unsafe_hash=True)(cls)
    return built  # type: ignore[no-any-return]
