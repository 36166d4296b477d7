"""Users' code named in a setting: ``module:attribute``, as uvicorn and
gunicorn name an application (``mypkg.handlers:registry``).

The module is imported as the worker starts, with the current directory on
the import path (as ``python -m`` and uvicorn put it there), so a project
runs its own code with ``seqkeeper worker`` from its directory. A name that
cannot be loaded is a :class:`PluginError` naming the setting, the module
and what went wrong: the CLI prints it as one line.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any

from seqkeeper.processors.command import Registry
from seqkeeper.settings import VARS


class PluginError(ValueError):
    """A ``module:attribute`` setting that cannot be loaded."""


def load(spec: str, setting: str) -> Any:
    """The object ``spec`` (``module:attribute``, the attribute dotted)
    names; ``setting`` (e.g. ``SEQKEEPER_HANDLERS``) is named in errors."""
    module_name, colon, attribute = spec.strip().partition(":")
    if not colon or not module_name or not attribute:
        raise PluginError(
            f"{setting}={spec!r}: expected module:attribute, e.g. mypkg.handlers:registry"
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise PluginError(
                f"{setting}={spec!r}: no module named {e.name!r} (from {cwd})"
            ) from None
        raise PluginError(f"{setting}={spec!r}: importing {module_name!r} failed: {e}") from None
    except Exception as e:  # noqa: BLE001 - the user's module raised while imported: say so
        raise PluginError(
            f"{setting}={spec!r}: importing {module_name!r} raised {type(e).__name__}: {e}"
        ) from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise PluginError(
                f"{setting}={spec!r}: module {module_name!r} has no attribute {attribute!r}"
            ) from None
    return target


def load_registry(spec: str, setting: str = VARS["handlers"].env) -> Registry:
    """The command handlers' :class:`~seqkeeper.Registry` ``spec`` names."""
    registry = load(spec, setting)
    if not isinstance(registry, Registry):
        raise PluginError(
            f"{setting}={spec!r}: is a {type(registry).__name__}, not a seqkeeper.Registry"
        )
    if not registry.handlers:
        raise PluginError(f"{setting}={spec!r}: the registry has no handlers")
    return registry


def load_processor(spec: str, setting: str = VARS["processor"].env) -> Any:
    """The ordered processor ``spec`` names: a function of ``(state,
    message)``, sync or ``async def``."""
    fn = load(spec, setting)
    if not callable(fn):
        raise PluginError(f"{setting}={spec!r}: is a {type(fn).__name__}, not a function")
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise PluginError(f"{setting}={spec!r}: must take two arguments (state, message)") from None
    except ValueError:  # no signature to check (a builtin): called as it is
        pass
    return fn


def load_codec(spec: str, setting: str = VARS["codec"].env) -> Any:
    """The value codec ``spec`` names: an object (or class, instantiated
    without arguments) with ``decode(bytes)``; ``None`` for ``json``."""
    if spec.strip() in ("", "json"):
        return None
    codec = load(spec, setting)
    if isinstance(codec, type):
        try:
            codec = codec()
        except Exception as e:  # noqa: BLE001 - the user's constructor: say what it raised
            raise PluginError(
                f"{setting}={spec!r}: {codec.__name__}() raised {type(e).__name__}: {e}"
            ) from None
    if not callable(getattr(codec, "decode", None)):
        raise PluginError(f"{setting}={spec!r}: has no decode(bytes) method")
    return codec
