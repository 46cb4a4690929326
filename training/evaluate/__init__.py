"""Evaluation: models side by side on held-out tasks, every attempt measured beside its
references (``runner``), the field's figures (``metrics``) and a report (``report``)."""

from .metrics import fast_p, geomean, head_to_head, summarize
from .runner import EvalConfig, EvalError, run_eval
from .tasks import KINDS, EvalTask, TaskError, load_tasks

__all__ = ["KINDS", "EvalConfig", "EvalError", "EvalTask", "TaskError", "fast_p", "geomean",
           "head_to_head", "load_tasks", "run_eval", "summarize"]
