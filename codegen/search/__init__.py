"""Search: MetaSchedule's design spaces and traces sampled from them, and the baseline
schedules (unscheduled, DLight's rules, MetaSchedule's tuned best) scripts are compared with.

- ``space.py``: ``SearchSpace``, ``sample_traces`` (every trace in the project comes from here);
- ``tune.py``: ``search``, MetaSchedule's evolutionary search with every candidate measured
  by an ``Evaluator`` (the source of ``dragon datagen``'s records);
- ``mutate.py``: ``mutants``, MetaSchedule's mutators applied to measured scripts (the fastest
  so far), for ``optimize``'s rounds that exploit them (``OptimizeConfig.local``);
- ``rival.py``: ``rival_search``, that search at an equal budget, every attempt kept and the best
  derived (what ``dragon demo``, ``dragon optimize MODEL`` and ``dragon eval`` compare with);
- ``baselines.py``: ``unscheduled``, ``rule_based``, ``metaschedule_best`` and ``baselines``
  (all three by name; reach it as ``codegen.search.baselines.baselines``);
- ``cost_model.py``: ``CostModel``, MetaSchedule's ``XGBModel`` trained on measured search
  (``dragon cost-model``), its file and its online updates; ``ranking.py``: how well scores
  rank measured candidates (Kendall tau, top-k recall, best of the top k).

May import ``dragon_dsl``, ``codegen.targets``, ``codegen.workloads`` and
``codegen.measure``; never ``training``.
"""

from .baselines import BaselineUnavailable, BestResult, metaschedule_best, rule_based, unscheduled
from .cost_model import CostModel, CostModelError
from .rival import Attempt, RivalResult, rival_search
from .space import SearchSpace, sample_traces, search_space
from .tune import Round, SearchConfig, search

__all__ = [
    "Attempt",
    "BaselineUnavailable",
    "BestResult",
    "CostModel",
    "CostModelError",
    "RivalResult",
    "Round",
    "SearchConfig",
    "SearchSpace",
    "metaschedule_best",
    "rival_search",
    "rule_based",
    "sample_traces",
    "search",
    "search_space",
    "unscheduled",
]
