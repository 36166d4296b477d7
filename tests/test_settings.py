"""Settings that the worker parses itself (seqkeeper/settings.py)."""

from __future__ import annotations

import gc
import sys

import pytest

from seqkeeper.settings import Settings
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
