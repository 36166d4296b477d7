"""adapter.highwater picks the partition ends Faust's recovery gets: exact
ends, or committed ends when the app runs exactly-once (its
options' ``guarantee``). The functions themselves need a broker:
tests/integration/test_committed_ends.py, test_broker_deviations.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from faust.types import TP

from seqkeeper.adapter import highwater
from seqkeeper.runtime.wiring import make_app
from seqkeeper.settings import Guarantee, Settings


@pytest.mark.parametrize("exactly_once", [False, True])
def test_recovery_ends_are_committed_ends_in_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exactly_once: bool
) -> None:
    called: list[str] = []

    def fake(name: str) -> Any:
        async def ends(bootstrap: Any, partitions: Any, **_: Any) -> dict[TopicPartition, int]:
            called.append(name)
            return {tp: 7 for tp in partitions}

        return ends

    monkeypatch.setattr(highwater, "end_offsets", fake("end_offsets"))
    monkeypatch.setattr(highwater, "committed_ends", fake("committed_ends"))

    async def main() -> Any:
        guarantee = Guarantee.EXACTLY_ONCE if exactly_once else Guarantee.AT_LEAST_ONCE
        app: Any = make_app(
            Settings.of(
                bootstrap="127.0.0.1:1",
                data_dir=tmp_path,
                web_port=6066,
                processing_guarantee=guarantee.value,
            )
        )
        thread = app.consumer._thread
        assert isinstance(thread, highwater.HighwaterThread)
        return await thread._highwaters([TP("t-changelog", 0)])

    assert asyncio.run(main()) == {TP("t-changelog", 0): 7}
    assert called == ["committed_ends" if exactly_once else "end_offsets"]
