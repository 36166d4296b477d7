"""The Docker setup (``Dockerfile``, ``docker-compose.yml``, ``.dockerignore``)
holds together, checked without a Docker engine: nothing is built or started.

- ``docker-compose.yml`` validates against the Compose Specification's JSON
  Schema, vendored byte-exact in ``tests/vendor/compose-spec.json`` from
  https://github.com/compose-spec/compose-spec, ``schema/compose-spec.json`` at
  commit b2835e8acc1e42e7aecbc27a9bc4a1fc66ef21ba (to update it, replace the
  file with a newer upstream version and this line with its commit).
- Every ``COPY`` source of the Dockerfile exists and is not excluded from the
  build context by ``.dockerignore``; the ENTRYPOINT is a ``[project.scripts]``
  entry.
- Every seqkeeper command in the compose file names a real subcommand and real
  options (checked against ``python -m seqkeeper <sub> --help``), and parses.
- Build contexts hold a Dockerfile, ``depends_on`` names existing services,
  and every named volume is declared.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = Path(__file__).resolve().parent / "vendor" / "compose-spec.json"


def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict), "docker-compose.yml is not a mapping"
    return data


def services() -> dict[str, dict[str, Any]]:
    return compose().get("services") or {}


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def copy_sources(path: Path) -> list[str]:
    """The build-context sources of every COPY/ADD (not ``COPY --from``)."""
    sources: list[str] = []
    for word, args in dockerfile_instructions(path):
        if word not in ("COPY", "ADD"):
            continue
        parts = json.loads(args) if args.startswith("[") else shlex.split(args)
        flags = [p for p in parts if p.startswith("--")]
        if any(f.startswith("--from") for f in flags):
            continue
        operands = [p for p in parts if not p.startswith("--")]
        assert len(operands) >= 2, f"{word} {args}: needs a source and a destination"
        sources += operands[:-1]
    return sources


def seqkeeper_services() -> dict[str, dict[str, Any]]:
    """The services that run the image built from our Dockerfile."""
    return {name: s for name, s in services().items() if "build" in s}


def command_args(service: dict[str, Any]) -> list[str]:
    command = service.get("command")
    if command is None:  # the image's CMD
        for word, args in dockerfile_instructions(ROOT / "Dockerfile"):
            if word == "CMD":
                command = json.loads(args) if args.startswith("[") else shlex.split(args)
    return shlex.split(command) if isinstance(command, str) else list(command or [])


@cache
def subcommand_help(sub: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "seqkeeper", sub, "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def named_volume(entry: str | dict[str, Any]) -> tuple[str | None, str]:
    """(named volume or None for a bind mount/anonymous volume, target)."""
    if isinstance(entry, dict):
        source = entry.get("source") if entry.get("type") == "volume" else None
        return source, entry["target"]
    parts = entry.split(":")
    if len(parts) == 1:  # anonymous volume
        return None, parts[0]
    source, target = parts[0], parts[1]
    if source.startswith(("/", ".", "~", "$")) or "/" in source:
        return None, target  # a bind mount
    return source, target


# The compose file against the Compose Specification.


def test_the_vendored_schema_is_the_compose_spec() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["title"] == "Compose Specification"
    validator = jsonschema.validators.validator_for(schema)
    assert validator is jsonschema.Draft201909Validator, schema["$schema"]
    validator.check_schema(schema)


def test_the_compose_file_matches_the_compose_spec() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(compose()), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors
    )


def test_the_services_are_kafka_both_workers_and_the_spark_side() -> None:
    s = services()
    assert s["kafka"]["image"].startswith("apache/kafka:4.1")
    assert "healthcheck" in s["kafka"]
    topologies = {
        name: command_args(s[name])[command_args(s[name]).index("--topology") + 1]
        for name in ("worker", "commands")
    }
    assert topologies == {"worker": "ordered", "commands": "commands"}
    assert command_args(s["compact"])[0] == "compact"
    assert "spark" in s["compact"].get("profiles", []), "compact must be a one-shot profile"
    assert "warehouse" in {named_volume(v)[0] for v in s["compact"].get("volumes", [])}
    # the store kept current: compact --follow, its metrics published on loopback
    follow = command_args(s["store"])
    assert follow[0] == "compact" and "--follow" in follow and "--metrics-port" in follow
    assert "warehouse" in {named_volume(v)[0] for v in s["store"].get("volumes", [])}


def test_containers_reach_kafka_on_an_advertised_listener() -> None:
    """The address the seqkeeper services use (``--broker`` or
    ``KAFKA_BOOTSTRAP_SERVERS``) is one the broker advertises by service name."""
    env = services()["kafka"]["environment"]
    advertised = {
        listener.split("://", 1)[1] for listener in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    }
    built = seqkeeper_services()
    assert built, "no service runs the seqkeeper image"
    for name, service in built.items():
        args = command_args(service)
        if "--broker" in args:
            address = args[args.index("--broker") + 1]
        else:
            address = (service.get("environment") or {}).get("KAFKA_BOOTSTRAP_SERVERS")
        assert address in advertised, f"{name}: broker {address!r} not in {sorted(advertised)}"
        assert address.split(":")[0] == "kafka", f"{name}: {address!r} is not the kafka service"


def test_published_ports_bind_to_the_host_loopback() -> None:
    """Kafka's listener is PLAINTEXT and state queries expose message data:
    what the compose file publishes is reachable from this host only
    (``HOST_IP:HOST:CONTAINER``; Compose binds a port without a host IP on
    every interface)."""
    published = {
        name: [str(p) for p in service.get("ports", [])] for name, service in services().items()
    }
    assert any(published.values()), published
    for name, ports in published.items():
        for port in ports:
            assert port.startswith("127.0.0.1:") and port.count(":") == 2, (name, port)


# The Dockerfile.


def test_every_copy_source_exists_in_the_build_context() -> None:
    sources = copy_sources(ROOT / "Dockerfile")
    assert sources, "the Dockerfile copies nothing"
    missing = [src for src in sources if not (ROOT / src).exists()]
    assert not missing, f"COPY sources missing from the repository: {missing}"


def test_the_dockerignore_keeps_local_state_out_but_not_the_copied_sources() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    plain = {p.strip("/") for p in patterns}
    for heavy in (".git", ".venv", "bench/results", "warehouse", "seqkeeper-data"):
        assert heavy in plain, f".dockerignore does not exclude {heavy}"

    def ignored(path: str) -> bool:
        hit = False
        for pattern in patterns:  # the last match wins; "!" re-includes
            negate = pattern.startswith("!")
            pattern = pattern.lstrip("!").strip("/")
            candidates = [pattern, pattern.removeprefix("**/")]
            if any(fnmatch.fnmatch(path, c) for c in candidates):
                hit = not negate
        return hit

    sources = copy_sources(ROOT / "Dockerfile")
    assert sources, "the Dockerfile copies nothing"
    for src in sources:
        parts = PurePosixPath(src).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        assert not any(map(ignored, prefixes)), f".dockerignore excludes COPY source {src}"


def test_the_entrypoint_is_the_seqkeeper_script() -> None:
    entrypoints = [
        args for word, args in dockerfile_instructions(ROOT / "Dockerfile") if word == "ENTRYPOINT"
    ]
    assert entrypoints, "the Dockerfile has no ENTRYPOINT"
    entrypoint = json.loads(entrypoints[-1])  # the exec form: no shell in between
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint == ["seqkeeper"]
    assert entrypoint[0] in scripts


def test_the_base_image_has_java_17() -> None:
    """``python:3.11-slim`` follows Debian trixie, which has no Java 17: the
    base must name a release whose apt has the JRE the Dockerfile installs."""
    instructions = dockerfile_instructions(ROOT / "Dockerfile")
    base = next(args for word, args in instructions if word == "FROM").split()[0]
    installs = " ".join(args for word, args in instructions if word == "RUN")
    if "openjdk-17-jre" in installs:
        assert base.endswith(("-bookworm", "-bullseye")), base
    else:
        assert "openjdk-21-jre" in installs, "the image installs no Java 17+"


# The seqkeeper commands in the compose file.


@pytest.mark.parametrize("name", sorted(seqkeeper_services()))
def test_the_command_names_a_real_subcommand_and_real_options(name: str) -> None:
    args = command_args(seqkeeper_services()[name])
    assert args, f"{name}: no command"
    sub = args[0]
    result = subcommand_help(sub)
    assert result.returncode == 0, f"{name}: `seqkeeper {sub}` is not a subcommand:\n{result}"
    text = result.stdout
    assert f"seqkeeper {sub}" in text, text
    for flag in (a.split("=", 1)[0] for a in args[1:] if a.startswith("--")):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), (
            f"{name}: `seqkeeper {sub}` has no option {flag}"
        )


@pytest.mark.parametrize("name", sorted(seqkeeper_services()))
def test_the_command_parses(name: str) -> None:
    """The CLI itself accepts the whole command line: value types, required
    options (``compact --broker``), no stray arguments."""
    import typer

    from seqkeeper.cli import app

    args = command_args(seqkeeper_services()[name])
    group = typer.main.get_command(app)  # a click group (typer vendors its own click)
    parent = group.make_context("seqkeeper", list(args))
    sub = group.get_command(parent, args[0])
    assert sub is not None, f"{name}: no subcommand {args[0]!r}"
    try:
        sub.make_context(args[0], list(args[1:]), parent=parent)
    except Exception as e:  # click's UsageError (BadParameter, MissingParameter, ...)
        message = e.format_message() if hasattr(e, "format_message") else repr(e)
        pytest.fail(f"{name}: seqkeeper {shlex.join(args)}: {message}")


@pytest.mark.parametrize("name", sorted(seqkeeper_services()))
def test_data_and_warehouse_paths_are_on_volumes(name: str) -> None:
    """What a service keeps (``--data-dir``, ``--warehouse``) outlives its
    container: it lies on a mounted volume."""
    service = seqkeeper_services()[name]
    args = command_args(service)
    targets = [PurePosixPath(named_volume(v)[1]) for v in service.get("volumes", [])]
    for flag in ("--data-dir", "--warehouse"):
        if flag in args:
            path = PurePosixPath(args[args.index(flag) + 1])
            assert any(path == t or t in path.parents for t in targets), (
                f"{name}: {flag} {path} is on no volume ({[str(t) for t in targets]})"
            )


# The compose file's references.


def test_build_contexts_hold_a_dockerfile() -> None:
    built = seqkeeper_services()
    assert built, "no service builds the seqkeeper image"
    for name, service in built.items():
        build = service["build"]
        if isinstance(build, str):
            build = {"context": build}
        context = ROOT / build.get("context", ".")
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), f"{name}: no {dockerfile.relative_to(ROOT)}"


def test_depends_on_names_existing_services() -> None:
    s = services()
    checked = set()
    for name, service in s.items():
        depends = service.get("depends_on") or {}
        conditions = (
            {d: {} for d in depends} if isinstance(depends, list) else dict(depends.items())
        )
        for target, spec in conditions.items():
            assert target in s, f"{name} depends on {target!r}, which is no service"
            if (spec or {}).get("condition") == "service_healthy":
                assert "healthcheck" in s[target], f"{name} waits for {target}'s health: none"
            checked.add(name)
    # every service of ours starts after something (Kafka): a loop over no
    # dependency at all would check nothing
    assert set(seqkeeper_services()) <= checked, sorted(set(seqkeeper_services()) - checked)


def test_every_named_volume_is_declared_and_used() -> None:
    declared = set(compose().get("volumes") or {})
    used: dict[str, str] = {}
    for name, service in services().items():
        for entry in service.get("volumes", []):
            volume, _ = named_volume(entry)
            if volume is not None:
                used[volume] = name
    undeclared = {v: s for v, s in used.items() if v not in declared}
    assert not undeclared, f"named volumes used but not declared: {undeclared}"
    assert declared <= set(used), f"volumes declared but unused: {declared - set(used)}"
