"""Settings that the worker parses itself (seqkeeper/settings.py)."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest

from seqkeeper.settings import Settings
from seqkeeper.topologies.shell import make_app
from seqkeeper.worker import tune_interpreter


def test_gc_thresholds_default_env_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEQKEEPER_GC_THRESHOLD", raising=False)
    assert Settings().gc_thresholds() == (5000, 20, 50)
    monkeypatch.setenv("SEQKEEPER_GC_THRESHOLD", "700, 10, 10")
    assert Settings().gc_thresholds() == (700, 10, 10)
    for bad in ("700,10", "a,b,c", "700,-1,10", ""):
        with pytest.raises(ValueError, match="three non-negative integers"):
            Settings(gc_threshold=bad).gc_thresholds()


def test_the_worker_applies_the_thresholds_and_the_switch_interval() -> None:
    before, switch = gc.get_threshold(), sys.getswitchinterval()
    gc.unfreeze()
    try:
        tune_interpreter(Settings(gc_threshold="1234,5,6", switch_interval=0.03))
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
    assert Settings().switch_seconds() == 0.05
    monkeypatch.setenv("SEQKEEPER_SWITCH_INTERVAL", "0.005")
    assert Settings().switch_seconds() == 0.005
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="switch interval must be a positive number"):
            Settings(switch_interval=bad).switch_seconds()


def test_fetch_wait_in_milliseconds_default_env_rounding_and_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SEQKEEPER_FETCH_MAX_WAIT", raising=False)
    assert Settings().fetch_wait_ms() == 20
    monkeypatch.setenv("SEQKEEPER_FETCH_MAX_WAIT", "0.0299")
    # rounded, not truncated: 0.0299 s is 30 ms, not 29
    assert Settings().fetch_wait_ms() == 30
    assert Settings(fetch_max_wait=0.0).fetch_wait_ms() == 0
    for bad in (-0.001, float("nan")):
        with pytest.raises(ValueError, match="fetch max wait must be a non-negative"):
            Settings(fetch_max_wait=bad).fetch_wait_ms()


def test_the_worker_app_fetches_with_the_settings_wait(tmp_path: Path) -> None:
    app = make_app(Settings(broker="127.0.0.1:1", data_dir=tmp_path, fetch_max_wait=0.0299))
    assert app.fetch_max_wait_ms == 30
