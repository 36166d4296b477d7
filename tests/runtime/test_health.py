"""The worker's app serves /health, /ready, the restore gauge and the
replayed records, fed by its table recovery (seqkeeper.adapter.recovery:
Faust's offsets as positions; seqkeeper.adapter.tables: its changelog events);
no broker is needed: the app is built, never started, and its pages are
called directly. The same through a real restore:
tests/integration/test_restore_progress.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from seqkeeper.runtime.task import TaskState
from seqkeeper.runtime.wiring import build_app
from seqkeeper.settings import Settings
from seqkeeper.topologies import ordered


def built(tmp_path: Path) -> tuple[Any, Any]:
    settings = Settings.of(bootstrap="127.0.0.1:1", data_dir=tmp_path, web_port=6066)
    return build_app(settings, ordered.wiring(settings))


async def page(app: Any, path: str) -> tuple[int, Any]:
    response = await app.web.views[path].get(None)
    body = response.body
    return response.status, json.loads(body) if path != "/metrics" else body.decode()


def test_ready_follows_the_restore_health_does_not(tmp_path: Path) -> None:
    async def main() -> None:
        app, task = built(tmp_path)
        recovery = app.tables.recovery
        changelog = f"{app.conf.id}-state-changelog"
        # Faust's view of a restore under way: the last record applied
        # (-1: none) and the last to apply, per active changelog partition.
        tp0, tp1 = TP(changelog, 0), TP(changelog, 1)
        recovery.active_tps |= {tp0, tp1}
        recovery.active_offsets.update({tp0: 99, tp1: -1})
        recovery.active_highwaters.update({tp0: 999, tp1: -1})
        assert recovery.positions() == {(changelog, 0): (100, 1000), (changelog, 1): (0, 0)}
        app.rebalancing = True
        task.state = TaskState.RESTORING
        recovery.tell(lambda listener, now, positions: listener.begin(now))
        recovery.tell(lambda listener, now, positions: listener.observe(now, positions))

        assert await page(app, "/ready") == (
            503,
            {
                "ready": False,
                "state": "restoring",
                "remaining": {f"{changelog}/0": 900, f"{changelog}/1": 0},
            },
        )
        assert await page(app, "/health") == (200, {"alive": True})
        status, metrics = await page(app, "/metrics")
        assert status == 200
        gauge = f'seqkeeper_restore_remaining_records{{partition="0",topic="{changelog}"}}'
        assert f"{gauge} 900.0" in metrics
        assert "seqkeeper_messages_in_total" in metrics  # (the topology's, beside it)

        recovery.active_offsets[tp0] = 999
        recovery.tell(lambda listener, now, positions: listener.end(now, positions))
        task.state = TaskState.RUNNING
        assert (await page(app, "/ready"))[0] == 503  # still rebalancing
        app.rebalancing = False
        assert await page(app, "/ready") == (200, {"ready": True})
        assert f"{gauge} 0.0" in (await page(app, "/metrics"))[1]

        task.state = TaskState.SUSPENDED  # a clean stop under way
        assert await page(app, "/health") == (503, {"alive": False, "state": "stopping"})
        assert (await page(app, "/ready"))[1]["state"] == "stopping"

    asyncio.run(main())


def test_a_failing_listener_costs_its_reports_not_the_recovery(tmp_path: Path) -> None:
    class Broken:
        def begin(self, now: float) -> None:
            raise RuntimeError("a bug in a listener")

    async def main() -> None:
        app, _ = built(tmp_path)
        recovery = app.tables.recovery
        heard: list[float] = []

        class Listener:
            def begin(self, now: float) -> None:
                heard.append(now)

        recovery.listeners[:0] = [Broken()]
        recovery.listeners.append(Listener())
        recovery.tell(lambda listener, now, positions: listener.begin(now))
        assert len(heard) == 1

    asyncio.run(main())


def test_replayed_changelog_records_are_counted_by_role(tmp_path: Path) -> None:
    async def main() -> None:
        app, _ = built(tmp_path)
        recovery = app.tables.recovery
        table = app.tables["state"]
        changelog = f"{app.conf.id}-state-changelog"
        tp0, tp1 = TP(changelog, 0), TP(changelog, 1)
        counter = "seqkeeper_changelog_replayed_total"
        metrics = (await page(app, "/metrics"))[1]
        assert f'{counter}{{role="active"}} 0.0' in metrics
        assert f'{counter}{{role="standby"}} 0.0' in metrics

        recovery.active_tps.add(tp0)
        recovery.standby_tps.add(tp1)
        for tp, offset in [(tp0, 0), (tp0, 1), (tp1, 0)]:
            await table.on_changelog_event(
                SimpleNamespace(message=SimpleNamespace(tp=tp, offset=offset))
            )
        metrics = (await page(app, "/metrics"))[1]
        assert f'{counter}{{role="active"}} 2.0' in metrics
        assert f'{counter}{{role="standby"}} 1.0' in metrics

    asyncio.run(main())
