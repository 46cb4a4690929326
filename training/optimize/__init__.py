"""A model put to work on kernels: ``propose`` (prompt, sample under a grammar, measure: ``dragon
sample --check``), ``budget`` (the one account of the measurements an optimization may spend:
``StartCost``, ``Account``, ``split_budget``), ``transfer`` (scripts carried over from a
corpus: the nearest workloads' fastest, tile factors refitted), ``kernel`` (``optimize``:
rounds of samples and refinements for one kernel, ``dragon optimize KERNEL``), ``model``
(``optimize_model``: every task of a Relax model, a MetaSchedule database, end to end against
MetaSchedule: ``dragon optimize MODEL``) and ``demo`` (``dragon demo``).  Imports ``sampling``
and below (a corpus' records are taken as given, never read here).
"""
