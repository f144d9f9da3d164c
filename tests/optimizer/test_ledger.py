"""What the ledger charges: never less than nothing, whatever a price map or a provider says."""

from __future__ import annotations

import pytest

from optimizer import ledger
from optimizer.ledger import Budget, BudgetExceeded, Ledger
from optimizer.types import Usage


class NoStore:
    class ledger:
        @staticmethod
        def record(entry) -> None:
            pass


@pytest.mark.parametrize("reported", [-4.83, float("nan")])
def test_a_cost_reported_below_zero_or_as_nan_is_not_income(reported):
    books = Ledger(NoStore(), budget=Budget(usd=1.0))
    books.settle(None, "agent", "some/model", Usage(prompt_tokens=10, completion_tokens=10, cost_usd=reported))
    assert books.spent_usd == 0.0


def test_a_negative_price_in_the_price_map_does_not_buy_room_under_the_budget(monkeypatch):
    monkeypatch.setattr(ledger, "_catalog", lambda model: (-1.0, -1.0) if model == "cheap/model" else (1e-3, 1e-3))
    books = Ledger(NoStore(), budget=Budget(usd=1.0))
    books.reserve("agent", "cheap/model", 10_000, 1000)  # at a negative price this reservation was income
    with pytest.raises(BudgetExceeded):
        books.reserve("agent", "dear/model", 1000, 1000)
