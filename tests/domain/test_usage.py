"""``step_usage``: one phase step's calls and tokens from its views of the same calls."""

from __future__ import annotations

import pytest

from worker.domain.usage import StepUsage, StepViews, step_usage


@pytest.mark.parametrize(("views", "expected"), [
    # A batch submission: the parent's usage only, no child names a model yet.
    (StepViews(calls_started=2, usage_calls=2), StepUsage(2, 0, 0, 0)),
    # A failed phase: its finish recorded usage and tokens by direction, no child committed.
    (StepViews(tokens_in=25, tokens_out=5, calls_started=1, usage_calls=1, usage_tokens=30),
     StepUsage(1, 30, 25, 5)),
    # A call both the parent and its child record: once, not twice.
    (StepViews(kid_calls=1, kid_tokens_in=8, kid_tokens_out=2, tokens_in=8, tokens_out=2,
               calls_started=1, usage_calls=1, usage_tokens=10), StepUsage(1, 10, 8, 2)),
    # A killed attempt: a child committed after its last beat; a beat recorded before the
    # split was kept knew the sum only.
    (StepViews(kid_calls=3, kid_tokens_in=30, kid_tokens_out=6, usage_calls=2,
               usage_tokens=50), StepUsage(3, 50, 30, 6)),
    # A killed attempt whose last beat split its tokens: in and out add up to the total.
    (StepViews(kid_calls=1, kid_tokens_in=30, kid_tokens_out=6, usage_calls=2,
               usage_tokens=50, usage_tokens_in=40, usage_tokens_out=10),
     StepUsage(2, 50, 40, 10)),
    # ... and a child committed after that beat: the most of each direction.
    (StepViews(kid_calls=3, kid_tokens_in=45, kid_tokens_out=8, usage_calls=2,
               usage_tokens=50, usage_tokens_in=40, usage_tokens_out=10),
     StepUsage(3, 55, 45, 10)),
    # A step that settled a batch an interrupted attempt's step handed over (its one call,
    # answered here: its child names the model) and asked one more: the handed-over call is
    # the interrupted step's, its tokens this step's.
    (StepViews(kid_calls=2, kid_tokens_in=20, kid_tokens_out=4, tokens_in=20, tokens_out=4,
               calls_started=2, usage_calls=1, usage_tokens=24, taken_over=1),
     StepUsage(1, 24, 20, 4)),
    # ... only that call, expired (no child names a model): no call of its own.
    (StepViews(calls_started=1, taken_over=1), StepUsage()),
    # Nothing asked.
    (StepViews(), StepUsage()),
])
def test_the_most_of_a_steps_views_never_their_sum(views: StepViews,
                                                   expected: StepUsage) -> None:
    """Each view is a view of the same calls, so the step spent the most any of them says."""
    assert step_usage(views) == expected


def test_views_of_a_parent_step_row() -> None:
    """``StepViews.of`` reads the output's usage (its tokens by direction where recorded) and
    started calls, None columns as 0."""
    views = StepViews.of((1, 4, 1), None, 3, {"model_calls_started": 2,
                                             "usage": {"calls": 2, "tokens": 9}})
    assert views == StepViews(1, 4, 1, 0, 3, 2, 2, 9)
    views = StepViews.of((0, 0, 0), None, None, {"usage": {"calls": 2, "tokens": 9,
                                                           "tokens_in": 7, "tokens_out": 2}})
    assert views == StepViews(0, 0, 0, 0, 0, 0, 2, 9, 7, 2)
    views = StepViews.of((1, 0, 0), None, None, {"model_calls_started": 1,
                                                 "model_calls_taken_over": 1})
    assert views.taken_over == 1 and step_usage(views) == StepUsage()
