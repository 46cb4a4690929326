"""A cost model that has already seen search: MetaSchedule's own ``XGBModel`` (its
per-store-feature extractor, its pack-sum XGBoost objective, its file format), trained once on
the measured candidates of earlier searches instead of starting from random scores.

MetaSchedule's model starts every tuning run empty: until it holds ``num_warmup_samples`` (100)
measurements its ``predict`` is uniform noise, so a 64-trial search never ranks by a model at
all.  ``CostModel.train`` fills the same model with ``dragon datagen``'s records, every failed
candidate included (at MetaSchedule's 1e10 s), grouped by workload and normalized within each
group by its fastest kernel exactly as ``XGBModel.update`` does, and trains its booster once.
The result is an ordinary ``XGBModel`` (``CostModel.model``): ``codegen.search.tune.search``
can hand it to MetaSchedule as its cost model, and ``XGBModel.save``/``load`` read and write it.

Two settings differ from MetaSchedule's defaults, and only for a trained model, because a
trained model must keep learning from a short run: ``num_warmup_samples=0`` (a model with a
booster predicts with it), and ``adaptive_training=False`` (``XGBModel.update`` otherwise skips
retraining until its data grows by 20%, which a run of 64 trials on top of thousands of kept
measurements never does, so the run's own results would be ignored).  ``CostModel.untrained()``
keeps MetaSchedule's defaults: the model a search starts from today.

**What a saved model keeps.**  XGBoost cannot add a few measurements to a trained booster; each
``update`` retrains from scratch on the model's ``data`` (every feature vector it holds).  A file
holding only the booster would forget everything it learned at the first update of a run, so
the file keeps training data too.  To keep the file small and each online retraining quick, a
trained model keeps at most ``keep`` candidates (``DEFAULT_KEEP``), spread evenly over the
workloads, the fastest of each always among them (the group's normalization depends on it) and
the others chosen evenly by rank; the booster itself is trained on all of them.  A trimmed
group keeps no failure: MetaSchedule's pack-sum objective weighs each candidate by its label
(its group's fastest latency over its own), about 1e-13 for a failure at 1e10 s, so failures
teach ``XGBModel`` next to nothing, here as in MetaSchedule's own search.

A loaded file is MetaSchedule's own: ``np.load(allow_pickle=True)`` inside ``XGBModel.load``
runs what the file holds, so load only files you trust, as with MetaSchedule.
"""

from __future__ import annotations

import contextlib
import math
import os
import tarfile
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dragon_dsl.errors import DragonError

from ..targets import as_module, as_target, import_tensor_intrinsics, tvm_message
from .tune import FAILED_RUN_SECS

__all__ = ["DEFAULT_KEEP", "EXTRACTOR", "Applied", "CostModel", "CostModelError", "Featurized",
           "Group", "apply_scripts", "featurize"]

# MetaSchedule's feature extractor (XGBModel's default): 164 numbers per stored buffer.
EXTRACTOR = "per-store-feature"
# Candidates a trained model keeps for online retraining (a few hundred bytes each, gzipped).
DEFAULT_KEEP = 2000


class CostModelError(DragonError):
    """A cost-model file that cannot be read or written; the message names the file."""


@dataclass(frozen=True)
class Group:
    """One workload's measured candidates on one target: ``(script, latency_s)`` pairs, the
    latency ``None`` for a candidate that failed (did not apply, build, verify or finish)."""

    workload: Any           # a Workload, IRModule or PrimFunc
    target: Any             # a Target, tag, JSON dict or short name
    candidates: Sequence[tuple[str | None, float | None]]


@dataclass
class Applied:
    """Scripts applied to a workload, ready for MetaSchedule's feature extractor: the context
    (workload and target) and one ``MeasureCandidate`` per script that applies."""

    context: Any            # ms.TuneContext(mod=..., target=...)
    candidates: list[Any]   # ms.MeasureCandidate, for the scripts that apply
    indices: list[int]      # their positions among the scripts
    total: int              # scripts given

    @property
    def skipped(self) -> int:
        return self.total - len(self.indices)


def apply_scripts(workload: Any, target: Any, scripts: Sequence[str | None]) -> Applied:
    """Each script replayed on the workload (``dragon_dsl.to_schedule``); a script that is
    ``None`` or no longer applies is left out (``Applied.skipped``)."""
    from tvm.s_tir import meta_schedule as ms

    import dragon_dsl

    import_tensor_intrinsics()  # the fast way, before TuneContext imports them the slow way
    mod = as_module(workload)
    tgt = as_target(target)
    context = ms.TuneContext(mod=mod, target=tgt)
    args_info = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    candidates, indices = [], []
    for index, script in enumerate(scripts):
        if script is None:
            continue
        try:
            sch = dragon_dsl.to_schedule(script, workload=workload, target=tgt)
        except Exception:  # noqa: BLE001  DragonError, or TVM's own error types
            continue
        candidates.append(ms.MeasureCandidate(sch, args_info))
        indices.append(index)
    return Applied(context, candidates, indices, len(scripts))


@dataclass
class Featurized:
    """A group as MetaSchedule's model sees it: one feature matrix (a row per stored buffer) and
    one cost (seconds; ``FAILED_RUN_SECS`` for a failure) per candidate kept."""

    key: str                    # XGBModel's group key: shash2hex of the workload's module
    features: list[np.ndarray]
    costs: np.ndarray
    indices: list[int]          # the kept candidates' positions in the group
    total: int                  # candidates in the group

    @property
    def skipped(self) -> int:
        """Candidates without a script, that no longer apply, or without features."""
        return self.total - len(self.indices)

    @property
    def correct(self) -> int:
        return int(np.count_nonzero(self.costs < FAILED_RUN_SECS))

    def latencies(self) -> list[float | None]:
        """The kept candidates' latencies, ``None`` for failures (``codegen.search.ranking``)."""
        return [float(c) if c < FAILED_RUN_SECS else None for c in self.costs]


def _features(extractor: Any, applied: Applied) -> list[np.ndarray]:
    if not applied.candidates:
        return []
    return [x.numpy().astype("float32")
            for x in extractor.extract_from(applied.context, applied.candidates)]


def featurize(group: Group, extractor: Any = None) -> Featurized:
    """A group's candidates as MetaSchedule's feature vectors and costs, as
    ``XGBModel.update`` makes them (a failure costs ``FAILED_RUN_SECS``; a candidate without
    features is dropped); candidates whose script is missing or no longer applies are
    skipped and counted."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import shash2hex

    extractor = extractor or ms.feature_extractor.FeatureExtractor.create(EXTRACTOR)
    applied = apply_scripts(group.workload, group.target, [s for s, _ in group.candidates])
    features = _features(extractor, applied)
    kept = [(i, f) for i, f in zip(applied.indices, features, strict=True) if len(f)]
    costs = [_cost(group.candidates[i][1]) for i, _ in kept]
    return Featurized(shash2hex(applied.context.mod), [f for _, f in kept],
                      np.array(costs, dtype="float32"), [i for i, _ in kept],
                      len(group.candidates))


def _cost(latency: float | None) -> float:
    if latency is None or not math.isfinite(latency) or latency <= 0:
        return FAILED_RUN_SECS
    return float(latency)


def _evenly(costs: np.ndarray, count: int) -> np.ndarray:
    """``count`` positions of correct candidates' ``costs``, the cheapest first, the rest
    evenly spread by rank (a failure's label, and so its weight, is about 1e-13: see the module
    docstring)."""
    order = np.argsort(costs, kind="stable")
    order = order[costs[order] < FAILED_RUN_SECS]
    if count >= len(order):
        return order
    return order[np.unique(np.round(np.linspace(0, len(order) - 1, count)).astype(int))]


@contextlib.contextmanager
def _quiet_xgboost() -> Iterator[None]:
    """Without XGBoost's warning that ``model.bin``, MetaSchedule's name, is no format name
    (it saves and reads UBJSON, as intended)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(UBJSON|Unknown file format).*",
                                category=UserWarning)
        yield


class CostModel:
    """MetaSchedule's ``XGBModel``, trained on measured search and ready to rank scripts.

    >>> model = CostModel.untrained()
    >>> model.trained, type(model.model).__name__
    (False, 'XGBModel')
    """

    def __init__(self, model: Any) -> None:
        self.model = model   # the ms.cost_model.XGBModel, for MetaSchedule's search

    # ---- making one ---------------------------------------------------------------------

    @classmethod
    def untrained(cls, *, threads: int = 1) -> CostModel:
        """MetaSchedule's model as a search creates it (random scores for its first 100
        measurements, adaptive retraining): the baseline a trained model is compared with."""
        from tvm.s_tir import meta_schedule as ms

        return cls(ms.cost_model.XGBModel(extractor=EXTRACTOR, num_tuning_cores=threads))

    @classmethod
    def _learning(cls, threads: int) -> CostModel:
        from tvm.s_tir import meta_schedule as ms

        return cls(ms.cost_model.XGBModel(extractor=EXTRACTOR,
                                          num_tuning_cores=threads or os.cpu_count() or 1,
                                          num_warmup_samples=0, adaptive_training=False))

    @classmethod
    def train(cls, groups: Sequence[Featurized], *, keep: int | None = DEFAULT_KEEP,
              threads: int = 1) -> CostModel:
        """A model trained once on ``groups`` (from ``featurize``): groups of one workload are
        merged, as ``XGBModel.update`` merges them, and groups without a correct candidate are
        left out (normalized by their own fastest, a failure, every failure would look
        optimal).  It keeps ``keep`` candidates (None: all) for online retraining; see the
        module's docstring."""
        from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup

        merged: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        for group in groups:
            if group.correct:
                features, costs = merged.setdefault(group.key, ([], []))
                features.extend(group.features)
                costs.append(group.costs)
        if not merged:
            raise ValueError("Expected at least one group with a correct candidate but got "
                             f"{len(groups)} group(s) without one")
        full = {key: FeatureGroup(key, features, np.concatenate(costs))
                for key, (features, costs) in merged.items()}
        result = cls._learning(threads)
        xgb = result.model
        xgb.data = full
        xgb.data_size = sum(len(g.costs) for g in full.values())
        result._retrain()
        if keep is not None and keep < xgb.data_size:
            per_group = max(2, keep // len(full))
            for key, g in full.items():
                picked = _evenly(g.costs, per_group)
                full[key] = FeatureGroup(key, [g.features[i] for i in picked], g.costs[picked])
            xgb.data_size = sum(len(g.costs) for g in full.values())
        xgb.last_train_size = xgb.data_size
        return result

    def _retrain(self) -> None:
        """Train the booster on all the model's data, as step 5 of ``XGBModel.update`` does."""
        xgb = self.model
        with np.errstate(divide="ignore", invalid="ignore"):
            features = [f for g in xgb.data.values() for f in g.features]
            ratios = np.concatenate([
                np.divide(g.min_cost, g.costs, out=np.zeros_like(g.costs), where=g.costs != 0)
                for g in xgb.data.values()])
        xgb._train(xs=features, ys=ratios)

    # ---- files --------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, threads: int = 1) -> CostModel:
        """A trained model saved by ``save`` (``XGBModel.save``'s tar file); a CostModelError
        naming the file when it is missing or not such a file.  ``threads`` retrain it at each
        ``update`` (XGBoost's nthread; 0: every core, as ``tune_tir``'s model)."""
        path = os.fspath(path)
        try:
            with tarfile.open(path) as tar:
                names = set(tar.getnames())
        except FileNotFoundError:
            raise CostModelError(f"{path}: no such file") from None
        except (tarfile.TarError, EOFError):
            raise CostModelError(f"{path}: not a cost model (not a tar file, which "
                                 "XGBModel.save writes)") from None
        except OSError as exc:
            raise CostModelError(f"{path}: cannot read ({exc.strerror or exc})") from None
        missing = {"model.bin", "data.npy"} - names
        if missing:
            raise CostModelError(f"{path}: not a trained cost model (no "
                                 f"{' or '.join(sorted(missing))} in it)")
        result = cls._learning(threads)
        try:
            with _quiet_xgboost():
                result.model.load(path)
        except Exception as exc:  # noqa: BLE001  tar, numpy and xgboost each raise their own
            raise CostModelError(f"{path}: cannot load the cost model "
                                 f"({type(exc).__name__}: {tvm_message(exc)})") from None
        result.model.last_train_size = result.model.data_size
        return result

    def save(self, path: str | os.PathLike[str]) -> None:
        """``XGBModel.save`` to a temporary file beside ``path``, then renamed into place."""
        path = os.fspath(path)
        if not self.trained:
            raise CostModelError(f"{path}: an untrained model has nothing to save")
        folder = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-cost-model-", suffix=".tar")
        except OSError as exc:
            raise CostModelError(f"{path}: cannot write ({exc.strerror or exc})") from None
        os.close(fd)
        try:
            with _quiet_xgboost():
                self.model.save(tmp)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except (OSError, RuntimeError) as exc:  # RuntimeError: TVM's tar failed
            raise CostModelError(f"{path}: cannot write ({exc})") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    # ---- using it -----------------------------------------------------------------------

    @property
    def trained(self) -> bool:
        return self.model.booster is not None

    @property
    def data_size(self) -> int:
        """Candidates the model holds (and retrains from at each update)."""
        return int(self.model.data_size)

    def score(self, workload: Any, target: Any, scripts: Sequence[str | None]) -> list[float]:
        """Predicted scores, higher for a script predicted faster (MetaSchedule's ``predict``:
        random for an untrained model); ``-inf`` for a script that does not apply.

        >>> from codegen.workloads import workload
        >>> model = CostModel.load("cost_model.tar")                     # doctest: +SKIP
        >>> model.score(workload("matmul(m=64,n=64,k=64)"), "llvm", scripts)  # doctest: +SKIP
        """
        return self.score_applied(apply_scripts(workload, target, scripts))

    def score_applied(self, applied: Applied) -> list[float]:
        """``score`` of scripts already applied."""
        scores = [-math.inf] * applied.total
        if applied.candidates:
            predicted = self.model.predict(applied.context, applied.candidates)
            for index, value in zip(applied.indices, predicted, strict=True):
                scores[index] = float(value)
        return scores

    def predict_features(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """``XGBModel.predict`` on features already extracted (``Featurized.features``): the
        booster's scores, or uniform noise while MetaSchedule's model would give noise."""
        xgb = self.model
        if xgb.data_size >= xgb.num_warmup_samples and xgb.booster is not None:
            return np.asarray(xgb._predict(xs=list(features)), dtype="float64")
        return np.random.uniform(low=0, high=1, size=(len(features),)).astype("float64")

    def update(self, workload: Any, target: Any, scripts: Sequence[str | None],
               latencies: Sequence[float | None]) -> int:
        """Learn from measured scripts as MetaSchedule learns after a round
        (``XGBModel.update``; a trained model retrains at once); returns how many were used
        (a script that does not apply is left out)."""
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        if len(scripts) != len(latencies):
            raise ValueError(f"Expected as many latencies as scripts but got {len(scripts)} "
                             f"scripts and {len(latencies)} latencies")
        applied = apply_scripts(workload, target, scripts)
        results = [RunnerResult(run_secs=[float(latencies[i])], error_msg=None)
                   if _cost(latencies[i]) < FAILED_RUN_SECS else
                   RunnerResult(run_secs=None, error_msg="failed")
                   for i in applied.indices]
        self.model.update(applied.context, applied.candidates, results)
        return len(applied.indices)
