"""The cost ledger: every model call (agent, judge, patcher) with its tokens and cost, and budgets.

While a ledger is active (`charging`), each real model call (cache hits cost nothing and are not
recorded) first *reserves* its worst case: the prompt's estimated tokens plus the call's
`max_tokens` (or a default) at the model's price. When the spent amount plus everything reserved
by calls in flight plus this reservation would pass a budget, the call is refused with
`BudgetExceeded` before anything is sent. After the call the reservation is replaced by the
actual tokens and cost, and one row goes to the store (`ledger` table) with the run, iteration
and nightly job it belongs to. So a budget is never exceeded by more than the amount by which
calls in flight exceed their own worst-case estimates.

Prices: `model_prices` in the settings (USD per million input and output tokens; also how a
self-hosted model is given a price), else litellm's offline cost map (installed by the model layer,
see `price_catalog`), else 0; a name of the models file without a `model_prices` entry is reserved
at the price of its dearest deployment (`deployment_catalog`). A cost that the provider reports
is used as is.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterator

from optimizer.errors import EXIT_FAILED, OptimizerError

if TYPE_CHECKING:
    from optimizer.types import Usage  # annotations only: the store, so `optimizer history`, imports this module

DEFAULT_COMPLETION_TOKENS = 1024
"""Worst-case answer length assumed for a call that sets no max_tokens."""


class BudgetExceeded(OptimizerError):
    """A model call would pass the job's budget; the job stops cleanly."""

    exit_code = EXIT_FAILED


@dataclass(frozen=True)
class Budget:
    usd: float | None = None
    tokens: int | None = None


@dataclass
class Reservation:
    usd: float
    tokens: int


@dataclass(frozen=True)
class LedgerEntry:
    """One row of the ledger: a settled model call, filed under the run, iteration and nightly
    job it was made for."""

    at: datetime
    role: str
    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    run_id: str | None = None
    iteration_id: str | None = None
    nightly_id: str | None = None


@dataclass
class Ledger:
    store: Any
    budget: Budget = field(default_factory=Budget)
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)
    scope: dict[str, str | None] = field(default_factory=dict)
    """Ids every row is filed under: `nightly_id`, `iteration_id` (updated as the job goes)."""
    spent_usd: float = 0.0
    spent_tokens: int = 0
    _reserved_usd: float = 0.0
    _reserved_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def price(self, model: str) -> tuple[float, float]:
        """USD per input token and per output token; (0, 0) for a model without a price."""
        deployments = [] if model in self.prices else _deployments(model)
        if deployments:  # a name served by several deployments costs at most its dearest one
            return max(map(self._own_price, deployments), key=sum)
        return self._own_price(model)

    def _own_price(self, model: str) -> tuple[float, float]:
        """A model string's price, never looked up in the models file: a pool may be named like
        its deployments' model (`model_name: openai/x`, `model: openai/x`), and would recurse."""
        if model in self.prices:
            per_million = self.prices[model]
            return _charged(per_million[0] / 1e6), _charged(per_million[1] / 1e6)
        price_in, price_out = _catalog(model) or (0.0, 0.0)
        return _charged(price_in), _charged(price_out)

    def has_price(self, model: str) -> bool:
        """Whether `model` has a price: in `model_prices` or in litellm's cost map (which enters
        the in-process and embedded models at zero); a routed name when all its deployments have."""
        deployments = _deployments(model)
        if deployments and model not in self.prices:
            return all(name in self.prices or _catalog(name) is not None for name in deployments)
        return model in self.prices or _catalog(model) is not None

    def reserve(self, role: str, model: str, prompt_tokens: int, max_tokens: int | None) -> Reservation:
        completion = max_tokens or DEFAULT_COMPLETION_TOKENS
        price_in, price_out = self.price(model)
        reservation = Reservation(usd=prompt_tokens * price_in + completion * price_out,
                                  tokens=prompt_tokens + completion)
        with self._lock:
            if self.budget.usd is not None and \
                    self.spent_usd + self._reserved_usd + reservation.usd > self.budget.usd:
                raise BudgetExceeded(f"a model call ({role}, {model}, up to ${reservation.usd:.4f}) would pass the "
                                     f"budget of ${self.budget.usd:.4f} (spent ${self.spent_usd:.4f})",
                                     fix="raise --budget-usd or lower the trial counts")
            if self.budget.tokens is not None and \
                    self.spent_tokens + self._reserved_tokens + reservation.tokens > self.budget.tokens:
                raise BudgetExceeded(f"a model call ({role}, {model}, up to {reservation.tokens:,} tokens) would pass "
                                     f"the budget of {self.budget.tokens:,} tokens (spent {self.spent_tokens:,})",
                                     fix="raise --budget-tokens or lower the trial counts")
            self._reserved_usd += reservation.usd
            self._reserved_tokens += reservation.tokens
        return reservation

    def settle(self, reservation: Reservation | None, role: str, model: str, usage: Usage,
               run_id: str | None = None) -> float:
        """Replace the reservation by what the call used, and record it; returns the call's cost."""
        cost = _charged(usage.cost_usd)
        if not cost and model in self.prices:
            price_in, price_out = self.price(model)
            cost = usage.prompt_tokens * price_in + usage.completion_tokens * price_out
        with self._lock:
            if reservation is not None:
                self._reserved_usd -= reservation.usd
                self._reserved_tokens -= reservation.tokens
            self.spent_usd += cost
            self.spent_tokens += usage.total_tokens
        self.store.ledger.record(LedgerEntry(
            at=datetime.now(timezone.utc), role=role, model=model, run_id=run_id,
            iteration_id=self.scope.get("iteration_id"), nightly_id=self.scope.get("nightly_id"),
            calls=max(usage.calls, 1), prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens, cost_usd=cost))
        return cost

    def release(self, reservation: Reservation) -> None:
        """A call that failed before it was answered uses nothing."""
        with self._lock:
            self._reserved_usd -= reservation.usd
            self._reserved_tokens -= reservation.tokens


def _charged(amount: float | None) -> float:
    """An amount as charged: a negative or NaN one (a price map's or a provider's mistake) as 0,
    never as income that would let spending pass a budget. Settings' prices are checked before."""
    return amount if amount is not None and amount > 0 else 0.0


def _no_catalog(model: str) -> tuple[float, float] | None:
    return None


_catalog: Callable[[str], tuple[float, float] | None] = _no_catalog


def price_catalog(lookup: Callable[[str], tuple[float, float] | None]) -> None:
    """Install where a model without a `model_prices` entry finds its price per input and
    output token (None: it has none). The model layer installs litellm's cost map on import;
    the ledger sits below it and imports nothing of it."""
    global _catalog
    _catalog = lookup


def _no_deployments(model: str) -> list[str]:
    return []


_deployments: Callable[[str], list[str]] = _no_deployments


def deployment_catalog(lookup: Callable[[str], list[str]]) -> None:
    """Install where a model name finds the model strings of the deployments behind it (a name of
    the models file, `optimizer.models.routing`; [] for any other): its call is reserved at the
    price of the dearest of them, before anyone knows which one will answer."""
    global _deployments
    _deployments = lookup


_active: Ledger | None = None
_active_lock = threading.Lock()


def current() -> Ledger | None:
    return _active


@contextmanager
def charging(ledger: Ledger) -> Iterator[Ledger]:
    """Make `ledger` the process's ledger (model calls from every thread are charged to it)."""
    global _active
    with _active_lock:
        previous, _active = _active, ledger
    try:
        yield ledger
    finally:
        with _active_lock:
            _active = previous


@dataclass
class Charge:
    """One model call's entry in the ledger, filled in by the caller."""

    usage: Usage | None = None
    """What the call used; set it once known. Left None, the call is taken to have used nothing."""
    cost_usd: float | None = None
    """The call's cost as recorded (after `charged` ends; None without a ledger)."""


@contextmanager
def charged(role: str, model: str, prompt_tokens: int, max_tokens: int | None, *,
            run_id: str | None = None) -> Iterator[Charge]:
    """The one way a model call is charged: reserve its worst case before it is sent (raising
    `BudgetExceeded` instead of sending it), then settle what it used, or release the
    reservation when it used nothing. Without an active ledger it charges nothing."""
    charge = Charge()
    ledger = current()
    if ledger is None:
        yield charge
        return
    reservation = ledger.reserve(role, model, prompt_tokens, max_tokens)
    try:
        yield charge
    finally:
        if charge.usage is None:
            ledger.release(reservation)
        else:
            charge.cost_usd = ledger.settle(reservation, role, model, charge.usage, run_id=run_id)


def estimate_tokens(*texts: Any) -> int:
    """Prompt tokens estimated as characters / 4 (an upper-side guess for English text)."""
    return sum(len(str(text)) for text in texts) // 4 + 1
