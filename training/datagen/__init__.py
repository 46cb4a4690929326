"""Datasets from MetaSchedule search: ``dragon datagen``.

- ``records.py``: ``Record`` (one measured candidate) and ``RecordStore`` (per-task files,
  committed atomically: a killed run resumes without losing or repeating a task);
- ``tasks.py``: ``Task`` (a workload to search on a target) and the presets;
- ``runner.py``: one task run with a long-lived ``Evaluator``;
- ``pool.py``: tasks on a local pool of processes, with time limits and retries;
  ``ray_pool.py``: the same over a Ray cluster;
- ``examples.py``: construction and refinement examples from records, splits by workload;
- ``dataset.py``: Hugging Face datasets on disk; ``card.py``: the dataset card and plots;
- ``from_database.py``: records from a MetaSchedule JSON database (``--from-database``);
- ``cost_model.py``: ``dragon cost-model``, MetaSchedule's cost model trained on the records,
  with how it ranks held-out workloads' candidates beside the untrained model.
"""
