"""The delay between two tries of a host whose Placement sync failed."""

from __future__ import annotations

import pytest

from acceld.conductor.placement_syncer import backoff_delay


def test_doubles_from_the_initial_delay_up_to_the_cap():
    ceilings = [backoff_delay(n, 1.0, 20.0, jitter=1.0) for n in range(1, 8)]
    assert ceilings == [1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0]


@pytest.mark.parametrize("failures", [1, 2, 5, 40, 10_000])
def test_jitter_takes_off_at_most_half(failures):
    ceiling = backoff_delay(failures, 1.0, 30.0, jitter=1.0)
    assert backoff_delay(failures, 1.0, 30.0, jitter=0.0) == ceiling / 2
    assert ceiling / 2 < backoff_delay(failures, 1.0, 30.0, jitter=0.5) < ceiling
    assert ceiling <= 30.0
