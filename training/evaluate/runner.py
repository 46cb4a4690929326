"""``run_eval``: models side by side on held-out tasks, every attempt measured in one session.

Each model writes ``attempts`` scripts per task (``generate``: a local model by schedule-aware
decoding, an OpenAI-compatible endpoint by its server; the refinement prompt carries the start
script's latency, measured first).  MetaSchedule, the rival model ``metaschedule``
(``metaschedule.py``; off with ``EvalConfig.metaschedule``), searches each workload once with
``attempts`` trials measured by the same evaluator, and its trials are its attempts.  Then,
task by task, one ``Evaluator`` (no cache) measures the references (the unscheduled kernel, the
start script of a refinement task, MetaSchedule's best script from the dataset) and every
model's attempts, interleaved, in one batch: each script is built, verified against the
unscheduled kernel's outputs and timed beside its baseline and its rivals.  The output
directory::

    OUT/eval.json            the models, data, target and settings (a rerun must match them)
    OUT/generated/MODEL/*.json  a model's scripts for a task, before they are measured
    OUT/generated/metaschedule/searches/*.json  one search per workload, its trials in order
    OUT/samples/MODEL/*.jsonl  one file per (model, task), measured, written whole: a rerun
                             samples and measures only what has no file, so an interrupted run
                             resumes
    OUT/samples.jsonl        every attempt of every model, one JSON object per line
    OUT/summary.json         ``metrics.summarize``, the head-to-head counts, the budget
                             curves (``metrics.budget_curves``), per family
                             (``metrics.by_family``); with ``min_unscheduled_us``, over the
                             tasks whose unscheduled kernel took at least that long here
    OUT/report.md, *.png     ``report.write_report``

Rows measured in different sessions (a resumed run) keep the references of their own session:
speedups are always relative to a baseline timed alongside the attempt.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from codegen.measure import Evaluator
from codegen.measure.config import MeasureConfig
from codegen.measure.outcomes import Outcome, Status
from codegen.search.baselines import unscheduled
from codegen.workloads import workload as make_workload
from dragon_dsl.files import unwritable, write_atomic
from training.evaluate import metaschedule
from training.evaluate.errors import EvalError
from training.evaluate.metrics import (
    budget_curves,
    by_family,
    head_to_head,
    head_to_head_by_family,
    permutation_test,
    self_duel,
    slow_tasks,
    summarize,
)
from training.evaluate.tasks import KINDS, EvalTask, load_tasks
from training.prompts.templates import construction_prompt, refinement_prompt
from training.sampling.config import SamplingConfig
from training.train.run_dir import data_target

if TYPE_CHECKING:
    from codegen.targets import TargetLike
    from codegen.workloads.workload import WorkloadLike

__all__ = ["EvalConfig", "EvalError", "ResultUnwritten", "run_eval"]

MANIFEST = "eval.json"


@dataclass(frozen=True)
class EvalConfig:
    """What is evaluated and how it is sampled and measured."""

    split: str = field(default="test", metadata={"help": "The dataset split to evaluate on."})
    kinds: tuple[str, ...] = field(default=KINDS, metadata={
        "help": "Task kinds to evaluate.", "choices": KINDS, "nargs": "+"})
    max_tasks: int | None = field(default=None, metadata={
        "help": "At most this many tasks of each kind (the first ones); unset: all."})
    sample_tasks: int | None = field(default=None, metadata={
        "help": "This many tasks of each kind drawn at random (seeded by --seed, kept in the "
                "dataset's order), an unbiased part of a split too large to measure whole; "
                "unset: all.  Not with --max-tasks."})
    families: tuple[str, ...] | None = field(default=None, metadata={
        "help": "Only the tasks of these operator families (dense, conv2d, ...); unset: all.",
        "nargs": "+"})
    attempts: int = field(default=4, metadata={"help": "Scripts sampled per task and model."})
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(top_p=0.95, max_new_tokens=640), metadata={
            "help": "How a local model or an endpoint samples; its seed gives each (task, "
                    "attempt) its own stream and seeds MetaSchedule's search.",
            "flags": ("temperature", "top_p", "max_new_tokens", "seed")})
    measure: MeasureConfig = field(
        default_factory=lambda: MeasureConfig(repeat=5, min_repeat_ms=10.0), metadata={
            "help": "How every attempt and reference is measured.",
            "flags": ("repeat", "min_repeat_ms", "run_timeout_s")})
    builders: int | None = field(default=None, metadata={"help": "Parallel builds."})
    tie: float = field(default=0.02, metadata={
        "help": "Head to head, best kernels within this relative difference tie, or within "
                "their timings' combined spread when that is larger."})
    metaschedule: bool = field(default=True, metadata={
        "help": "Evaluate MetaSchedule's search as the model 'metaschedule', given as many "
                "measurements per workload as a model has attempts per task."})
    search_population: int = field(default=512, metadata={
        "help": "Population of MetaSchedule's evolutionary search (its default, 512; a "
                "smaller one searches faster and worse)."})
    min_unscheduled_us: float = field(default=0.0, metadata={
        "help": "Leave out of every figure the tasks whose unscheduled kernel, measured in "
                "this run, takes less than this many microseconds (timing noise decides "
                "their speedups; 50 is a common floor); their rows stay in samples.jsonl and "
                "a rerun with another value measures nothing again.  0: every task."})

    def __post_init__(self) -> None:
        bad = [k for k in self.kinds if k not in KINDS]
        if bad:
            raise EvalError(f"Expected kinds among {KINDS} but got {bad}")
        if self.attempts < 1:
            raise EvalError(f"Expected attempts >= 1 but got attempts={self.attempts}")
        if self.max_tasks is not None and self.max_tasks < 1:
            raise EvalError(f"Expected max_tasks >= 1 (leave it unset for all tasks) but got "
                            f"max_tasks={self.max_tasks}")
        if self.sample_tasks is not None and self.sample_tasks < 1:
            raise EvalError(f"Expected sample_tasks >= 1 (leave it unset for all tasks) but "
                            f"got sample_tasks={self.sample_tasks}")
        if self.sample_tasks is not None and self.max_tasks is not None:
            raise EvalError("Expected max_tasks (the first tasks) or sample_tasks (tasks drawn "
                            "at random), not both")
        if self.builders is not None and self.builders < 1:
            raise EvalError(f"Expected builders >= 1 but got builders={self.builders}")
        if not 0 <= self.tie < math.inf:
            raise EvalError(f"Expected a finite tie >= 0 but got tie={self.tie}")
        if not 0 <= self.min_unscheduled_us < math.inf:
            raise EvalError(f"Expected a finite min_unscheduled_us >= 0 but got "
                            f"min_unscheduled_us={self.min_unscheduled_us}")
        if self.search_population < 1:
            raise EvalError(f"Expected search_population >= 1 but got "
                            f"search_population={self.search_population}")

    def settings(self) -> dict[str, Any]:
        """The fields a resumed run must share (those that change what a row means; the
        search's settings are in the name of the model ``metaschedule`` instead), by their
        flat names, as ``eval.json`` has always held them."""
        out = {k: v for k, v in asdict(self).items()
               if k not in ("builders", "tie", "metaschedule", "search_population", "sampling",
                            "measure", "min_unscheduled_us")
               # as runs before these fields held them
               and not (k in ("families", "sample_tasks") and v is None)}
        for name, part in (("sampling", self.sampling), ("measure", self.measure)):
            out.update({k: getattr(part, k) for k in _FLAGS[name]})
        return out

    def attempt_sampling(self, seed: int) -> SamplingConfig:
        """What a local model samples for one task: ``attempts`` scripts from ``seed``."""
        return replace(self.sampling, n=self.attempts, seed=seed, batch_size=self.attempts)


_FLAGS = {f.name: f.metadata["flags"] for f in fields(EvalConfig) if "flags" in f.metadata}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def _check_folders(names) -> None:
    """Each model's files go to ``OUT/*/<slug of its name>/``: two names with one slug would
    read each other's scripts, so they are refused, as is a name that is no folder."""
    held: dict[str, str] = {}
    for name in names:
        folder = _slug(name)
        if folder in (".", ".."):
            raise EvalError(f"the model name {name!r} cannot name a folder; name it "
                            "differently (NAME=PATH)")
        other = held.setdefault(folder, name)
        if other != name:
            raise EvalError(f"the models {other!r} and {name!r} would share the folder "
                            f"{folder!r}; name one of them differently (NAME=PATH)")


def _check_writable(out: Path) -> None:
    """``out`` is, or can be made, a folder this process writes in: checked before any work,
    creating nothing."""
    why = unwritable(out, folder=True)
    if why:
        raise EvalError(f"--out {why}")


class ResultUnwritten(EvalError):
    """The evaluation ran but its summary or report could not be written; ``summary`` holds
    the result, to be shown instead."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


def _task_seed(seed: int, task: EvalTask) -> int:
    return seed + int(hashlib.sha256(task.id.encode()).hexdigest()[:8], 16)


class _Files:
    """``OUT/FOLDER/MODEL/TASK.SUFFIX``: one file per (model, task), written atomically."""

    folder = suffix = ""

    def __init__(self, out: Path) -> None:
        self.root = out / self.folder

    def path(self, model: str, task: EvalTask) -> Path:
        return self.root / _slug(model) / f"{_slug(task.id)}.{self.suffix}"

    def has(self, model: str, task: EvalTask) -> bool:
        return self.path(model, task).is_file()

    def _write(self, model: str, task: EvalTask, text: str) -> None:
        path = self.path(model, task)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(str(path), text)
        except OSError as exc:
            raise EvalError(f"cannot write {path} ({exc.strerror or exc}); the task's scripts "
                            "are measured again by a rerun") from None


class _Store(_Files):
    """The measured rows of a (model, task)."""

    folder, suffix = "samples", "jsonl"

    def write(self, model: str, task: EvalTask, rows: list[dict[str, Any]]) -> None:
        self._write(model, task, "".join(json.dumps(r) + "\n" for r in rows))

    def rows(self, models: list[str], tasks: list[EvalTask]) -> list[dict[str, Any]]:
        out = []
        for model in models:
            for task in tasks:
                path = self.path(model, task)
                if not path.is_file():
                    continue
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise EvalError(f"{path}:{number}: not a sample row ({exc}); delete "
                                        "the file to measure the task again") from None
        return out


def _check_manifest(out: Path, manifest: dict[str, Any]) -> None:
    path = out / MANIFEST
    manifest = json.loads(json.dumps(manifest))  # as it reads back (tuples become lists)
    if path.is_file():
        try:
            held = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise EvalError(f"{path}: not JSON ({exc})") from None
        for key in ("data", "target", "settings"):
            was, now = held.get(key), manifest[key]
            if was != now:
                if isinstance(was, dict) and isinstance(now, dict) and key == "settings":
                    was, now = ({k: d.get(k) for k in sorted(set(was) | set(now))
                                 if was.get(k) != now.get(k)} for d in (was, now))
                raise EvalError(f"{out} holds an evaluation with another {key}: it was "
                                f"{was!r}, now {now!r}; use a new --out")
        held_models = held.get("models", {})
        if not isinstance(held_models, dict):
            raise EvalError(f"{path}: 'models' is not a mapping")
        _check_folders([*held_models, *(m for m in manifest["models"] if m not in held_models)])
        for name, path_ in held_models.items():
            if manifest["models"].get(name, path_) != path_:
                hint = ("use a new --out" if name == metaschedule.NAME
                        else "name it differently")
                raise EvalError(f"{out}: model {name!r} was {path_}, now "
                                f"{manifest['models'][name]}; {hint}")
        manifest = {**manifest, "models": {**held.get("models", {}), **manifest["models"]}}

    write_atomic(str(path), json.dumps(manifest, indent=1) + "\n")


def measure_references(task: EvalTask, workload: WorkloadLike,
                       evaluator: Evaluator) -> dict[str, Any]:
    """The task's reference latencies (seconds; None when one does not run correctly)."""
    refs: dict[str, Any] = {}
    base = evaluator.evaluate_modules(workload, {"u": unscheduled(workload, evaluator.target)})
    refs["unscheduled_s"] = base["u"].latency_s if base["u"].ok else None
    scripts = {"start_s": task.start_script, "metaschedule_s": task.metaschedule_script}
    named = [(k, s) for k, s in scripts.items() if s]
    outcomes = evaluator.evaluate(workload, [s for _, s in named]) if named else []
    for (key, _), outcome in zip(named, outcomes, strict=True):
        refs[key] = outcome.latency_s if outcome.ok else None
    return refs


def run_eval(models: dict[str, str], data: str | Path, out: str | Path, *,
             target: TargetLike | None = None, config: EvalConfig | None = None,
             evaluator: Evaluator | None = None,
             progress: bool = True) -> dict[str, Any]:
    """Evaluate ``models`` (name -> a local model or SFT/RL run directory, or an
    OpenAI-compatible endpoint ``http://host:port/v1#served-model``: ``generate.create``) on the
    tasks of ``data``; returns the summary (also written to ``OUT/summary.json``)."""
    from training.evaluate.generate import create
    from training.evaluate.report import write_report

    if not models:
        raise EvalError("name at least one model (NAME=PATH)")
    if metaschedule.NAME in models:
        raise EvalError(f"the model name {metaschedule.NAME!r} stands for MetaSchedule's "
                        "search; name your model differently (NAME=PATH)")
    _check_folders(models)
    config = config or EvalConfig()
    out = Path(out)
    _check_writable(out)
    generators = {name: create(name, spec) for name, spec in models.items()}
    dirs = {name: g.source for name, g in generators.items()}
    rivals = {**dirs, **({metaschedule.NAME: metaschedule.describe(config.search_population)}
                         if config.metaschedule else {})}
    names = list(rivals)
    target = target or data_target(data)
    if isinstance(target, str) and target.lstrip().startswith("{"):
        try:
            target = json.loads(target)
        except json.JSONDecodeError as exc:
            raise EvalError(f"--target {target!r} is not a JSON dict ({exc})") from None
    tasks = load_tasks(data, config.split, config.kinds, max_tasks=config.max_tasks,
                       families=config.families, sample=config.sample_tasks,
                       seed=config.sampling.seed)
    if not tasks:
        raise EvalError(f"the {config.split!r} split of {data} holds no tasks"
                        + (f" of the families {', '.join(config.families)}"
                           if config.families else ""))
    _check_manifest(out, {"data": str(Path(data).resolve()), "target": target,
                          "settings": config.settings(), "models": rivals})
    store = _Store(out)
    todo = [(name, t) for name in names for t in tasks if not store.has(name, t)]
    owned = evaluator is None and bool(todo)
    if owned:
        evaluator = Evaluator(target, builders=config.builders, config=config.measure,
                              cache=False)
    try:
        if todo:
            _evaluate(todo, generators, tasks, evaluator, store, config, make_workload, progress)
    finally:
        if owned:
            evaluator.close()
    every = store.rows(names, tasks)
    kept = slow_tasks(every, config.min_unscheduled_us * 1e-6)
    rows = [r for r in every if r["task"] in kept]
    summary = {"models": rivals, "target": target, "split": config.split,
               "tasks": {k: sum(t.kind == k and t.id in kept for t in tasks)
                         for k in config.kinds},
               "attempts": config.attempts, "by_model": summarize(rows),
               "head_to_head": {
                   kind: {f"{a} vs {b}": head_to_head(rows, a, b, kind, tie=config.tie)
                          for i, a in enumerate(names) for b in names[i + 1:]}
                   for kind in config.kinds},
               "curves": budget_curves(rows), "by_family": by_family(rows),
               "head_to_head_by_family": {
                   kind: head_to_head_by_family(rows, names, kind, tie=config.tie)
                   for kind in config.kinds},
               "permutation": {
                   kind: {f"{a} vs {b}": permutation_test(rows, a, b, kind)
                          for i, a in enumerate(names) for b in names[i + 1:]}
                   for kind in config.kinds},
               "head_to_head_noise": {
                   kind: {m: self_duel(rows, m, kind, tie=config.tie) for m in names}
                   for kind in config.kinds} if len(names) >= 2 else {}}
    if config.min_unscheduled_us:
        summary["min_unscheduled_us"] = config.min_unscheduled_us
        summary["left_out"] = {k: sum(t.kind == k and t.id not in kept for t in tasks)
                               for k in config.kinds}
    where = out / "samples.jsonl"
    try:
        write_atomic(where, "".join(json.dumps(r) + "\n" for r in every))
        where = out / "summary.json"
        write_atomic(where, json.dumps(summary, indent=1) + "\n")
        where = out / "report.md"
        write_report(out, summary, rows)
    except OSError as exc:
        raise ResultUnwritten(f"the result above could not be written to {where} "
                              f"({exc.strerror or exc}); the measured rows are kept in "
                              f"{out}/samples/", summary) from None
    return summary


def _evaluate(todo, generators, tasks, evaluator, store, config, make_workload,
              progress) -> None:
    """Generate, model by model (one in memory at a time), then measure task by task: the
    references and every model's attempts of a task in one batch, the models interleaved, so
    that no model is timed under other conditions than its rival or its baseline."""
    session = time.strftime("%Y-%m-%dT%H:%M:%S")
    workloads: dict[str, Any] = {}

    def workload_of(task: EvalTask) -> Any:
        if task.workload not in workloads:
            workloads[task.workload] = make_workload(task.workload)
        return workloads[task.workload]

    by_task: dict[str, list[str]] = {}
    for name, task in todo:
        by_task.setdefault(task.id, []).append(name)
    pending = [t for t in tasks if t.id in by_task]
    generated = _Generated(store.root.parent)
    # 1. The refinement prompts carry the start script's latency, measured now.
    start_s: dict[str, float | None] = {}
    for task in pending:
        if task.kind == "refinement" and not all(generated.has(n, task)
                                                 for n in by_task[task.id]):
            [outcome] = evaluator.evaluate(workload_of(task), [task.start_script])
            start_s[task.id] = outcome.latency_s if outcome.ok else None
    # 2. Generation: the models, then MetaSchedule's searches.
    for name, generator in generators.items():
        mine = [t for t in pending if name in by_task[t.id] and not generated.has(name, t)
                and start_s.get(t.id, 1.0) is not None]
        if mine:
            try:
                _generate(generator, mine, start_s, generated, evaluator.target, config,
                          workload_of, progress)
            finally:
                generator.close()
    mine = [t for t in pending if metaschedule.NAME in by_task[t.id]
            and not generated.has(metaschedule.NAME, t) and start_s.get(t.id, 1.0) is not None]
    if mine:
        _search(mine, generated, evaluator, config, workload_of, progress)
    # 3. Measurement.
    for task in tqdm(pending, desc="measure", unit="task", disable=not progress):
        wl = workload_of(task)
        names = by_task[task.id]
        refs = measure_references(task, wl, evaluator)
        base = {"session": session, "task": task.id, "kind": task.kind,
                "workload": task.workload, "family": task.family, **refs}
        made = {n: generated.read(n, task) for n in names if generated.has(n, task)}
        for name in names:
            if name not in made:  # the start script did not run correctly when prompted
                store.write(name, task, [
                    {**base, "model": name, "attempt": i, "status": "skipped",
                     "message": "the start script to refine is not correct here"}
                    for i in range(config.attempts)])
        # MetaSchedule's script is None where the language cannot write its trace.
        order = [(n, i) for i in range(config.attempts) for n in made
                 if i < len(made[n]["samples"]) and made[n]["samples"][i]["script"]]
        outcomes = evaluator.evaluate(wl, [made[n]["samples"][i]["script"] for n, i in order])
        measured = dict(zip(order, outcomes, strict=True))
        for name, gen in made.items():
            rows = []
            for i, sample in enumerate(gen["samples"]):
                o = measured.get((name, i)) or _unwritten()
                rows.append({**base, "model": name, "attempt": i, **sample,
                             "status": o.status.value, "stage": o.stage,
                             "message": o.message[:500],
                             "latency_s": o.latency_s if o.ok else None,
                             "spread_s": o.spread_s if o.ok else None,
                             "generation_s": gen["generation_s"]})
            store.write(name, task, rows)


def _unwritten() -> Outcome:
    return Outcome(Status.APPLY_ERROR, "encode",
                   "MetaSchedule's trace could not be written as a script")


class _Generated(_Files):
    """A model's scripts for a task before they are measured (a resumed run measures them
    without sampling again)."""

    folder, suffix = "generated", "json"

    def write(self, model: str, task: EvalTask, data: dict[str, Any]) -> None:
        self._write(model, task, json.dumps(data) + "\n")

    def read(self, model: str, task: EvalTask) -> dict[str, Any]:
        path = self.path(model, task)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise EvalError(f"{path}: unreadable generated scripts ({exc}); delete it to "
                            "sample them again") from None


def _generate(generator, tasks, start_s, generated, target, config, workload_of,
              progress) -> None:
    name = generator.name
    for task in tqdm(tasks, desc=f"generate {name}", unit="task", disable=not progress):
        wl = workload_of(task)
        prompt = (refinement_prompt(wl, target, task.start_script, start_s[task.id],
                                    getattr(generator, "prompt_config", None))
                  if task.kind == "refinement" else construction_prompt(wl, target))
        started = time.perf_counter()
        samples = generator.generate(prompt, wl, target, config,
                                     _task_seed(config.sampling.seed, task))
        generated.write(name, task, {
            "prompt": prompt, "generation_s": (time.perf_counter() - started) / len(samples),
            "samples": samples})


class _Searches(_Files):
    """MetaSchedule's search of a workload, shared by the workload's tasks (a resumed run
    reads it instead of searching again)."""

    folder, suffix = f"generated/{metaschedule.NAME}/searches", "json"

    def file(self, spec: str) -> Path:
        digest = hashlib.sha256(spec.encode()).hexdigest()[:10]
        return self.root / f"{_slug(spec)[:80]}-{digest}.{self.suffix}"


def _search(tasks, generated, evaluator, config, workload_of, progress) -> None:
    """MetaSchedule's attempts at ``tasks``: one search per workload, ``attempts`` trials."""
    searches = _Searches(generated.root.parent)
    first: dict[str, EvalTask] = {}
    for task in tasks:
        first.setdefault(task.workload, task)
    found: dict[str, dict[str, Any]] = {}
    for spec in tqdm(first, desc="search metaschedule", unit="workload", disable=not progress):
        path = searches.file(spec)
        if path.is_file():
            try:
                found[spec] = json.loads(path.read_text(encoding="utf-8"))
                continue
            except json.JSONDecodeError as exc:
                raise EvalError(f"{path}: unreadable search ({exc}); delete it to search "
                                "again") from None
        found[spec] = metaschedule.search_attempts(
            workload_of(first[spec]), spec, evaluator.target, evaluator,
            config.attempts, config.sampling.seed, config.search_population)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(str(path), json.dumps(found[spec]) + "\n")
    for task in tasks:
        search = found[task.workload]
        samples = search["samples"]
        generated.write(metaschedule.NAME, task, {
            "prompt": None, "search": str(searches.file(task.workload).name),
            "generation_s": search["seconds"] / max(1, len(samples)), "samples": samples})

