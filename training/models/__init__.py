"""Models: BPE ``tokenizer``s and tiny models built from configs (tests, ``dragon init-model``),
and the ``builtin`` model, ``dragon-tiny`` (the folder beside this file), that ``dragon sample``
and ``dragon optimize`` use without ``--model``.  Imports ``prompts`` and below.
"""
