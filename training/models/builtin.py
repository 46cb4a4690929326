"""The model ``dragon optimize`` and ``dragon sample`` use when no ``--model`` is given: a small
checkpoint trained by the project's own ``tiny`` pipeline (search data, SFT, RL), shipped in
the package under ``training/models/dragon-tiny/``.  ``make default-model`` trains it again
from nothing and replaces it; its ``README.md`` says how it was made and what it measured.

It is a demonstration model (about a million parameters, trained on 30 small llvm kernels):
real use passes a model of one's own with ``--model``.
"""

from __future__ import annotations

from pathlib import Path

from dragon_dsl.errors import DragonError

__all__ = ["DEFAULT_COST_MODEL", "DEFAULT_MODEL", "KEPT_CORPUS", "DefaultModelMissing",
           "default_model_dir", "load_cost_model"]

DEFAULT_MODEL = Path(__file__).resolve().parent / "dragon-tiny"
# MetaSchedule's XGBoost cost model trained on the kept corpus' records (`make cost-model`):
# llvm on this project's machine, so it is used for llvm targets only.
DEFAULT_COST_MODEL = DEFAULT_MODEL / "cost_model.tar"
# The kept llvm corpus (corpus/README.md) in a source checkout: where scripts are carried over
# from (training.optimize.transfer); an installed package has none.
KEPT_CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "llvm"


class DefaultModelMissing(DragonError):
    """The built-in model's files are not where the package keeps them."""


def default_model_dir() -> Path:
    """The built-in model's directory; DefaultModelMissing when its files are absent."""
    needed = ("config.json", "model.safetensors", "tokenizer.json")
    missing = [name for name in needed if not (DEFAULT_MODEL / name).is_file()]
    if missing:
        raise DefaultModelMissing(
            f"the built-in model is incomplete ({', '.join(missing)} missing in "
            f"{DEFAULT_MODEL}): run `make default-model`, or pass --model DIR")
    return DEFAULT_MODEL


def load_cost_model(choice: str, target_kind: str):
    """The cost model ``choice`` names: ``"auto"`` (the built-in one for an llvm target when
    it is there, else none), ``"none"``, or a file saved by ``dragon cost-model``.  A file
    that does not load raises ``codegen.search.cost_model.CostModelError`` naming it.  It
    retrains on every core at each update, as MetaSchedule's own model in ``tune_tir`` does
    (nothing is timed while it trains)."""
    if choice == "none":
        return None
    if choice == "auto":
        if target_kind != "llvm" or not DEFAULT_COST_MODEL.is_file():
            return None
        choice = str(DEFAULT_COST_MODEL)
    from codegen.search.cost_model import CostModel

    return CostModel.load(choice, threads=0)

