"""Every Kafka client seqkeeper creates gets the security settings: each
call that constructs an aiokafka client (producer, consumer, admin client,
``AIOKafkaClient``) passes ``**kafka_options(...)``
(:mod:`seqkeeper.security`), so none can reach only a PLAINTEXT listener.
Faust's own clients get them through ``broker_credentials``
(``seqkeeper.runtime.wiring.make_app``)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where clients are created: the package (with its symlinked layers), the
#: Spark side and the bench. (``examples/`` are the users' own programs.)
SOURCES = [ROOT / "seqkeeper", ROOT / "spark_sink", ROOT / "bench"]
CLIENTS = {"AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient", "AIOKafkaClient"}


def called_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def constructions(path: Path) -> list[tuple[int, bool]]:
    """(line, has ``**kafka_options(...)``) of each aiokafka client made in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and called_name(node.func) in CLIENTS:
            secured = any(
                kw.arg is None
                and isinstance(kw.value, ast.Call)
                and called_name(kw.value.func) == "kafka_options"
                for kw in node.keywords
            )
            found.append((node.lineno, secured))
    return found


def sources() -> list[Path]:
    found = set()
    for top in SOURCES:
        for folder, _, files in os.walk(top, followlinks=True):
            found |= {(Path(folder) / f).resolve() for f in files if f.endswith(".py")}
    return sorted(found)


def test_every_client_gets_the_security_options() -> None:
    made = {path: constructions(path) for path in sources()}
    assert sum(len(v) for v in made.values()) >= 20  # the check sees them
    missing = [
        f"{path.relative_to(ROOT)}:{line}"
        for path, calls in made.items()
        for line, secured in calls
        if not secured
    ]
    assert not missing, f"aiokafka clients made without **kafka_options(...): {missing}"


def test_the_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from aiokafka import AIOKafkaProducer\n"
        "p = AIOKafkaProducer(bootstrap_servers='x')\n"
        "q = AIOKafkaProducer(bootstrap_servers='x', **kafka_options())\n"
        "r = aiokafka.AIOKafkaConsumer(bootstrap_servers='x', **other())\n"
    )
    assert constructions(bad) == [(2, False), (3, True), (4, False)]
