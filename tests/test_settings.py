"""Settings (seqkeeper/settings/): declared once, grouped, read only there."""

from __future__ import annotations

import ast
import gc
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.runtime.guarantee import choose_fetch_wait
from seqkeeper.runtime.wiring import make_app
from seqkeeper.settings import GROUPS, VARS, SettingError, Settings, markdown_table
from seqkeeper.worker import tune_interpreter


def test_gc_thresholds_default_env_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEQKEEPER_GC_THRESHOLD", raising=False)
    assert Settings().runtime.gc_threshold == (5000, 20, 50)
    monkeypatch.setenv("SEQKEEPER_GC_THRESHOLD", "700, 10, 10")
    assert Settings().runtime.gc_threshold == (700, 10, 10)
    for bad in ("700,10", "a,b,c", "700,-1,10", ""):
        with pytest.raises(ValueError, match="three non-negative integers"):
            Settings.of(gc_threshold=bad)


def test_the_worker_applies_the_thresholds_and_the_switch_interval() -> None:
    before, switch = gc.get_threshold(), sys.getswitchinterval()
    gc.unfreeze()
    try:
        tune_interpreter(Settings.of(gc_threshold="1234,5,6", switch_interval=0.03))
        assert gc.get_threshold() == (1234, 5, 6)
        assert sys.getswitchinterval() == pytest.approx(0.03)
        # what exists by now is left out of every collection from now on
        assert gc.get_freeze_count() > 0
        assert not gc.get_objects(generation=2)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
        sys.setswitchinterval(switch)


def test_switch_interval_default_env_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEQKEEPER_SWITCH_INTERVAL", raising=False)
    assert Settings().runtime.switch_interval == 0.05
    monkeypatch.setenv("SEQKEEPER_SWITCH_INTERVAL", "0.005")
    assert Settings().runtime.switch_interval == 0.005
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="switch interval must be a positive number"):
            Settings.of(switch_interval=bad)


def test_fetch_wait_in_milliseconds_default_env_rounding_and_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SEQKEEPER_FETCH_MAX_WAIT", raising=False)
    assert Settings().runtime.fetch_wait_ms() == 20
    monkeypatch.setenv("SEQKEEPER_FETCH_MAX_WAIT", "0.0299")
    # rounded, not truncated: 0.0299 s is 30 ms, not 29
    assert Settings().runtime.fetch_wait_ms() == 30
    assert Settings.of(fetch_max_wait=0.0).runtime.fetch_wait_ms() == 0
    for bad in (-0.001, float("nan")):
        with pytest.raises(ValueError, match="fetch max wait must be a non-negative"):
            Settings.of(fetch_max_wait=bad).runtime.fetch_wait_ms()


def test_an_auto_fetch_wait_is_resolved_with_the_guarantee_and_a_set_one_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SEQKEEPER_FETCH_MAX_WAIT", raising=False)
    assert Settings().runtime.fetch_max_wait is None  # auto by default
    for text in ("auto", ""):  # ("": how to_env writes auto for a child)
        assert Settings.of(fetch_max_wait=text).runtime.fetch_max_wait is None
    auto = Settings.of(fetch_max_wait="auto")
    assert (
        Settings.of(
            **{"fetch_max_wait": auto.to_env()["SEQKEEPER_FETCH_MAX_WAIT"]}
        ).runtime.fetch_max_wait
        is None
    )
    eos = choose_fetch_wait(auto.with_overrides(processing_guarantee="exactly_once"))
    assert eos.runtime.fetch_max_wait == 0.5 and eos.runtime.fetch_wait_ms() == 500
    alo = choose_fetch_wait(auto.with_overrides(processing_guarantee="at_least_once"))
    assert alo.runtime.fetch_max_wait == 0.02 and alo.runtime.fetch_wait_ms() == 20
    # resolved, a child process gets the number
    assert eos.to_env()["SEQKEEPER_FETCH_MAX_WAIT"] == "0.5"
    kept = Settings.of(fetch_max_wait="0.1", processing_guarantee="exactly_once")
    assert choose_fetch_wait(kept).runtime.fetch_wait_ms() == 100
    with pytest.raises(SettingError, match="fetch-max-wait='soon': expected auto or a non-negative number"):
        Settings.of(fetch_max_wait="soon")


def test_the_worker_app_fetches_with_the_settings_wait(tmp_path: Path) -> None:
    app = make_app(Settings.of(bootstrap="127.0.0.1:1", data_dir=tmp_path, fetch_max_wait=0.0299))
    assert app.options.fetch_max_wait_ms == 30


# -- each variable declared once ------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"


def test_every_variable_is_declared_once_with_help() -> None:
    envs = [v.env for v in VARS.values()]
    assert len(envs) == len(set(envs))
    for v in VARS.values():
        assert v.help.endswith((".", ")")), v.env
    assert set(GROUPS) == {"broker", "security", "runtime", "ordered", "commands", "spark"}


def value_of(settings: Settings, name: str) -> object:
    return getattr(getattr(settings, VARS[name].group), name)


def test_each_variable_sets_its_own_setting_and_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user sees: a variable set in the environment changes the
    setting it is declared for, as its flag does, and nothing else; a value
    it cannot take, or one that needs another variable (SASL and TLS files
    need a protocol that uses them), is an error naming that variable."""
    for v in VARS.values():
        monkeypatch.delenv(v.env, raising=False)
    before = Settings()
    changed, refused, needs_another = [], [], []
    for v in VARS.values():
        for text in ("7", "false", "commands"):
            monkeypatch.setenv(v.env, text)
            try:
                value = v.parse(text)
            except ValueError:
                with pytest.raises(SettingError) as caught:
                    Settings()
                assert str(caught.value).startswith(v.shown(text) + ": "), v.env
                monkeypatch.delenv(v.env)
                with pytest.raises(SettingError) as caught:
                    Settings.of(**{v.name: text})
                assert str(caught.value).startswith(v.shown(text, v.name.replace("_", "-")))
                refused.append(v.name)
                continue
            if value == value_of(before, v.name):
                monkeypatch.delenv(v.env)
                continue
            try:
                after = Settings()
            except SettingError as e:
                assert str(e).startswith(f"{v.env} set, but "), str(e)
                needs_another.append(v.name)
                monkeypatch.delenv(v.env)
                break
            monkeypatch.delenv(v.env)
            assert value_of(after, v.name) == value, v.env
            assert [n for n in VARS if value_of(after, n) != value_of(before, n)] == [v.name]
            assert Settings.of(**{v.name: text}) == after, v.env
            changed.append(v.name)
            break
    assert set(changed) | set(refused) | set(needs_another) == set(VARS)
    # most take "7"; every choice refuses it; the SASL and TLS ones need a protocol
    assert len(changed) > len(VARS) // 2 and refused
    assert needs_another and {VARS[n].group for n in needs_another} == {"security"}


def test_the_readme_table_is_generated_from_the_declarations() -> None:
    """Regenerate with ``python -m seqkeeper.settings`` (or ``seqkeeper
    settings --markdown``) and paste it between the markers."""
    readme = (ROOT / "README.md").read_text()
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1
    table = readme.split(BEGIN)[1].split(END)[0].strip("\n") + "\n"
    assert table == markdown_table(), "README.md's configuration table is stale"


def test_no_module_reads_a_declared_variable_itself() -> None:
    """Only seqkeeper/settings/ turns a variable into a value: a second
    reader would be a second default and a second parser."""
    declared = {v.env for v in VARS.values()}
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    readers = []
    for name in tracked:
        path = ROOT / name
        # (examples/ are users' projects: they read the environment as users do)
        if (
            path.is_symlink()
            or name.startswith(("tests/", "examples/"))
            or name.startswith("seqkeeper/settings/")
        ):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in declared:
                parent_src = ast.get_source_segment(path.read_text(), node) or ""
                readers.append(f"{name}:{node.lineno} {parent_src}")
    assert not readers, readers


def test_a_bad_value_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for env, bad, reason in [
        ("SEQKEEPER_PARTITIONS", "four", "expected a whole number"),
        ("SEQKEEPER_PARTITIONS", "0", "at least 1"),
        ("SEQKEEPER_GAP_TIMEOUT", "-1", "non-negative number of seconds"),
        ("SEQKEEPER_TOPOLOGY", "both", "expected one of ordered, commands"),
        ("SEQKEEPER_SWITCH_INTERVAL", "nan", "expected a number"),
        ("SEQKEEPER_KEY_FIELD", "account..id", "expected a dotted path"),
        ("SEQKEEPER_SEQ_FIELD", ".seq", "expected a dotted path"),
        ("SEQKEEPER_MESSAGE_ID_FIELD", "meta.", "expected a dotted path"),
        ("SEQKEEPER_EVENT_TIME_FIELD", "a..b", "expected a dotted path"),
    ]:
        monkeypatch.setenv(env, bad)
        with pytest.raises(SettingError) as caught:
            Settings()
        assert str(caught.value) == f"{env}={bad!r}: {reason}" or reason in str(caught.value)
        assert str(caught.value).startswith(f"{env}={bad!r}: ")
        monkeypatch.delenv(env)


def test_overrides_are_checked_like_the_environment() -> None:
    assert Settings.of(partitions="7").broker.partitions == 7
    assert Settings.of(log_level="INFO").runtime.log_level == "info"
    with pytest.raises(SettingError, match="topology='both': expected one of"):
        Settings.of(topology="both")
    with pytest.raises(TypeError, match="unknown settings: nonsense"):
        Settings.of(nonsense=1)
    # None is a flag that was not given
    assert Settings.of(app_id=None) == Settings()


texts = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=12)


@given(
    app_id=texts.filter(bool),
    partitions=st.integers(1, 10_000),
    gap=st.floats(0, 1e9, allow_nan=False),
    fields=st.lists(texts.filter(lambda t: "," not in t and t.strip() == t and t), max_size=3),
    topology=st.sampled_from(["ordered", "commands"]),
)
def test_the_environment_round_trips(
    app_id: str, partitions: int, gap: float, fields: list[str], topology: str
) -> None:
    """``to_env`` is what a worker process is started with: read back, it
    gives the same settings."""
    settings = Settings.of(
        app_id=app_id,
        partitions=partitions,
        gap_timeout=gap,
        sensitive_fields=tuple(fields),
        topology=topology,
    )
    env = settings.to_env()
    assert set(env) == {v.env for v in VARS.values()}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        assert Settings() == settings


def test_worker_help_is_rendered_from_the_declarations() -> None:
    from typer.testing import CliRunner

    from seqkeeper.cli import app

    done = CliRunner().invoke(app, ["worker", "--help"], env={"COLUMNS": "400"})
    assert done.exit_code == 0
    for name in ("bootstrap", "data_dir", "partitions", "topology", "broker_wait"):
        assert VARS[name].flag_help().replace("\\[", "[") in done.output, name


def test_the_settings_command_shows_values_and_sources() -> None:
    from typer.testing import CliRunner

    from seqkeeper.cli import app

    env = {"COLUMNS": "400", "SEQKEEPER_PARTITIONS": "6", "SEQKEEPER_AUDIT_KEY": "secret"}
    done = CliRunner().invoke(app, ["settings"], env=env)
    assert done.exit_code == 0, done.output
    row = next(line for line in done.output.splitlines() if "SEQKEEPER_PARTITIONS" in line)
    assert "6" in row and "env" in row
    assert "secret" not in done.output
    bad = CliRunner().invoke(app, ["settings"], env={"SEQKEEPER_PARTITIONS": "x"})
    assert bad.exit_code == 2
    markdown = CliRunner().invoke(app, ["settings", "--markdown"])
    assert markdown.output == markdown_table()


TOKEN = "s3cr3t-t0ken-0123456789"


def test_the_http_token_is_checked_and_never_quoted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert VARS["http_token"].secret and not VARS["http_token_file"].secret
    assert Settings.of(http_token=TOKEN).runtime.query_token() == TOKEN
    assert Settings.of(http_token="").runtime.query_token() is None
    for bad, reason in [("short-secret", "at least 16"), (TOKEN + " x", "without spaces")]:
        monkeypatch.setenv("SEQKEEPER_HTTP_TOKEN", bad)
        with pytest.raises(SettingError, match=reason) as caught:
            Settings()
        assert str(caught.value).startswith("SEQKEEPER_HTTP_TOKEN=***: ")
        assert bad not in str(caught.value)
        with pytest.raises(SettingError) as caught:
            Settings.of(http_token=bad)
        assert bad not in str(caught.value)
    monkeypatch.delenv("SEQKEEPER_HTTP_TOKEN")

    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\r\n")
    assert Settings.of(http_token_file=str(secret)).runtime.query_token() == TOKEN
    with pytest.raises(SettingError, match="both SEQKEEPER_HTTP_TOKEN and SEQKEEPER_HTTP_TOKEN_"):
        Settings.of(http_token=TOKEN, http_token_file=str(secret))
    for text, reason in [
        ("", "the file is empty"),
        ("short\n", "at least 16"),
        ("é" * 20, "not ASCII"),
    ]:
        secret.write_text(text)
        with pytest.raises(SettingError, match=reason) as caught:
            Settings.of(http_token_file=str(secret)).runtime.query_token()
        assert str(caught.value).startswith(f"SEQKEEPER_HTTP_TOKEN_FILE={str(secret)!r}: ")
        assert not text.strip() or text.strip() not in str(caught.value)
    missing = Settings.of(http_token_file=str(tmp_path / "nope")).runtime
    with pytest.raises(SettingError, match="cannot read the token .No such file"):
        missing.query_token()


def test_the_token_is_hidden_from_the_settings_command_and_help(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from seqkeeper.cli import app

    env = {"COLUMNS": "400", "SEQKEEPER_HTTP_TOKEN": TOKEN}
    shown = CliRunner().invoke(app, ["settings"], env=env)
    assert shown.exit_code == 0 and TOKEN not in shown.output
    row = next(line for line in shown.output.splitlines() if "SEQKEEPER_HTTP_TOKEN " in line)
    assert "***" in row
    assert TOKEN not in CliRunner().invoke(app, ["worker", "--help"], env=env).output
    bad = CliRunner().invoke(app, ["settings"], env={"SEQKEEPER_HTTP_TOKEN": "tiny-secret"})
    assert bad.exit_code == 2 and "tiny-secret" not in bad.output


def test_a_worker_with_an_unusable_token_stops_before_any_broker(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from seqkeeper.cli import app

    secret = tmp_path / "token"
    secret.write_text(TOKEN)
    env = {
        "SEQKEEPER_HTTP_TOKEN": TOKEN,
        "SEQKEEPER_HTTP_TOKEN_FILE": str(secret),
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "SEQKEEPER_DATA_DIR": str(tmp_path / "data"),
    }
    done = CliRunner().invoke(app, ["worker"], env=env)
    assert done.exit_code == 2, done.output
    assert "both SEQKEEPER_HTTP_TOKEN and SEQKEEPER_HTTP_TOKEN_FILE are set" in done.output
    assert TOKEN not in done.output


def test_changelog_topics_keep_tombstones_a_day_or_the_key_retention() -> None:
    day = 24 * 3600 * 1000

    def configs(retention: float) -> dict[str, str]:
        return Settings.of(bootstrap="-", key_retention=retention).ordered.changelog_topic_configs()

    assert configs(2.0) == {"delete.retention.ms": str(day)}
    assert configs(3 * 24 * 3600.0) == {"delete.retention.ms": str(3 * day)}
    assert configs(math.inf) == {"delete.retention.ms": str(day)}
    assert Settings.of(bootstrap="-").ordered.key_retention_policy().idle == 7 * 24 * 3600.0


# -- a bad value fails when the settings are built, not where it is used --------

#: A bad value of each setting that was once checked only where it was used
#: (issue 48), and the line building the settings now fails with.
CHECKED_AT_LOAD = [
    (
        {"SEQKEEPER_GC_THRESHOLD": "700,10"},
        "SEQKEEPER_GC_THRESHOLD='700,10': expected three non-negative integers such as 5000,20,50",
    ),
    (
        {"SEQKEEPER_SWITCH_INTERVAL": "0"},
        "SEQKEEPER_SWITCH_INTERVAL='0': switch interval must be a positive number of "
        "seconds, got 0.0",
    ),
    (
        {"SEQKEEPER_HTTP_TOKEN": TOKEN, "SEQKEEPER_HTTP_TOKEN_FILE": "/run/secrets/token"},
        "both SEQKEEPER_HTTP_TOKEN and SEQKEEPER_HTTP_TOKEN_FILE are set: set one of them (the "
        "token, or the file that holds it)",
    ),
    (
        {"SEQKEEPER_COMMAND_AUTH": "jwt"},
        "SEQKEEPER_COMMAND_AUTH=jwt needs SEQKEEPER_JWT_KEYS: a JWKS file or a directory of "
        "<kid>.pem public keys",
    ),
    (
        {"SEQKEEPER_AUDIT_KEY": TOKEN, "SEQKEEPER_AUDIT_KEY_FILE": "/run/secrets/key"},
        "both SEQKEEPER_AUDIT_KEY and SEQKEEPER_AUDIT_KEY_FILE are set: unset one of them",
    ),
    (
        {
            "SEQKEEPER_AUDIT_DECRYPT_KEYS": TOKEN,
            "SEQKEEPER_AUDIT_DECRYPT_KEYS_FILE": "/run/secrets/olds",
        },
        "both SEQKEEPER_AUDIT_DECRYPT_KEYS and SEQKEEPER_AUDIT_DECRYPT_KEYS_FILE are set: "
        "unset one of them",
    ),
]


@pytest.mark.parametrize(("environ", "line"), CHECKED_AT_LOAD)
def test_a_bad_value_fails_when_the_settings_are_loaded(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], line: str
) -> None:
    """Each of these was checked only where it was used (the worker's
    start, its web server, the command worker, the audit key's reader):
    building the settings fails now, in one line naming the variables,
    never quoting a secret."""
    for v in VARS.values():
        monkeypatch.delenv(v.env, raising=False)
    for name, text in environ.items():
        monkeypatch.setenv(name, text)
    with pytest.raises(SettingError) as caught:
        Settings()
    assert str(caught.value) == line
    assert TOKEN not in str(caught.value)


def test_a_value_given_typed_is_checked_when_the_settings_are_built() -> None:
    """A value given already typed (an override, ``dataclasses.replace``)
    skips the parser, not the check: it was checked only where the worker
    used it (its fetch wait, its switch interval, its message shape)."""
    from dataclasses import replace

    for overrides, line in [
        (
            {"fetch_max_wait": -0.001},
            "SEQKEEPER_FETCH_MAX_WAIT='-0.001': fetch max wait must be a non-negative number "
            "of seconds, got -0.001",
        ),
        (
            {"switch_interval": math.nan},
            "SEQKEEPER_SWITCH_INTERVAL='nan': switch interval must be a positive number of "
            "seconds, got nan",
        ),
    ]:
        with pytest.raises(SettingError) as caught:
            Settings.of(**overrides)
        assert str(caught.value) == line
    ordered = Settings.of(bootstrap="-").ordered
    for name in ("key_field", "seq_field", "message_id_field", "event_time_field"):
        with pytest.raises(SettingError) as caught:
            replace(ordered, **{name: "a..b"})
        assert str(caught.value) == (
            f"{VARS[name].env}='a..b': expected a dotted path of field names, such as meta.key"
        )
