"""The demo's governed clock: every process reads one speed, a change never moves time backwards, sleepers follow
the new speed, and the governor slows the clock while the stack waits for a CPU and gives the speed back after."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import nats
from nats.js.api import AckPolicy, ConsumerConfig

from shared.clock import ClockControl, GovernedClock
from shared.settings import Settings
from sim.clock_governor import (
    BACKLOG_HIGH,
    BACKLOG_LOW,
    LATE_HIGH_SIM_S,
    LATE_LOW_SIM_S,
    ClockGovernor,
    run_queue_wait_s,
)
from sim.infra import NatsServer

EPOCH = datetime(2026, 3, 2, tzinfo=UTC)


def test_a_speed_change_continues_from_the_time_reached_and_every_reader_sees_it(tmp_path: Path) -> None:
    path = tmp_path / "clock"
    control = ClockControl.create(path, EPOCH, wall_anchor_s=1000.0, speed=360.0)
    reader = ClockControl(path)  # as another process maps the same file
    assert reader.sim_s(1010.0) == EPOCH.timestamp() + 3600.0
    control.set_speed(36.0, wall_s=1010.0)
    assert reader.read()[2] == 36.0
    assert reader.sim_s(1010.0) == EPOCH.timestamp() + 3600.0  # no jump at the change
    assert reader.sim_s(1020.0) == EPOCH.timestamp() + 3600.0 + 360.0


def test_settings_with_a_control_file_make_a_governed_clock_with_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "clock"
    ClockControl.create(path, EPOCH, wall_anchor_s=time.time(), speed=1.0)
    clock = Settings(clock_control_file=path, clock_offset_s=3600.0).make_clock()
    assert isinstance(clock, GovernedClock)
    assert abs((clock.now() - EPOCH).total_seconds() - 3600.0) < 60


async def test_a_sleeper_follows_a_speed_change_made_while_it_sleeps(tmp_path: Path) -> None:
    control = ClockControl.create(tmp_path / "clock", EPOCH, wall_anchor_s=time.time(), speed=1.0)
    clock = GovernedClock(ClockControl(tmp_path / "clock"))
    sleeper = asyncio.create_task(clock.sleep(3600.0))  # an hour at x1 would outlast the test
    await asyncio.sleep(0.05)
    assert not sleeper.done()
    control.set_speed(360_000.0)  # now the hour passes in 10 ms of wall time
    await asyncio.wait_for(sleeper, timeout=5.0)


def test_the_governor_slows_while_the_stack_waits_and_gives_the_speed_back(tmp_path: Path) -> None:
    control = ClockControl.create(tmp_path / "clock", EPOCH, wall_anchor_s=time.time(), speed=360.0)
    governor = ClockGovernor(control, 360.0, lambda: [], tmp_path / "clock.log")
    # a process waited a second for a CPU: at x360 it answered six simulated minutes late
    slowed = [governor.step(1.0, 0.5) for _ in range(3)]
    assert slowed[0] < 360.0 and slowed[2] < slowed[1] < slowed[0]
    for _ in range(60):
        speed = governor.step(LATE_LOW_SIM_S / 2 / 360.0 / 10, 0.5)
    assert speed == 360.0  # back to the asked speed, never above it
    assert governor.log.slowed_s > 0 and governor.log.lowest == slowed[2]
    steady = governor.step((LATE_LOW_SIM_S + LATE_HIGH_SIM_S) / 2 / 360.0, 0.5)
    assert steady == 360.0  # between the thresholds nothing moves
    assert "x360 -> x252" in (tmp_path / "clock.log").read_text()


def test_the_governor_slows_while_a_reader_falls_behind_though_no_process_waits_long(tmp_path: Path) -> None:
    """A busy demo's fleet read its task events 8,000 behind while no process waited a minute's worth per interval:
    the backlog alone slows the clock, and the speed comes back only once it is nearly read."""
    control = ClockControl.create(tmp_path / "clock", EPOCH, wall_anchor_s=time.time(), speed=360.0)
    governor = ClockGovernor(control, 360.0, lambda: [], tmp_path / "clock.log")
    idle_wait_s = LATE_LOW_SIM_S / 2 / 360.0  # on time by the run queues
    slowed = [governor.step(idle_wait_s, 0.5, BACKLOG_HIGH + 1) for _ in range(2)]
    assert slowed[1] < slowed[0] < 360.0
    assert governor.step(idle_wait_s, 0.5, (BACKLOG_LOW + BACKLOG_HIGH) // 2) == slowed[1]  # still reading: held
    assert governor.step(idle_wait_s, 0.5, BACKLOG_LOW - 1) > slowed[1]
    assert f"{BACKLOG_HIGH + 1} undelivered" in (tmp_path / "clock.log").read_text()


async def test_the_stack_backlog_is_read_from_nats_servers_monitoring(tmp_path: Path) -> None:
    """The most messages a durable has not had delivered, from a private server (a shared one holds other tests')."""
    with NatsServer(data_dir=tmp_path / "nats") as server:
        client = await nats.connect(server.url)
        try:
            js = client.jetstream()
            await js.add_stream(name="PROBE", subjects=["probe.>"])
            await js.add_consumer("PROBE", ConsumerConfig(durable_name="reader", ack_policy=AckPolicy.EXPLICIT))
            assert server.consumer_backlog() == 0
            for _ in range(7):
                await js.publish("probe.x", b"x", stream="PROBE")
            assert server.consumer_backlog() == 7
            [message] = await (await js.pull_subscribe_bind("reader", "PROBE")).fetch(1)
            await message.ack()
            assert server.consumer_backlog() == 6
        finally:
            await client.close()
    assert server.consumer_backlog() is None  # stopped: unknown, not empty


def test_the_run_queue_wait_of_a_process_is_read_from_the_kernel() -> None:
    waited = run_queue_wait_s(os.getpid())
    assert waited is not None and waited >= 0.0
    assert run_queue_wait_s(2**22 + 12345) is None  # no such process


def test_a_moment_before_the_governor_started_maps_at_the_start_up_speed(tmp_path: Path) -> None:
    """The dashboard maps each scrape's wall time back: the start-up minutes ran slower than the replay."""
    started = time.time() - 10.0
    control = ClockControl.create(tmp_path / "clock", EPOCH, wall_anchor_s=started, speed=30.0)
    governor = ClockGovernor(control, 360.0, lambda: [])
    governor.start()  # ten wall seconds after the stack began: 300 simulated seconds in
    assert abs(governor.sim_at(started + 5.0) - (EPOCH.timestamp() + 150.0)) < 1.0
    assert abs(governor.sim_at(started + 11.0) - (EPOCH.timestamp() + 300.0 + 360.0)) < 5.0
