"""Start estimates as users read them; when one moved; how right they were, by horizon."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.estimates import Settled, accuracy, ahead, moved, moved_by_factor, start_text

NOW = 1_000.0


@pytest.mark.parametrize(("seconds", "said"), [(5, "~5s"), (89, "~89s"), (240, "~4m"), (3569, "~59m"),
                                               (3571, "~1h"), (5400, "~1.5h"), (20 * 3600, "~20h"),
                                               (3 * 86400, "~3d")])
def test_a_wait_is_said_as_people_say_it(seconds, said):
    assert ahead(seconds) == said


def test_the_start_column():
    assert start_text(NOW + 10, None, None, False, NOW) == "now"
    assert start_text(NOW + 240, None, None, False, NOW) == "~4m"
    assert start_text(NOW + 7200, 41, None, False, NOW) == "~2h after job 41"
    said = start_text(None, None, "no worker can ever fit it: ...", True, NOW)
    assert said == "unknown: no worker can ever fit it: ..."
    assert start_text(None, None, None, True, NOW) == "unknown: it can never start"


def test_moves_within_the_noise_are_not_moves():
    assert not moved(NOW + 600, NOW + 620, NOW)  # under half a minute
    assert not moved(NOW + 36_000, NOW + 38_000, NOW)  # under a tenth of the time ahead
    assert moved(NOW + 600, NOW + 700, NOW)
    assert moved(None, NOW, NOW) and moved(NOW, None, NOW) and not moved(None, None, NOW)


def test_a_move_by_more_than_the_factor():
    assert moved_by_factor(NOW + 600, NOW + 1300, NOW) and moved_by_factor(NOW + 1300, NOW + 600, NOW)
    assert not moved_by_factor(NOW + 600, NOW + 1100, NOW)
    assert not moved_by_factor(NOW + 10, NOW + 50, NOW)  # both under a minute: no news
    assert moved_by_factor(NOW + 600, None, NOW)


def test_accuracy_by_horizon():
    records = [Settled(0, 30, 40), Settled(0, 50, 40), Settled(0, 500, 400), Settled(0, 300, 400),
               Settled(0, 400, 400)]
    short, medium = accuracy(records)
    assert (short.horizon, short.count, short.median_error) == ("under 1 min", 2, 10)
    assert (medium.horizon, medium.count, medium.median_error, medium.p90_error) == ("1-10 min", 3, 100, 100)
    assert medium.median_relative == pytest.approx(0.25)


@given(st.lists(st.tuples(st.floats(0, 1e5), st.floats(0, 1e5), st.floats(0, 1e5)), max_size=40))
def test_every_record_is_counted_once_and_p90_is_at_least_the_median(triples):
    records = [Settled(made, start, started) for made, start, started in triples]
    found = accuracy(records)
    assert sum(a.count for a in found) == len(records)
    assert all(a.p90_error >= a.median_error for a in found)
