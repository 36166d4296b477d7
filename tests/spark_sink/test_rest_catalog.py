"""``SEQKEEPER_ICEBERG_CATALOG``: the tables in a REST catalog, as a user
with one sees them (tests/spark_sink/rest_catalog.py serves the protocol):
compact commits there and nothing in the warehouse's own catalog, two
concurrent runs commit once (the catalog's 409), the readers read through
it, and a catalog that does not answer is one line before anything runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import orjson
import pytest

from seqkeeper.broker import free_port
from seqkeeper.spark_sink import tables
from tests.spark_sink.cli_env import changelog_and_ordered, compact_env
from tests.spark_sink.rest_catalog import rest_catalog
from tests.spark_sink.test_audit import send
from tests.spark_sink.test_iceberg import compact_cli
from tests.spark_sink.test_snapshots import put


@pytest.mark.integration
def test_compact_commits_to_a_rest_catalog_once_and_reads_through_it(
    broker, make_settings, tmp_path, monkeypatch
) -> None:
    settings = make_settings()
    changelog, ordered = changelog_and_ordered(broker.bootstrap, settings)
    asyncio.run(put(broker.bootstrap, changelog, [(b"k%d" % (i % 3), b"%d" % i) for i in range(9)]))
    docs = [orjson.dumps({"messageId": f"m{i}", "type": "T", "data": {"i": i}}) for i in range(12)]
    asyncio.run(send(broker.bootstrap, [(ordered, b"s-1", d, None) for d in docs]))
    warehouse = tmp_path / "w"
    with rest_catalog(tmp_path / "rest", warehouse) as (url, served):
        env = {**compact_env(settings), "SEQKEEPER_ICEBERG_CATALOG": url}
        runs = [compact_cli(broker, settings.runtime.app_id, warehouse, env) for _ in range(2)]
        outputs = [p.communicate(timeout=300) for p in runs]
        results = [(p.returncode, out, err) for p, (out, err) in zip(runs, outputs, strict=True)]
        assert sorted(code for code, _, _ in results) == [0, 1], results
        (lost,) = [err for code, _, err in results if code == 1]
        assert (
            [x for x in lost.splitlines() if x.startswith("error:")]
            == [x for x in lost.splitlines() if "another run committed this table" in x]
            != []
        ), lost
        # commits went through the REST catalog, none to the embedded one
        assert any(r.startswith("POST /v1/namespaces/seqkeeper/tables/audit") for r in served)
        assert not (warehouse / "catalog.db").exists()

        monkeypatch.setenv("SEQKEEPER_ICEBERG_CATALOG", url)
        audit = tables.load(warehouse, "audit")
        assert audit is not None
        rows = audit.scan(selected_fields=("id", "stream_name", "position")).to_arrow().to_pylist()
        assert sorted(r["id"] for r in rows) == sorted(f"m{i}" for i in range(12))
        (stream,) = {r["stream_name"] for r in rows}
        version = subprocess.run(
            [sys.executable, "-m", "seqkeeper", "store", "version", stream]
            + ["--warehouse", str(warehouse)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert version.returncode == 0, version.stderr
        assert version.stdout.strip() == str(max(r["position"] for r in rows))


def test_a_rest_catalog_that_does_not_answer_is_one_line(tmp_path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    out = subprocess.run(
        [sys.executable, "-m", "seqkeeper", "store", "version", "x-1"]
        + ["--warehouse", str(tmp_path / "w")],
        env={**os.environ, "SEQKEEPER_ICEBERG_CATALOG": url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"the Iceberg REST catalog at {url} (SEQKEEPER_ICEBERG_CATALOG)" in out.stderr
