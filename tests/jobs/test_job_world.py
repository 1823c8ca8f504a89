"""The job system stand-in: pipelined workers, re-queue on loss, waits measured."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sim.jobs.world import JobWorld

T0 = datetime(2026, 3, 2, tzinfo=UTC)


def run_minutes(world: JobWorld, minutes: int) -> list:
    steps = []
    for minute in range(minutes + 1):
        steps += world.advance(T0 + timedelta(minutes=minute))
    return steps


def test_a_reference_machine_finishes_about_one_task_every_30_s() -> None:
    world = JobWorld()
    world.submit(1000, T0)
    world.set_workers({1: ("RTX 4090", 120.0)})
    run_minutes(world, 120)
    # after the first 4-minute pipeline fill, 8 tasks every 4 minutes
    assert 220 <= world.completed <= 240


def test_no_worker_means_the_queue_only_grows() -> None:
    world = JobWorld()
    world.submit(59, T0)
    steps = run_minutes(world, 60)
    assert world.pending == 59 and world.completed == 0
    assert {s.kind for s in steps} == set()


def test_a_lost_machine_requeues_its_running_tasks() -> None:
    world = JobWorld()
    world.submit(8, T0)
    world.set_workers({7: ("RTX 4090", 120.0)})
    started = world.advance(T0)
    assert len([s for s in started if s.kind == "started"]) == 8
    world.set_workers({})
    run_minutes(world, 10)
    assert world.completed == 0 and world.pending == 8


def test_completions_carry_worker_instance_and_duration() -> None:
    world = JobWorld()
    world.submit(1, T0)
    world.set_workers({42: ("RTX 3090", 60.0)})
    steps = run_minutes(world, 10)
    done = [s for s in steps if s.kind == "completed"]
    assert len(done) == 1
    assert done[0].worker_id == "worker-42" and done[0].instance_id == 42 and done[0].gpu_model == "RTX 3090"
    assert done[0].duration_s == 480.0  # half the throughput, twice the time per task
    assert world.waits_s == [0.0]
