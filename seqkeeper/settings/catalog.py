"""Every group and every variable: :data:`GROUPS`, :data:`VARS`, the
:class:`Settings` that hold a group each, and the environment's values as
``seqkeeper settings`` prints them (:func:`effective`)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from seqkeeper.settings.broker_settings import BrokerSettings
from seqkeeper.settings.command_settings import CommandSettings
from seqkeeper.settings.ordered_settings import OrderedSettings
from seqkeeper.settings.runtime_settings import RuntimeSettings
from seqkeeper.settings.security_settings import SecuritySettings
from seqkeeper.settings.spark_settings import SparkSettings
from seqkeeper.settings.variables import Secret, SettingError, Var

GROUPS: dict[str, type] = {
    "broker": BrokerSettings,
    "security": SecuritySettings,
    "runtime": RuntimeSettings,
    "ordered": OrderedSettings,
    "commands": CommandSettings,
    "spark": SparkSettings,
}


@dataclass(frozen=True)
class Settings:
    """All settings, a group per concern. Build one with ``Settings()``
    (environment and defaults) or ``Settings.of(name=value, …)``."""

    broker: BrokerSettings = field(default_factory=BrokerSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    ordered: OrderedSettings = field(default_factory=OrderedSettings)
    commands: CommandSettings = field(default_factory=CommandSettings)
    spark: SparkSettings = field(default_factory=SparkSettings)

    @classmethod
    def of(cls, **overrides: Any) -> Settings:
        """The environment's settings with the named variables replaced."""
        return cls().with_overrides(**overrides)

    @property
    def group_id(self) -> str:
        """The Faust app id (consumer group, changelog prefix) of the topology."""
        app_id = self.runtime.app_id
        return f"{app_id}-commands" if self.runtime.topology == "commands" else app_id

    def repartition_topic(self) -> str | None:
        """The internal topic the ordered topology's input goes through when
        its key is a field of the value (``None``: the Kafka key is the key)."""
        if self.runtime.topology == "commands" or not self.ordered.key_field:
            return None
        return f"{self.group_id}-{self.ordered.input_topic}-repartition"

    def topics(self) -> list[str]:
        """Every topic the worker reads or writes (created when missing)."""
        if self.runtime.topology == "commands":
            return self.commands.topics()
        internal = self.repartition_topic()
        return [*self.ordered.topics(), *([internal] if internal else [])]

    def to_env(self) -> dict[str, str]:
        """These settings as the environment variables that set them."""
        env = {}
        for v in VARS.values():
            value = getattr(getattr(self, v.group), v.name)
            if isinstance(value, Secret):
                env[v.env] = value.reveal()
            elif value is None:  # (an optional number not set)
                env[v.env] = ""
            elif isinstance(value, bool):
                env[v.env] = "true" if value else "false"
            else:
                env[v.env] = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
        return env

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the named variables (field names, see :data:`VARS`)
        replaced; ``None`` values are ignored (CLI flags not given)."""
        unknown = set(overrides) - set(VARS)
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
        changed: dict[str, dict[str, Any]] = {}
        for name, value in overrides.items():
            if value is None:
                continue
            v = VARS[name]
            if isinstance(value, str) and (v.parse is not str or v.check is not None):
                try:  # a flag's text is checked as the variable's would be
                    value = v.value(value)
                except ValueError as e:
                    raise SettingError(f"{v.shown(value, name.replace('_', '-'))}: {e}") from None
            changed.setdefault(v.group, {})[name] = value
        return replace(
            self,
            **{group: replace(getattr(self, group), **kw) for group, kw in changed.items()},
        )


def _declared() -> dict[str, Var]:
    """Every variable by field name, with its name and group filled in."""
    out: dict[str, Var] = {}
    for group, cls in GROUPS.items():
        for f in fields(cls):
            holder = f.metadata["var"]
            holder[0] = replace(holder[0], name=f.name, group=group)
            if f.name in out:
                raise TypeError(f"setting {f.name} is declared twice")
            out[f.name] = holder[0]
    return out


#: Every variable, by field name, in declaration order (grouped).
VARS: dict[str, Var] = _declared()


def effective(environ: Mapping[str, str] | None = None) -> Iterator[tuple[Var, str, str]]:
    """(variable, value as text, source) for each variable: the source is
    ``env`` or ``default``; secrets show as ``***`` when set."""
    environ = os.environ if environ is None else environ
    for v in VARS.values():
        source = "env" if v.env in environ else "default"
        text = environ.get(v.env, v.default)
        if v.secret and text:
            text = "***"
        yield v, text, source
