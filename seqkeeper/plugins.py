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
from seqkeeper.processors.envelope import Codec
from seqkeeper.processors.resequencer import GapSkipped
from seqkeeper.settings import VARS
from seqkeeper.settings.ordered_settings import OrderedSettings


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


def codec_of(ordered: OrderedSettings) -> Codec | None:
    """The value codec the ordered settings name (``SEQKEEPER_CODEC``):
    ``None`` for JSON, the built-in Avro codec for ``avro``, else the
    user's (:func:`load_codec`). Checked here, before any broker: it must
    write a gap marker it can read back (markers go on the ordered topic
    beside the input's records)."""
    spec = ordered.codec.strip()
    if spec in ("", "json"):
        return None
    setting = VARS["codec"].env
    codec = avro_codec(ordered) if spec == "avro" else load_codec(spec, setting)
    marker = GapSkipped("key", 1, 2).document
    try:
        back = codec.decode(codec.encode(marker))
        fits = all(back.get(name) == v for name, v in marker.items())
    except Exception as e:  # noqa: BLE001 - the user's codec: say what it raised, in one line
        raise PluginError(
            f"{setting}={spec!r}: cannot write a gap marker and read it back "
            f"({type(e).__name__}: {e}); docs/codecs.md says what a schema needs"
        ) from None
    if not fits:
        raise PluginError(
            f"{setting}={spec!r}: a gap marker written and read back is {back!r}, "
            f"not {marker!r}; docs/codecs.md says what a schema needs"
        )
    return codec


def avro_codec(ordered: OrderedSettings) -> Codec:
    """The built-in Avro codec of ``SEQKEEPER_AVRO_SCHEMA`` (and ``_ID``)."""
    setting = VARS["avro_schema"].env
    path = ordered.avro_schema.strip()
    if not path:
        raise PluginError(f"{VARS['codec'].env}='avro' needs {setting}: the .avsc schema file")
    try:
        import fastavro  # noqa: F401 - the optional extra: say how to install it
    except ImportError:
        raise PluginError(
            f"{VARS['codec'].env}='avro' needs fastavro: pip install 'seqkeeper[avro]'"
        ) from None
    from seqkeeper.state.value_codecs import AvroCodec

    try:
        return AvroCodec.from_file(path, ordered.avro_schema_id)
    except OSError as e:
        raise PluginError(f"{setting}={path!r}: cannot read it: {e.strerror or e}") from None
    except Exception as e:  # noqa: BLE001 - not JSON, or not an Avro schema: say which
        raise PluginError(
            f"{setting}={path!r}: not an Avro schema: {type(e).__name__}: {e}"
        ) from None


def load_codec(spec: str, setting: str = VARS["codec"].env) -> Any:
    """The value codec ``spec`` names: an object (or class, instantiated
    without arguments) with ``decode(bytes)`` and ``encode(document)``;
    ``None`` for ``json``."""
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
    if not callable(getattr(codec, "encode", None)):
        # (no JSON fallback: a topic would get records of two formats)
        raise PluginError(
            f"{setting}={spec!r}: has no encode(document) -> bytes method; seqkeeper writes "
            f"its gap markers and processor outputs with it (docs/codecs.md)"
        )
    return codec
