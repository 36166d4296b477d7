"""Builds the class-data-sharing archives the tests' JVMs start from
(``make test`` runs it once, before the test processes start): Spark's,
and with ``--kafka HOME`` the Apache Kafka distribution's (its brokers and
its command-line tools, one class path).

Every Spark JVM the suite starts (the in-process session, each ``seqkeeper
compact`` subprocess) loads the same few thousand classes from PySpark's
jars; mapped from an archive they need not be parsed and verified again,
which takes about half the CPU of a JVM's start off (bench/NOTES.md, "CI
time"). The archive holds what one representative run loads: a session, a
shuffle, a Python UDF, Parquet written and read back.

Kafka's archive holds what a broker loads from its start to a clean stop;
the tools (``kafka-acls.sh``, ``kafka-topics.sh``) share most of it.

An archive belongs to its JDK and its jars: it is rebuilt when the
virtualenv is (make's dependency on its stamp), and a JVM given one that
does not match them runs without it (``-Xshare:auto``, the default).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

#: Where ``make`` builds the archive; tests/conftest.py uses it when present.
SPARK_ARCHIVE = Path(sys.prefix) / "jvm" / "spark.jsa"

#: The JVM options of the tests' JVMs (tests/conftest.py): the archive is
#: made with them, as a JVM maps it only with compatible ones.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: What the archive's JVMs are given besides :data:`JVM_OPTIONS`. An
#: archive that does not match the JVM is a warning (and a start without
#: it), which the JVM's log prints on stdout, where Spark's driver output
#: goes and some tests read ``seqkeeper compact``'s: its warnings go to
#: stderr instead.
ARCHIVE_OPTIONS = f"-XX:SharedArchiveFile={SPARK_ARCHIVE} -Xlog:disable -Xlog:all=warning:stderr"


def kafka_archive(home: Path) -> Path:
    """Where the archive of the distribution at ``home`` is built."""
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:16]
    return SPARK_ARCHIVE.with_name(f"kafka-{digest}.jsa")


def kafka_options(home: Path | None) -> str:
    """``KAFKA_JVM_PERFORMANCE_OPTS`` for the tests' Kafka JVMs: with the
    distribution's archive when it was built."""
    if home is None or not kafka_archive(home).exists():
        return JVM_OPTIONS
    return (
        f"{JVM_OPTIONS} -XX:SharedArchiveFile={kafka_archive(home)} "
        "-Xlog:disable -Xlog:all=warning:stderr"
    )


_TRAINING = """
import sys, tempfile
from pyspark.sql import SparkSession, functions as F
spark = (SparkSession.builder.master("local[2]").appName("jvm-archive")
         .config("spark.ui.enabled", "false")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "4").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
df = spark.range(2000).withColumn("k", F.col("id") % 7)
udf = F.udf(lambda v: str(v * 2))
out = tempfile.mkdtemp()
(df.withColumn("s", udf("id")).groupBy("k").agg(F.count("*").alias("n"), F.max("s").alias("s"))
   .write.mode("overwrite").parquet(out))
assert spark.read.parquet(out).count() == 7
jvm = spark.sparkContext._gateway.proc
spark.stop()
jvm.stdin.close()  # the gateway exits on its stdin's end; the archive is written as it exits
jvm.wait(timeout=300)
"""


def _archived(target: Path, run: Callable[[str], object]) -> Path:
    """The archive at ``target``, made by ``run(options)``: a training run
    whose JVM is given ``options``. It is written to a temporary name first,
    so a run that fails leaves no partial archive."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f".{target.name}.*"):  # a run stopped half-way
        stale.unlink()
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    run(f"{JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial}")
    if not partial.exists():
        raise SystemExit(f"jvm_archive: the training run wrote no archive at {partial}")
    os.replace(partial, target)
    return target


def build(target: Path = SPARK_ARCHIVE) -> Path:
    """Spark's archive: one session's run of :data:`_TRAINING`."""

    def run(options: str) -> None:
        env = dict(os.environ, SPARK_SUBMIT_OPTS=options)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        with tempfile.TemporaryDirectory() as cwd:
            subprocess.run(
                [sys.executable, "-c", _TRAINING],
                env=env,
                cwd=cwd,
                check=True,
                stdout=subprocess.DEVNULL,
            )

    return _archived(target, run)


def build_kafka(home: Path) -> Path:
    """The archive of the distribution at ``home``: one broker's run from
    its start to a clean stop (SIGTERM: the archive is written as the JVM
    exits)."""
    from seqkeeper.broker import KafkaBroker

    def run(options: str) -> None:
        os.environ["KAFKA_JVM_PERFORMANCE_OPTS"] = options
        with KafkaBroker(home):
            pass

    return _archived(kafka_archive(home), run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kafka",
        type=Path,
        metavar="HOME",
        help="build the archive of this Kafka distribution instead, unless it is current",
    )
    args = parser.parse_args()
    if shutil.which("java") is None:
        raise SystemExit("jvm_archive: no java on PATH (make java)")
    if args.kafka is None:
        print(f"jvm_archive: {build()}")
        return
    target = kafka_archive(args.kafka)
    # current: built since the virtualenv was (its stamp) and since each of
    # the distribution's jars was written (a JVM refuses an archive made
    # from a jar whose time has changed since)
    stamp = Path(sys.prefix) / ".installed"
    newer = [stamp, *(args.kafka / "libs").glob("*.jar")]
    if target.exists() and all(
        target.stat().st_mtime >= p.stat().st_mtime for p in newer if p.exists()
    ):
        return
    print(f"jvm_archive: {build_kafka(args.kafka)}")


if __name__ == "__main__":
    main()
