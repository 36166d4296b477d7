"""Installing seqkeeper adds one import name, ``seqkeeper``.

The design's top-level folders (``processors/``, ``state/``, ``topologies/``,
``spark_sink/``, ``bench/``) are mapped under that name by symlinks in
``seqkeeper/``. Inside the repository the old names would still import, from
the working directory, as second module objects beside ``seqkeeper.*``: the
source must never use them.
"""

import ast
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAPPED = ("processors", "state", "topologies", "spark_sink", "bench")


def python_files() -> list[Path]:
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in tracked if not (ROOT / name).is_symlink()]


def old_imports(source: str) -> list[str]:
    """Every import of a mapped folder by its old top-level name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [name for name in names if name.split(".")[0] in MAPPED]
    return found


def test_old_imports_are_found() -> None:
    """The check below can fail."""
    assert old_imports("import state.codecs\nfrom processors import envelope\n") == [
        "state.codecs",
        "processors",
    ]
    assert old_imports("from seqkeeper.state import codecs\nfrom . import x\n") == []


def test_the_repository_imports_only_seqkeeper_names() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in python_files()
        if (found := old_imports(path.read_text()))
    }
    assert not offenders, offenders


def test_each_folder_is_mapped_under_seqkeeper() -> None:
    for name in MAPPED:
        link = ROOT / "seqkeeper" / name
        assert link.is_symlink(), f"seqkeeper/{name} is not a symlink"
        assert link.resolve() == (ROOT / name).resolve()
        assert importlib.util.find_spec(f"seqkeeper.{name}") is not None


def test_outside_the_repository_only_seqkeeper_imports(tmp_path: Path) -> None:
    """In the project's virtualenv, from a directory with nothing in it."""
    probe = (
        "import importlib.util, seqkeeper, seqkeeper.processors.resequencer, "
        "seqkeeper.state.stores, seqkeeper.topologies.ordered, seqkeeper.spark_sink.job, "
        "seqkeeper.bench.harness\n"
        f"print(sorted(n for n in {MAPPED!r} if importlib.util.find_spec(n)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_wheel_has_one_top_level_name(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(result.stderr[-2000:])
    (wheel,) = tmp_path.glob("seqkeeper-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"seqkeeper"}
    for name in MAPPED:
        assert f"seqkeeper/{name}/__init__.py" in names
    # the topic contracts `seqkeeper contracts` builds from (seqkeeper/schemas -> ../schemas)
    assert "seqkeeper/schemas/asyncapi.json" in names
    assert "seqkeeper/schemas/command.schema.json" in names


def test_the_image_copies_every_mapped_folder() -> None:
    """``pip install .`` in the Dockerfile follows the symlinks in seqkeeper/:
    a folder they point to that is not copied fails the image build."""
    copied = {
        line.split()[1]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ")
    }
    wanted = {"seqkeeper", "schemas", *MAPPED}  # (schemas: seqkeeper/schemas links it)
    assert wanted <= copied, wanted - copied
