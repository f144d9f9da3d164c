"""optimizer.nightly.spending: a night's decisions share night_alpha, so any number of them keeps the
chance of a false accept in the night at most night_alpha."""

import pytest

from optimizer.nightly.spending import decision_alpha, spent


def test_the_first_decision_gets_half_the_night_and_each_later_one_its_share():
    assert [decision_alpha(0.05, 0.10, j) for j in (1, 2, 3, 6)] == pytest.approx([0.05, 0.10 / 6, 0.10 / 12, 0.10 / 42])


def test_no_decision_is_tested_above_the_per_decision_alpha():
    assert decision_alpha(0.01, 0.10, 1) == 0.01
    assert decision_alpha(0.01, 0.10, 3) == pytest.approx(0.10 / 12)


def test_any_number_of_decisions_spends_at_most_night_alpha():
    assert spent(0.05, 0.10, 12) == pytest.approx(0.10 * 12 / 13)
    assert spent(0.05, 0.10, 10_000) < 0.10
    assert spent(0.05, 0.10, 0) == 0


def test_decisions_are_numbered_from_one():
    with pytest.raises(ValueError, match="from 1"):
        decision_alpha(0.05, 0.10, 0)
