"""The variable machinery: a setting's declaration (:class:`Var`, made by
:func:`var` inside a group) and the parsers that turn a variable's text into
its typed value, or a ``ValueError`` saying what was expected.

Every check of a value lives in a parser (or a :class:`Var`'s ``check``),
so a bad value fails when the settings are built, in one line naming the
variable, never later where the value is used.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

T = TypeVar("T")


class SettingError(ValueError):
    """A variable's value cannot be used: the message names the variable."""


@dataclass(frozen=True)
class Var:
    """One variable's declaration."""

    name: str  #: field name, unique over all groups (``with_overrides`` takes it)
    group: str  #: the group's name (``broker``, ``ordered``, …)
    env: str  #: the environment variable
    default: str  #: the default, as it would be written in the environment
    unit: str  #: ``s``, ``MiB``, … or empty
    help: str  #: one or two sentences for the README and ``--help``
    parse: Callable[[str], Any]  #: text → value; ``ValueError`` with a reason
    secret: bool = False  #: never printed
    #: a constraint on the value beyond its type (``ValueError`` with a
    #: reason), checked after :attr:`parse`, and by :class:`Group` on a value
    #: given already typed (``Settings.of(switch_interval=0.0)``), which
    #: skips the parser
    check: Callable[[Any], object] | None = None

    def read(self, environ: Mapping[str, str]) -> Any:
        text = environ.get(self.env, self.default)
        try:
            return self.value(text)
        except ValueError as e:
            raise SettingError(f"{self.shown(text)}: {e}") from None

    def value(self, text: str) -> Any:
        """``text`` parsed and checked; ``ValueError`` with a reason."""
        value = self.parse(text)
        if self.check is not None:
            self.check(value)
        return value

    def shown(self, text: str, label: str = "") -> str:
        """``label=text`` for an error message (``label``: the variable by
        default); a secret's value is never shown."""
        return f"{label or self.env}={'***' if self.secret else repr(text)}"

    def with_unit(self, text: str) -> str:
        """``text`` (a value of this variable) with its unit, if it has one
        and ``text`` is neither empty nor ``auto`` (a value resolved later)."""
        bare = text.strip("`")  # (as the README's table shows it)
        return f"{text} {self.unit}" if self.unit and bare not in ("", "auto") else text

    def flag_help(self) -> str:
        """The help of this variable's CLI flag (rich markup escaped)."""
        default = self.with_unit(self.default) or "empty"
        return f"{self.help} \\[env {self.env}; default {default}]"


def var(
    env: str,
    default: str,
    help: str,
    parse: Callable[[str], T] = str,  # type: ignore[assignment]
    unit: str = "",
    secret: bool = False,
    check: Callable[[T], object] | None = None,
) -> T:
    """A settings field read from ``env`` (``default`` when unset). Its name
    and group are filled in by ``catalog._declared`` once the class exists."""
    spec = Var("", "", env, default, unit, help, parse, secret, check)
    holder = [spec]
    return field(  # type: ignore[no-any-return]
        default_factory=lambda: holder[0].read(os.environ), metadata={"var": holder}
    )


@dataclass(frozen=True)
class Group:
    """The base of a settings group (a frozen dataclass of :func:`var`
    fields): every value is checked when the group is built, a value given
    typed (to the constructor, ``dataclasses.replace``,
    ``Settings.with_overrides``) as a value read from text is, so no use of
    a setting needs to check it again."""

    def __post_init__(self) -> None:
        for f in fields(self):
            spec: Var = f.metadata["var"][0]
            if spec.check is None:
                continue
            value = getattr(self, f.name)
            try:
                spec.check(value)
            except ValueError as e:
                raise SettingError(f"{spec.shown(str(value))}: {e}") from None


def env_of(group: type, name: str) -> str:
    """The environment variable of field ``name`` of the settings class
    ``group``, for a message that names it (its declaration knows it; the
    registry of every variable is built above the groups)."""
    for f in fields(group):
        if f.name == name:
            env: str = f.metadata["var"][0].env
            return env
    raise KeyError(f"{group.__name__} declares no setting {name}")


# -- parsers: text to value, or a ValueError saying what was expected --------


def integer(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("expected a whole number") from None


def non_negative_integer(text: str) -> int:
    value = integer(text)
    if value < 0:
        raise ValueError("expected a whole number of at least 0")
    return value


def field_path(text: str) -> tuple[str, ...]:
    """A field's dotted path (``a.b``) as its parts; empty: ``()``."""
    parts = tuple(text.split(".")) if text else ()
    if any(not part for part in parts):
        raise ValueError("expected a dotted path of field names, such as meta.key")
    return parts


def dotted_path(text: str) -> str:
    """A setting holding a :func:`field_path`, checked when read, so that a
    bad one is a setting error, not a failure when the worker builds its
    shape."""
    field_path(text)
    return text


def schema_id(text: str) -> int | None:
    """A schema registry id (0 to 2**31 - 1, a Java int), or ``None`` when empty."""
    if not text.strip():
        return None
    value = integer(text)
    if not 0 <= value <= 2**31 - 1:
        raise ValueError(f"expected a schema id from 0 to {2**31 - 1}, got {value}")
    return value


def positive_integer(text: str) -> int:
    value = integer(text)
    if value < 1:
        raise ValueError("expected a whole number of at least 1")
    return value


def number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number") from None
    if math.isnan(value):
        raise ValueError("expected a number")
    return value


def seconds(text: str) -> float:
    """A non-negative number of seconds; ``inf``: no limit."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:  # also NaN
        raise ValueError("expected a non-negative number of seconds")
    return value


def parse_seconds(name: str, text: str) -> float:
    """``text`` (the value of variable ``name``) as :func:`seconds`; the
    error names the variable."""
    try:
        return seconds(text)
    except ValueError:
        raise ValueError(f"{name} must be a non-negative number of seconds, got {text!r}") from None


def gc_thresholds(text: str) -> tuple[int, int, int]:
    """Three non-negative whole numbers, comma-separated (the garbage
    collector's thresholds, ``gc.set_threshold``)."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) < 0:
        raise ValueError("expected three non-negative integers such as 5000,20,50")
    first, second, third = values
    return first, second, third


def choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError("expected one of " + ", ".join(allowed))
        return text

    parse.__name__ = "choice"
    return parse


#: The shortest bearer token accepted: a guessable one protects nothing.
MIN_TOKEN_CHARS = 16


def bearer_token(text: str) -> str:
    """A bearer token: printable ASCII without spaces (as an ``Authorization``
    header carries it), at least :data:`MIN_TOKEN_CHARS` long; empty: none.
    The error never quotes the text (it is a secret)."""
    if not text:
        return text
    if not all(33 <= ord(c) <= 126 for c in text):
        raise ValueError(
            "expected printable ASCII without spaces (it travels in an Authorization header)"
        )
    if len(text) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"expected at least {MIN_TOKEN_CHARS} characters, e.g. the output of "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return text


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list; blanks dropped."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def boolean(text: str) -> bool:
    """true/false, yes/no, on/off or 1/0 (any case)."""
    value = text.strip().lower()
    if value in ("true", "yes", "on", "1"):
        return True
    if value in ("false", "no", "off", "0"):
        return False
    raise ValueError("expected true or false")


def upper_choice(*allowed: str) -> Callable[[str], str]:
    """:func:`choice`, any case (``scram-sha-512`` is ``SCRAM-SHA-512``)."""
    exact = choice(*allowed)

    def parse(text: str) -> str:
        return exact(text.strip().upper())

    parse.__name__ = "choice"
    return parse


# -- checks: a constraint on a typed value, or a ValueError saying it -----------


def positive_seconds(what: str) -> Callable[[float], None]:
    """The check of a number of seconds that must be above 0 (``what``
    names the setting in the message)."""

    def check(value: float) -> None:
        if not value > 0:  # also NaN
            raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")

    return check


def non_negative_seconds(what: str) -> Callable[[float], None]:
    """The check of a number of seconds that must be 0 or more (``what``
    names the setting in the message)."""

    def check(value: float) -> None:
        if not value >= 0:  # also NaN
            raise ValueError(f"{what} must be a non-negative number of seconds, got {value!r}")

    return check


class Secret:
    """A secret text (a password): its ``repr`` and ``str`` never show it;
    :meth:`reveal` does, for the one call that needs it."""

    __slots__ = ("_value",)

    def __init__(self, value: str = "") -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))
