"""What a model call spends: the phase's own cap (``CallLimit``), the run's budget and the
phase's cap together (``Spending``), one question's reservations (``HeldCall``) and a
provider batch's (``Holds``).

Each call reserves its estimate (the prompt's tokens plus the reply cap) before it goes out
and holds it until its usage replaces it, so calls in flight together, and a provider batch's
lines, fit under a token cap together, however long a model would answer."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from worker.llm.base import LLMReply


class Spender(Protocol):
    """The run's budget (``worker.runs.context.Budget``)."""

    max_calls: int | None
    max_tokens: int | None
    calls: int
    tokens: int

    def try_reserve_call(self, estimate: int = 0) -> bool: ...

    def hold(self, estimate: int) -> bool: ...

    def release(self, held: int) -> None: ...

    def charge(self, tokens_in: int, tokens_out: int = 0, held: int = 0,
               estimated: bool = False) -> None: ...

    def count_malformed(self, replies: int) -> None: ...

    def count_rejected(self, replies: int) -> None: ...

    def count_refused(self, replies: int) -> None: ...

    def count_cooling(self, questions: int) -> None: ...

    def withdraw(self, calls: int) -> None: ...

    def charge_billed(self, tokens_in: int, tokens_out: int, held: int = 0,
                      estimated: bool = False) -> None: ...

    def take_over(self, calls: int) -> None: ...


@dataclass
class CallLimit:
    """A phase's own cap on model calls and tokens (per run and scope), on top of the run's.
    Each call's estimate is held from its reservation until it is charged, so calls in flight
    together fit under the cap together."""

    max_calls: int | None
    max_tokens: int | None
    calls: int = 0
    tokens: int = 0
    held: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reserve(self, estimated_tokens: int = 0) -> bool:
        """One call, if it is left and its estimated tokens still fit."""
        with self._lock:
            if self.max_calls is not None and self.calls >= self.max_calls:
                return False
            if not self._fits(estimated_tokens):
                return False
            self.calls += 1
            self.held += estimated_tokens
            return True

    def hold(self, estimated_tokens: int) -> bool:
        """Another estimate for a call in flight (a retry), if it fits."""
        with self._lock:
            if not self._fits(estimated_tokens):
                return False
            self.held += estimated_tokens
            return True

    def resume(self, calls: int) -> None:
        """Calls an earlier execution of the phase sent (a provider batch's), counted again as
        this one collects them: they were sent, cap or not."""
        with self._lock:
            self.calls += calls

    def _fits(self, estimate: int) -> bool:
        return self.max_tokens is None or (
            self.tokens < self.max_tokens and self.tokens + self.held + estimate <= self.max_tokens)

    def release(self, held: int = 0, call: bool = True) -> None:
        """Give a reservation back: its held estimate, and the call when it never went out."""
        with self._lock:
            self.calls -= int(call)
            self.held = max(0, self.held - held)

    def charge(self, tokens: int, held: int = 0) -> None:
        with self._lock:
            self.tokens += tokens
            self.held = max(0, self.held - held)

    def calls_left(self) -> int | None:
        with self._lock:
            return None if self.max_calls is None else self.max_calls - self.calls



class Spending:
    """Reserve before each call and charge after each reply, on the run and the phase cap;
    a reservation holds the call's estimate until its charge replaces it."""

    def __init__(self, ctx: Any, limit: CallLimit | None) -> None:
        self.budget = ctx.budget
        self.limit = limit

    def reserve(self, estimated_tokens: int) -> bool:
        if self.limit is not None and not self.limit.reserve(estimated_tokens):
            return False
        if not self.budget.try_reserve_call(estimated_tokens):
            if self.limit is not None:
                self.limit.release(estimated_tokens)
            return False
        return True

    def hold(self, estimated_tokens: int) -> bool:
        """Another estimate for a call in flight (its retry), on both, or on neither."""
        if self.limit is not None and not self.limit.hold(estimated_tokens):
            return False
        if not self.budget.hold(estimated_tokens):
            if self.limit is not None:
                self.limit.release(estimated_tokens, call=False)
            return False
        return True

    def resume(self, calls: int) -> None:
        """Calls an earlier attempt sent and this one collects, on the phase's cap (the run's
        budget counted them: its calls start from what the run's steps record)."""
        if self.limit is not None:
            self.limit.resume(calls)

    def release(self, held: int) -> None:
        """A failed call's held estimate, nothing of it billed (the call stays spent)."""
        if self.limit is not None:
            self.limit.release(held, call=False)
        self.budget.release(held)

    def charge(self, tokens_in: int, tokens_out: int, held: int = 0,
               estimated: bool = False) -> None:
        if self.limit is not None:
            self.limit.charge(tokens_in + tokens_out, held)
        self.budget.charge(tokens_in, tokens_out, held, estimated)

    def withdraw(self, calls: int) -> None:
        self.budget.withdraw(calls)

    def charge_billed(self, tokens_in: int, tokens_out: int, held: int = 0,
                      estimated: bool = False) -> None:
        if self.limit is not None:
            self.limit.charge(tokens_in + tokens_out, held)
        self.budget.charge_billed(tokens_in, tokens_out, held, estimated)

    def take_over(self, calls: int) -> None:
        self.budget.take_over(calls)


def unmetered_spend(estimate: tuple[int, int], reply: LLMReply) -> tuple[int, int]:
    """What a reply without usable token counts is charged: the call's estimate (prompt, reply
    cap); with no cap, its text at 4 characters a token (before, 0: a server counting nothing
    answered at any length for free)."""
    prompt, cap = estimate
    return prompt, cap or (len(reply.raw) + 3) // 4


class HeldCall:
    """One question's spending across its calls (``ask``'s ``spend``): each call reserves the
    prompt's estimate plus the reply cap, its reply's usage replaces it (the estimate itself
    when the endpoint counts nothing), an attempt that may have been billed is charged its
    estimate and its retry holds another, a failed call gives its hold back."""

    def __init__(self, spending: Spending, prompt_tokens: int, cap: int) -> None:
        self.spending = spending
        self.prompt_tokens = prompt_tokens
        self.cap = cap
        self.held = 0

    @property
    def estimate(self) -> int:
        return self.prompt_tokens + self.cap

    def reserve(self) -> bool:
        if not self.spending.reserve(self.estimate):
            return False
        self.held = self.estimate
        return True

    def charge(self, reply: LLMReply) -> tuple[int, int]:
        """The reply's tokens (in, out) as charged."""
        spent = unmetered_spend((self.prompt_tokens, self.cap), reply) if reply.unmetered else (
            reply.tokens_in, reply.tokens_out)
        self.spending.charge(*spent, self.held, reply.unmetered)
        self.held = 0
        return spent

    def release(self) -> None:
        self.spending.release(self.held)
        self.held = 0

    def lost_attempt(self) -> bool:
        self.spending.charge_billed(self.prompt_tokens, self.cap, self.held, estimated=True)
        self.held = self.estimate if self.spending.hold(self.estimate) else 0
        return self.held > 0 or self.estimate == 0

    def abandon(self) -> None:
        """The call was stopped while in flight (a time limit): charged its estimate."""
        self.spending.charge_billed(self.prompt_tokens, self.cap, self.held, estimated=True)
        self.held = 0


class BatchSpending(Protocol):
    """What a batch reserves and charges through (``Spending``, or a test's own)."""

    def reserve(self, estimated_tokens: int) -> bool: ...

    def hold(self, estimated_tokens: int) -> bool: ...

    def resume(self, calls: int) -> None: ...

    def release(self, held: int) -> None: ...

    def charge(self, tokens_in: int, tokens_out: int, held: int = 0,
               estimated: bool = False) -> None: ...


class Holds:
    """The estimates this phase's submit reserved, by custom id (and, before it submits more,
    those of the questions an earlier attempt submitted that are still in flight), each given
    back or replaced by its reply's charge."""

    def __init__(self, spending: BatchSpending, estimates: dict[str, tuple[int, int]]) -> None:
        self.spending = spending
        self.estimates = estimates
        self.held: dict[str, int] = {}

    def reserve(self, key: str) -> bool:
        estimate = sum(self.estimates[key])
        if not self.spending.reserve(estimate):
            return False
        self.held[key] = estimate
        return True

    def hold_again(self, keys: set[str]) -> bool:
        """The estimates of questions an earlier attempt submitted that are still in flight,
        held again, and their calls counted again on the phase's cap (the run's budget starts
        from the calls its steps record); False when the caps have no room for them all."""
        held = True
        self.spending.resume(len(keys))
        for key in sorted(keys):
            estimate = sum(self.estimates[key])
            if self.spending.hold(estimate):
                self.held[key] = estimate
            else:
                held = False
        return held

    def charge(self, key: str, reply: LLMReply) -> None:
        """The reply's usage, or the question's estimate when the line has none."""
        spent = unmetered_spend(self.estimates[key], reply) if reply.unmetered else (
            reply.tokens_in, reply.tokens_out)
        self.spending.charge(*spent, self.held.pop(key, 0), reply.unmetered)

    def release_all(self) -> None:
        """What no reply replaced (unanswered, failed to submit, still pending): given back."""
        for held in self.held.values():
            self.spending.release(held)
        self.held.clear()
