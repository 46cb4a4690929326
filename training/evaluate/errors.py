"""The evaluation's error, shared by the runner and the ways a model is served."""

from __future__ import annotations

from dragon_dsl.errors import DragonError

__all__ = ["EvalError"]


class EvalError(DragonError):
    """The evaluation cannot run as asked; the message says what to change."""
