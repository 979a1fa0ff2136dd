"""Rate limiters, mirroring client-go's default_rate_limiters_test.go and golang.org/x/time/rate's reservations."""

from __future__ import annotations

import pytest

from learnerd.reconcilers.settings import WorkqueueConfig
from learnerd.runtime.workqueue import (
    BucketRateLimiter,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    default_controller_rate_limiter,
)


def test_exponential_backoff_sequence_of_the_controller_default() -> None:
    """5 ms doubling: 5, 10, 20, 40 ms … 655.36 s, then capped at 1000 s."""
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [limiter.when("key") for _ in range(22)]
    assert delays[:6] == [0.005, 0.010, 0.020, 0.040, 0.080, 0.160]
    assert delays[17] == 655.36  # 0.005 * 2**17
    assert delays[18:] == [1000.0] * 4
    assert delays == [min(0.005 * 2**n, 1000.0) for n in range(22)]
    assert limiter.num_requeues("key") == 22


def test_item_exponential_failure_rate_limiter() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.001, 1.0)
    assert [limiter.when("one") for _ in range(5)] == [0.001, 0.002, 0.004, 0.008, 0.016]
    assert limiter.num_requeues("one") == 5
    assert [limiter.when("two") for _ in range(2)] == [0.001, 0.002]  # per item
    assert limiter.num_requeues("two") == 2
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.when("one") == 0.001
    assert limiter.num_requeues("two") == 2  # forgetting one key leaves the others alone


def test_item_exponential_failure_rate_limiter_overflow() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.001, 1000.0)
    for _ in range(5):
        limiter.when("one")
    assert limiter.when("one") == 0.032
    for _ in range(2000):  # 2**2000 overflows a float: still the cap
        limiter.when("overflow")
    assert limiter.when("overflow") == 1000.0

    limiter = ItemExponentialFailureRateLimiter(60.0, 1000 * 3600.0)
    for _ in range(2):
        limiter.when("two")
    assert limiter.when("two") == 240.0
    for _ in range(1000):
        limiter.when("overflow")
    assert limiter.when("overflow") == 1000 * 3600.0


def test_token_bucket_spends_the_burst_then_spaces_at_qps() -> None:
    clock = FakeClock()
    bucket: BucketRateLimiter[int] = BucketRateLimiter(qps=10, burst=100, clock=clock)
    assert [bucket.when(i) for i in range(100)] == [0.0] * 100
    # the bucket is empty: each reservation waits one more 1/qps
    assert bucket.when(100) == pytest.approx(0.1)
    assert bucket.when(101) == pytest.approx(0.2)
    assert bucket.when(102) == pytest.approx(0.3)
    clock.step(0.3)  # refills the 3 tokens owed
    assert bucket.when(103) == pytest.approx(0.1)
    clock.step(0.05)
    assert bucket.when(104) == pytest.approx(0.15)


def test_token_bucket_refills_only_up_to_burst() -> None:
    clock = FakeClock()
    bucket: BucketRateLimiter[int] = BucketRateLimiter(qps=2, burst=3, clock=clock)
    assert [bucket.when(i) for i in range(3)] == [0.0, 0.0, 0.0]
    clock.step(3600)  # an hour idle still leaves only `burst` tokens
    assert [bucket.when(i) for i in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.when(3) == pytest.approx(0.5)


def test_token_bucket_does_not_track_items() -> None:
    bucket: BucketRateLimiter[str] = BucketRateLimiter(qps=1, burst=1, clock=FakeClock())
    bucket.when("a")
    assert bucket.num_requeues("a") == 0
    bucket.forget("a")
    assert bucket.when("a") == pytest.approx(1.0)  # forget does not give the token back


def test_max_of_rate_limiter() -> None:
    clock = FakeClock()
    limiter: MaxOfRateLimiter[str] = MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.001, 1.0),
        BucketRateLimiter(qps=1, burst=3, clock=clock),
    )
    assert [limiter.when("one") for _ in range(3)] == [0.001, 0.002, 0.004]  # the bucket still has tokens
    assert limiter.when("one") == pytest.approx(1.0)  # now the empty bucket is the longest wait
    assert limiter.when("one") == pytest.approx(2.0)
    assert limiter.num_requeues("one") == 5  # the largest count: the exponential limiter's
    assert limiter.when("two") == pytest.approx(3.0)  # the bucket is shared by every key
    assert limiter.num_requeues("two") == 1
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.num_requeues("two") == 1
    clock.step(100)
    assert limiter.when("one") == 0.001


def test_default_controller_rate_limiter_is_max_of_backoff_and_bucket() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(WorkqueueConfig(), clock)
    assert limiter.when("a") == 0.005
    assert limiter.when("a") == 0.010
    for i in range(98):  # spend the rest of the burst of 100 on other keys
        limiter.when(i)
    assert limiter.when("b") == pytest.approx(0.1)  # 10 qps: the bucket beats b's 5 ms
    assert limiter.num_requeues("a") == 2
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0


def test_default_controller_rate_limiter_follows_the_config() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(WorkqueueConfig(base_delay_s=1, max_delay_s=3, qps=1, burst=10), clock)
    assert [limiter.when("k") for _ in range(4)] == [1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ItemExponentialFailureRateLimiter(-1, 1), "base_delay"),
        (lambda: ItemExponentialFailureRateLimiter(2, 1), "base_delay"),
        (lambda: BucketRateLimiter(0, 1), "qps"),
        (lambda: BucketRateLimiter(1, 0), "burst"),
        (lambda: MaxOfRateLimiter(), "at least one"),
    ],
)
def test_bad_settings_are_refused(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()
