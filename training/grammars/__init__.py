"""Sampling grammars, all derived from ``grammar/dragon.lark`` by rule name: the printer's
``layout`` written into the rules, the ``constraints`` of one workload (its blocks, loops, tile
factors), the ``statement`` grammar of the next line on a live schedule, and ``gbnf`` (the
sampling grammars as XGrammar and llama.cpp servers read them).  Imports ``prompts`` and below.
"""
