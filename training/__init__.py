"""Training: everything that turns MetaSchedule's search into a model that writes Dragon scripts,
and that puts such a model to work.  Its wings, lowest first (a wing imports only the ones
before it, and ``codegen``/``dragon_dsl``; ``tests/test_layers.py`` checks it):

- ``prompts``: the compact kernel description and the versioned prompts of the two tasks;
- ``grammars``: the sampling grammars derived from ``grammar/dragon.lark`` (layout, workload
  constraints, the next statement on a live schedule, GBNF for servers);
- ``models``: tokenizers, tiny models for tests, the built-in model ``dragon-tiny``;
- ``sampling``: grammar-constrained and schedule-aware decoding, GRPO rollouts;
- ``optimize``: a model put to work: ``propose``, ``optimize`` (one kernel), ``optimize_model``
  (a whole Relax model), the budget account, ``dragon demo``;
- ``datagen``: datasets from MetaSchedule search (``dragon datagen``);
- ``train``: ``dragon sft`` and ``dragon rl`` (TRL), the RL reward, run directories;
- ``evaluate``: ``dragon eval``, models side by side on held-out tasks;
- ``cli``: the ``dragon`` subcommands of this package.
"""
