"""Evaluation: models side by side on held-out tasks, every attempt measured beside its
references (``runner``), MetaSchedule's search at equal budgets as a rival (``metaschedule``),
the field's figures and budget curves (``metrics``) and a report (``report``)."""

from training.evaluate.metrics import budget_curves, fast_p, geomean, head_to_head, summarize
from training.evaluate.runner import EvalConfig, EvalError, ResultUnwritten, run_eval
from training.evaluate.tasks import KINDS, EvalTask, TaskError, load_tasks

__all__ = ["KINDS", "EvalConfig", "EvalError", "EvalTask", "TaskError", "budget_curves",
           "ResultUnwritten", "fast_p", "geomean", "head_to_head", "load_tasks", "run_eval",
           "summarize"]
