"""The bucket ring: window sums equal a brute-force count over the same events, whatever the order or gaps."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.demand.windows import ARRIVALS, BUSY_S, COMPLETIONS, BucketSeries

WINDOWS = (3, 5, 12)


def brute_sum(events: list[tuple[int, int, float]], head: int, n: int, field: int) -> float:
    return sum(amount for bucket, f, amount in events if f == field and head - n < bucket <= head)


def test_window_sums_cover_the_last_n_buckets_including_the_partial_one() -> None:
    series = BucketSeries(WINDOWS)
    for bucket in range(100, 120):
        series.add(bucket, ARRIVALS, 1)
    assert [series.window_sum(i, ARRIVALS) for i in range(3)] == [3, 5, 12]


def test_advancing_past_every_window_empties_them() -> None:
    series = BucketSeries(WINDOWS)
    series.add(10, COMPLETIONS, 4)
    series.advance(10 + 12)
    assert series.window_sum(2, COMPLETIONS) == 0
    series.advance(10_000)
    assert all(series.window_sum(i, COMPLETIONS) == 0 for i in range(3))
    assert series.complete_arrivals == [0, 0, 0]


def test_a_bucket_older_than_every_window_is_refused() -> None:
    series = BucketSeries(WINDOWS)
    series.add(100, ARRIVALS, 1)
    assert not series.add(100 - 13, ARRIVALS, 1)
    assert series.add(100 - 12, ARRIVALS, 1)  # still inside the complete-bucket range of the longest window
    assert series.window_sum(2, ARRIVALS) == 1


def test_slope_of_a_linear_ramp_is_exact_and_ignores_the_partial_bucket() -> None:
    series = BucketSeries((10,))
    for bucket in range(0, 10):
        series.add(bucket, ARRIVALS, 2 * bucket)
    series.add(10, ARRIVALS, 0)  # the newest bucket is still filling: excluded from the slope
    assert series.arrival_slope_per_bucket2(0, first_bucket=0) == 2.0


def test_state_round_trip_recomputes_identical_sums() -> None:
    series = BucketSeries(WINDOWS)
    for bucket, amount in [(5, 1), (7, 2), (9, 1), (12, 3), (13, 1)]:
        series.add(bucket, ARRIVALS, amount)
        series.add(bucket, BUSY_S, amount * 1.5)
    copy = BucketSeries.from_state(WINDOWS, series.to_state())
    assert copy.sums == series.sums
    assert copy.complete_x_arrivals == series.complete_x_arrivals
    assert copy.arrival_slope_per_bucket2(2, 0) == series.arrival_slope_per_bucket2(2, 0)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 60), st.sampled_from([ARRIVALS, COMPLETIONS]), st.integers(1, 3)),
        min_size=1,
        max_size=60,
    ),
    st.integers(0, 40),
)
def test_running_sums_match_brute_force_in_any_order(events: list[tuple[int, int, int]], extra: int) -> None:
    """Events in arbitrary order (late ones included), then a query later: sums equal a recount."""
    series = BucketSeries(WINDOWS)
    accepted: list[tuple[int, int, float]] = []
    for bucket, field, amount in events:
        if series.add(bucket, field, amount):
            accepted.append((bucket, field, amount))
    head = series.head + extra
    series.advance(head)
    for i, n in enumerate(WINDOWS):
        for field in (ARRIVALS, COMPLETIONS):
            assert series.window_sum(i, field) == brute_sum(accepted, head, n, field)
        complete = [(b, a) for b, f, a in accepted if f == ARRIVALS and head - n <= b < head]
        assert series.complete_arrivals[i] == sum(a for _, a in complete)
        assert series.complete_x_arrivals[i] == sum(b * a for b, a in complete)
