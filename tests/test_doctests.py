"""The examples in the docstrings run, as written (``python -m doctest`` on every module of the
three packages that has one)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import codegen
import dragon_dsl
import training


def _modules() -> list[str]:
    names = []
    for package in (dragon_dsl, codegen, training):
        names.append(package.__name__)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return sorted(names)


def _has_examples(name: str) -> bool:
    try:
        return any(t.examples for t in doctest.DocTestFinder().find(importlib.import_module(name)))
    except ValueError:  # a docstring doctest cannot parse: the test says where
        return True


# Examples that build design spaces or train a tokenizer (tens of seconds): the slow pass.
SLOW = {"training.grammars.constraints", "training.models.tokenizer"}
MODULES = [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name
           for name in _modules() if _has_examples(name)]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
