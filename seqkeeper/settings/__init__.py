"""Settings: every variable declared once, grouped by concern.

A variable is declared by :func:`~seqkeeper.settings.variables.var` inside
its group: its environment variable, default, unit and help. The CLI's
flags, ``seqkeeper settings`` and the README's configuration table are all
rendered from these declarations. A value comes, in order of precedence,
from a CLI flag, from the environment, or from the default.

A value is parsed and checked when the settings are built (by the
variable's parser and check, and a group's ``__post_init__`` for a
combination of its variables), so a bad one fails at load, in one line
naming the variable; the code that uses a setting reads a typed attribute.
Only a file a setting names (a password, a key, a token, a TLS file) is read
later, where it is used: a mounted secret may be written after the settings
are read.

The package:

- :mod:`~seqkeeper.settings.variables`: the machinery (:class:`Var`,
  :func:`var`, :class:`Group`) and the parsers and checks;
- a module per group, named after it: :mod:`~seqkeeper.settings.broker_settings`,
  :mod:`~seqkeeper.settings.security_settings`, :mod:`~seqkeeper.settings.runtime_settings`,
  :mod:`~seqkeeper.settings.ordered_settings`, :mod:`~seqkeeper.settings.command_settings`,
  :mod:`~seqkeeper.settings.spark_settings`;
- :mod:`~seqkeeper.settings.catalog`: :data:`GROUPS`, :data:`VARS` and
  :class:`Settings`;
- :mod:`~seqkeeper.settings.markdown`: the README's table
  (``python -m seqkeeper.settings``).

It sits at the bottom of the dependency graph: it imports the standard
library and the pure cores in :mod:`seqkeeper.processors` only, so every
layer (state, topologies, the Spark side, the shell) may read it.
"""

from __future__ import annotations

from seqkeeper.settings.broker_settings import BrokerSettings
from seqkeeper.settings.catalog import GROUPS, VARS, Settings, effective
from seqkeeper.settings.command_settings import EXAMPLE_HANDLERS, CommandSettings
from seqkeeper.settings.markdown import markdown_table
from seqkeeper.settings.ordered_settings import OrderedSettings
from seqkeeper.settings.runtime_settings import TOPOLOGIES, Guarantee, RuntimeSettings
from seqkeeper.settings.security_settings import (
    MECHANISMS,
    PROTOCOLS,
    SecuritySettings,
    security_env_names,
    security_problem,
)
from seqkeeper.settings.spark_settings import SparkSettings
from seqkeeper.settings.variables import (
    MIN_TOKEN_CHARS,
    Group,
    Secret,
    SettingError,
    Var,
    bearer_token,
    field_path,
    parse_seconds,
    var,
)

__all__ = [
    "EXAMPLE_HANDLERS",
    "GROUPS",
    "MECHANISMS",
    "MIN_TOKEN_CHARS",
    "PROTOCOLS",
    "TOPOLOGIES",
    "VARS",
    "BrokerSettings",
    "CommandSettings",
    "Group",
    "Guarantee",
    "OrderedSettings",
    "RuntimeSettings",
    "Secret",
    "SecuritySettings",
    "SettingError",
    "Settings",
    "SparkSettings",
    "Var",
    "bearer_token",
    "effective",
    "field_path",
    "markdown_table",
    "parse_seconds",
    "security_env_names",
    "security_problem",
    "var",
]
