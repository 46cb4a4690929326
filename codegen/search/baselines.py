"""Baseline schedules of a workload, the yardsticks a generated script is compared with.

* ``unscheduled``: the workload as written.  A GPU kernel without thread bindings cannot run,
  so on a GPU target the unscheduled baseline is the least schedule that makes it legal:
  DLight's ``gpu.Fallback`` alone (spatial loops fused and bound to blocks and threads).
* ``rule_based``: TVM's rule-based default, DLight.  On a GPU the rules of ``DLIGHT_GPU_RULES``
  in order, the first that matches wins; on llvm DLight's CPU rules (GEMV, Reduction), which
  match only some workloads.
* ``metaschedule_best``: the best schedule MetaSchedule finds within a trial budget, with its
  measured latency and its Dragon script.  Results are memoised on disk, one JSON file per
  (workload, target, rule set, trials, seed), because tuning takes minutes.

Each raises ``BaselineUnavailable`` with the reason when the baseline does not exist for the
workload and target; ``baselines`` collects all three.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dragon_dsl
from dragon_dsl.errors import DragonError
from dragon_dsl.files import write_atomic

from ..measure.cache import cache_root
from ..measure.config import MeasureConfig
from ..measure.devices import create as create_device
from ..targets import (
    as_module,
    as_target,
    default_rules,
    postproc_set,
    schedule_of,
    schedule_rules,
    tvm_message,
)

if TYPE_CHECKING:
    from ..targets import TargetLike
    from ..workloads.workload import WorkloadLike

__all__ = [
    "BASELINES",
    "DLIGHT_CPU_RULES",
    "DLIGHT_GPU_RULES",
    "BaselineUnavailable",
    "BestResult",
    "baselines",
    "default_cache_dir",
    "metaschedule_best",
    "rule_based",
    "unscheduled",
]

# The GPU rules in the order they are tried.  TVM's own relax CUDA pipeline
# (tvm/relax/backend/cuda/pipeline.py, legalize_passes) uses Matmul, GEMV, Reduction,
# GeneralReduction, Fallback; this list adds DLight's LowBatchGEMV, RMSNorm and Transpose, so
# the baseline is the strongest rule-based schedule DLight offers.
DLIGHT_GPU_RULES: tuple[str, ...] = ("Matmul", "GEMV", "LowBatchGEMV", "Reduction",
                                     "GeneralReduction", "RMSNorm", "Transpose", "Fallback")
DLIGHT_CPU_RULES: tuple[str, ...] = ("GEMV", "Reduction")

_MEMO_VERSION = 1


class BaselineUnavailable(DragonError):
    """The baseline does not exist for this workload and target; the message says why."""


@dataclass(frozen=True)
class BestResult:
    """The best schedule MetaSchedule found, and how it was found."""

    script: str      # the trace as a canonical Dragon script
    latency: float   # seconds, the mean of MetaSchedule's measurements of the best candidate
    trials: int      # candidates actually measured (build failures included)
    trace: Any       # tvm.s_tir.schedule.Trace
    mod: Any         # tvm.IRModule, the workload with the trace applied
    cached: bool = False  # True when read from the on-disk memo instead of tuned


def _is_gpu(tgt) -> bool:
    return "gpu" in [str(key) for key in tgt.keys]


def _spec(workload: WorkloadLike) -> str:
    return str(getattr(workload, "spec", "the workload"))


def _apply_dlight(mod, tgt, names: tuple[str, ...], family: str):
    """``mod`` with DLight's rules ``names`` applied as TVM applies them, and whether one did."""
    import tvm
    from tvm.s_tir import dlight

    rules = [getattr(getattr(dlight, family), name)() for name in names]
    # ApplyDefaultSchedule writes into the module it is given; the workload's must stay as is.
    copy = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    try:
        with tgt:
            out = dlight.ApplyDefaultSchedule(*rules)(copy)
    except Exception as exc:  # noqa: BLE001  a rule that matches but then fails
        raise BaselineUnavailable(
            f"DLight ({', '.join(names)}) failed on {_spec(mod)}: {tvm_message(exc)}") from None
    attrs = out["main"].attrs
    return out, attrs is not None and "tirx.is_scheduled" in attrs


def unscheduled(workload: WorkloadLike, target: TargetLike):
    """The workload without optimisation; on a GPU, DLight's Fallback, which only makes it legal.

    >>> from codegen.workloads import workload
    >>> mod = unscheduled(workload("matmul(m=64,n=64,k=64)"), "llvm")
    """
    mod = as_module(workload)
    tgt = as_target(target)
    if not _is_gpu(tgt):
        return mod
    out, scheduled = _apply_dlight(mod, tgt, ("Fallback",), "gpu")
    if not scheduled:
        raise BaselineUnavailable(
            f"DLight's Fallback does not schedule {_spec(workload)} for {tgt.kind.name}")
    return out


def rule_based(workload: WorkloadLike, target: TargetLike):
    """TVM's rule-based default schedule (DLight).

    Raises BaselineUnavailable on llvm when neither CPU rule (GEMV, Reduction) matches.

    >>> from codegen.workloads import workload
    >>> mod = rule_based(workload("softmax(m=64,n=128)"), "llvm")
    """
    mod = as_module(workload)
    tgt = as_target(target)
    names, family = (DLIGHT_GPU_RULES, "gpu") if _is_gpu(tgt) else (DLIGHT_CPU_RULES, "cpu")
    out, scheduled = _apply_dlight(mod, tgt, names, family)
    if not scheduled:
        raise BaselineUnavailable(
            f"no DLight {family.upper()} rule ({', '.join(names)}) matches {_spec(workload)} "
            f"on {tgt.kind.name}")
    return out


def default_cache_dir() -> str:
    """``$DRAGON_CACHE_DIR/baselines``, else ``~/.cache/little-dragon/baselines``."""
    return os.path.join(cache_root(), "baselines")


def _memo_key(mod, tgt, rules: str, trials: int, seed: int) -> tuple[str, dict]:
    import tvm_ffi

    fields = {"workload": str(tvm_ffi.structural_hash(mod)),
              "target": json.dumps(tgt.export(), sort_keys=True, default=str),
              "rules": rules, "trials": trials, "seed": seed}
    key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return key, fields


def _memo_load(path: str, workload: WorkloadLike, tgt) -> BestResult | None:
    """The memoised result, or None on a miss; a file that cannot be used is a warned miss."""
    if not os.path.exists(path):
        return None

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("version") != _MEMO_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {_MEMO_VERSION}")
        script = str(data["script"])
        trace = dragon_dsl.to_trace(script, workload=workload, target=tgt)
        sch = schedule_of(workload)
        trace.apply_to_schedule(sch, remove_postproc=False)
        return BestResult(script=script, latency=float(data["latency"]),
                          trials=int(data["trials_run"]), trace=sch.trace, mod=sch.mod,
                          cached=True)
    except Exception as exc:  # noqa: BLE001  any unreadable or stale file is recomputed
        warnings.warn(f"ignoring unusable baseline memo {path} ({tvm_message(exc)}); "
                      "tuning again", stacklevel=3)
        return None


def _memo_store(path: str, fields: dict, result: BestResult, spec: str, cost_model: str) -> None:
    data = {"version": _MEMO_VERSION, "spec": spec, **fields, "cost_model": cost_model,
            "trials_run": result.trials, "latency": result.latency, "script": result.script}
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def _build_candidate(mod, target, _params):
    """MetaSchedule's default build without its first step, ``import tvm.s_tir.tensor_intrin``:
    in TVM 0.27 that import parses hundreds of TVMScript intrinsics and takes 30-120 s in
    each fresh builder process, past the build timeout.  A scheduled module already carries
    the bodies of the intrinsics it was tensorized with, so building does not need them."""
    from tvm.driver import build  # a runtime Module, which the default export expects
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return build(mod, target=target)


def _cost_model() -> str:
    try:
        import xgboost  # noqa: F401
    except ImportError:
        return "random"  # MetaSchedule's XGBoost model needs the optional xgboost package
    return "xgb"


def _device_present(tgt) -> bool:
    """Whether this machine has the device MetaSchedule's local runner would measure on."""
    try:
        return create_device(tgt).describe().available
    except Exception:  # noqa: BLE001  no local device for this target, or no runtime for it
        return False


def metaschedule_best(workload: WorkloadLike, target: TargetLike, trials: int = 64,
                      rules: str | None = None, work_dir: str | None = None, seed: int = 0, *,
                      builder: Any = None,
                      runner: Any = None, cost_model: str | None = None,
                      cache_dir: str | None = None) -> BestResult:
    """Tune with ``tvm.s_tir.meta_schedule.tune_tir`` and return the best measured schedule.

    ``rules`` names a rule set of ``codegen.targets.RULE_SETS`` (default: the target's).
    ``work_dir`` keeps tune_tir's logs and JSON database (default: a temporary directory);
    a reused one continues from its records, and ``trials`` then counts those too.
    ``builder``/``runner`` go to tune_tir; by default a local builder and runner.  A GPU target
    with no GPU on this machine needs a ``runner`` (for example an RPC runner), else
    BaselineUnavailable.  ``cost_model`` defaults to ``"xgb"`` when xgboost is installed, else
    ``"random"``.  Results are memoised in ``cache_dir`` (default ``default_cache_dir()``);
    a memo hit needs neither tuning nor a device.

    >>> from codegen.workloads import workload
    >>> wl = workload("matmul(m=64,n=64,k=64)")
    >>> best = metaschedule_best(wl, "llvm", trials=8)  # doctest: +SKIP
    >>> best.script.splitlines()[-1]  # doctest: +SKIP
    'postproc auto llvm'
    """
    mod = as_module(workload)
    tgt = as_target(target)
    rules = rules or default_rules(tgt)
    pp_set = postproc_set(rules)
    if trials < 1:
        raise ValueError(f"Expected at least one trial but got trials={trials}")
    key, fields = _memo_key(mod, tgt, rules, trials, seed)
    path = os.path.join(cache_dir or default_cache_dir(), f"{key}.json")
    hit = _memo_load(path, workload, tgt)
    if hit is not None:
        return hit
    if runner is None and _is_gpu(tgt) and not _device_present(tgt):
        raise BaselineUnavailable(
            f"MetaSchedule measures every candidate on the device, and this machine has no "
            f"{tgt.kind.name} device: pass runner= (e.g. an RPC runner) to tune "
            f"{_spec(workload)} for {tgt.kind.name}")
    model = cost_model or _cost_model()
    with contextlib.ExitStack() as stack:
        if work_dir is None:
            work_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="dragon-tune-"))
        best, count = _tune(mod, tgt, rules, trials, work_dir, seed, builder, runner, model)
    if best is None:
        raise BaselineUnavailable(
            f"none of the {count} MetaSchedule candidates for {_spec(workload)} built and ran; "
            f"see the logs in work_dir")
    sch, latency = best
    script = dragon_dsl.from_trace(sch.trace, postproc="auto", postproc_set=pp_set,
                                   workload=workload, target=tgt)
    result = BestResult(script=script, latency=latency, trials=count, trace=sch.trace,
                        mod=sch.mod)
    _memo_store(path, fields, result, _spec(workload), model)
    return result


@contextlib.contextmanager
def unnamed_handlers_aside() -> Iterator[None]:
    """Take the handlers without a name off MetaSchedule's logger while the block runs.
    ``tune_tir`` lists that logger's handlers by name to configure its own, and fails
    (``str.format`` on None) on one that has none, as a second call in a process where pytest
    or a user attached one does."""
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    unnamed = [h for h in logger.handlers if h.get_name() is None]
    for handler in unnamed:
        logger.removeHandler(handler)
    try:
        yield
    finally:
        for handler in unnamed:
            logger.addHandler(handler)


@contextlib.contextmanager
def console_warnings_only() -> Iterator[None]:
    """While the block runs, MetaSchedule's console shows warnings and errors only, unless
    its logger's level was set (its full log still goes to ``work_dir/logs``).  ``tune_tir``
    gives its console handler the logger's level at the call, then sets the logger to DEBUG;
    the level is put back after, so that the next call is as quiet."""
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    before = logger.level
    if before == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(before)


def _tune(mod, tgt, rules: str, trials: int, work_dir: str, seed: int, builder, runner,
          cost_model: str):
    """Run tune_tir; returns ((schedule, latency) or None, number of records)."""
    from tvm.s_tir import meta_schedule as ms

    pp_set = postproc_set(rules)
    # The same limits as our own measurements (MetaSchedule's 30 s build default is short on
    # a busy machine).
    limits = MeasureConfig()
    space = ms.space_generator.PostOrderApply(
        sch_rules=schedule_rules(rules), postprocs=pp_set, mutator_probs=pp_set)
    if builder is None:
        builder = ms.builder.LocalBuilder(f_build=_build_candidate,
                                          timeout_sec=limits.build_timeout_s)
    if runner is None:
        runner = ms.runner.LocalRunner(timeout_sec=limits.run_timeout_s)
    with unnamed_handlers_aside(), console_warnings_only():
        database = ms.tune_tir(mod, tgt, work_dir, max_trials_global=trials,
                               num_trials_per_iter=min(64, trials), builder=builder,
                               runner=runner, cost_model=cost_model, space=space, seed=seed)
    count = len(database.get_all_tuning_records())
    top = database.get_top_k(database.commit_workload(mod), 1)
    if len(top) == 0:
        return None, count
    secs = [float(s) for s in top[0].run_secs]
    sch = ms.tir_integration.compile_tir(database, mod, tgt)
    return (sch, sum(secs) / len(secs)), count


BASELINES: tuple[str, ...] = ("unscheduled", "default", "metaschedule")


def baselines(workload: WorkloadLike, target: TargetLike, trials: int = 64,
              names: tuple[str, ...] | list[str] = BASELINES, progress: Any = None,
              **tune_options: Any) -> dict[str, Any]:
    """The baselines ``names`` (from ``BASELINES``) by name: each a scheduled IRModule, or the
    BaselineUnavailable that says why it does not exist.  ``tune_options`` go to
    ``metaschedule_best``; ``progress(message)`` hears which baseline is being made.

    >>> from codegen.workloads import workload
    >>> made = baselines(workload("matmul(m=16,n=16,k=16)"), "llvm", names=["unscheduled"])
    >>> list(made)
    ['unscheduled']
    """
    makers = {"unscheduled": lambda: unscheduled(workload, target),
              "default": lambda: rule_based(workload, target),
              "metaschedule": lambda: metaschedule_best(workload, target, trials=trials,
                                                        **tune_options).mod}
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise ValueError(f"Expected baselines from {list(BASELINES)} but got {unknown}")
    out: dict[str, Any] = {}
    for name in names:
        if progress is not None:
            progress(f"baseline {name} ...")
        try:
            out[name] = makers[name]()
        except BaselineUnavailable as exc:
            out[name] = exc
    return out
