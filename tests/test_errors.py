"""One error root: every exception class the project defines derives from DragonError, so a
caller (a tool, a reward, the CLI) catches one class for every kind of bad input."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from dragon_dsl import DragonError
from dragon_dsl.cli_kit import ExitCode, UsageError

PACKAGES = ("dragon_dsl", "codegen", "training")


def _project_exceptions() -> list[type]:
    found = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        modules = [package] + [importlib.import_module(m.name) for m in pkgutil.walk_packages(
            package.__path__, prefix=f"{name}.") if not m.name.endswith("__main__")]
        for module in modules:
            for _, obj in inspect.getmembers(module, inspect.isclass):
                if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                    found.append(obj)
    return found


def test_every_project_exception_derives_from_dragon_error():
    exceptions = _project_exceptions()
    names = {e.__name__ for e in exceptions}
    # The check sees the exceptions of every layer (so it can fail).
    assert {"DslSyntaxError", "WorkloadError", "BuildError", "BaselineUnavailable",
            "JobTimeout", "UsageError", "ProposeError", "TargetError"} <= names
    stray = [f"{e.__module__}.{e.__name__}" for e in exceptions if not issubclass(e, DragonError)]
    assert not stray, f"not under DragonError: {stray}"


def test_one_exit_code_table():
    assert [int(c) for c in ExitCode] == [0, 1, 2, 130]
    with pytest.raises(DragonError):
        raise UsageError("bad flag")
