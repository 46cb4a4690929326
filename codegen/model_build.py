"""A whole Relax model built with a MetaSchedule database, and measured end to end.

What users run (``build_model``)::

    with target:
        mod = relax.transform.MetaScheduleApplyDatabase(work_dir)(mod)
    executable = relax.build(mod, target)

``measure_models`` builds the same module several ways (no database, one database or another)
and runs each in a worker process (``codegen.measure.model_jobs``), so a build or a model
that crashes or hangs is an outcome, never the end of the caller: every variant is first
checked against the reference variant's outputs on the same seeded inputs (the tolerances of
``codegen.measure.verify``), then the correct ones are timed in interleaved rounds, so noise
hits all of them alike; the latency is the median of every timed run.

>>> rows = measure_models(mod, "llvm", {"before": None, "after": "db"})  # doctest: +SKIP
>>> rows["after"].latency_s / rows["before"].latency_s                    # doctest: +SKIP
0.41
"""

from __future__ import annotations

import os
import statistics
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .measure.config import MeasureConfig
from .measure.devices import Device, create
from .measure.model_jobs import apply_database
from .measure.protocol import Failed, ModelBuildJob, ModelBuilt, ModelRan, ModelRunJob
from .measure.verify import compare
from .measure.worker import JobTimeout, Worker, WorkerError
from .targets import as_target, native_log, target_dict

if TYPE_CHECKING:
    from .targets import TargetLike

__all__ = ["EndToEnd", "build_model", "measure_models", "model_inputs"]


@dataclass(frozen=True)
class EndToEnd:
    """One build of a model, checked and timed."""

    name: str
    status: str             # "correct", "incorrect", "build_error", "runtime_error", "timeout",
    #                         "unchecked" (the reference did not run)
    message: str = ""
    latency_s: float | None = None
    times: list[float] = field(default_factory=list)
    build_s: float | None = None
    scheduled: int = 0      # PrimFuncs the database scheduled
    max_abs_error: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "correct"

    @property
    def spread_s(self) -> float | None:
        """The interquartile range of the rounds' times, as a kernel's ``Outcome`` has it (what
        ``codegen.measured.compare`` reads); None without times."""
        from .measure.timing import median_and_spread

        return median_and_spread(list(self.times))[1] if self.times else None

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def build_model(mod, target: TargetLike = "llvm", database: str | None = None):
    """``mod`` (a prepared Relax module) built by ``relax.build``, with the schedules of the
    MetaSchedule JSON database in directory ``database`` applied first when given; a
    ``relax.VirtualMachine`` runs the result.  In this process: see ``measure_models`` for
    the isolated version."""
    from tvm import relax

    tgt = as_target(target)
    if database is not None:
        mod = apply_database(mod, tgt, database)
    with native_log():
        return relax.build(mod, tgt)


def model_inputs(mod, seed: int = 0) -> list[np.ndarray]:
    """Seeded inputs for ``mod``'s ``main``: integers in [0, 8) (token ids valid for any
    vocabulary), floats of magnitude [0.25, 1] with random signs.  Raises ValueError for a
    parameter that is not a tensor of static shape."""
    rng = np.random.default_rng(seed)
    arrays = []
    for param in mod["main"].params:
        ty = param.ty
        shape = getattr(ty, "shape", None)
        try:
            dims = tuple(int(d) for d in shape) if shape is not None else None
        except TypeError:
            dims = None
        if dims is None:
            raise ValueError(f"Expected tensors of static shape as the inputs of main but got "
                             f"{param.name}: {ty}")
        dtype = str(ty.dtype)
        if np.issubdtype(np.dtype(dtype), np.integer):
            arrays.append(rng.integers(0, 8, size=dims).astype(dtype))
        else:
            signs = rng.choice(np.array([-1.0, 1.0]), size=dims)
            arrays.append((signs * rng.uniform(0.25, 1.0, size=dims)).astype(dtype))
    return arrays


def measure_models(mod, target: TargetLike, databases: dict[str, str | None], *,
                   reference: str | None = None, rounds: int = 5,
                   config: MeasureConfig | None = None, seed: int = 0,
                   progress=None, device: Device | None = None) -> dict[str, EndToEnd]:
    """Build ``mod`` once per entry of ``databases`` (name -> database directory, None for the
    default build), check each against ``reference``'s outputs (the first entry by default;
    the reference itself is only run), and time the correct ones in ``rounds`` interleaved
    rounds of ``config.repeat`` runs of at least ``config.min_repeat_ms``, on ``device`` (by
    default this machine's, for ``target``).  ``progress(text)`` hears what is happening."""
    from tvm import ir

    if not databases:
        return {}
    config = config or MeasureConfig()
    tgt = as_target(target)
    device = device or create(tgt)
    if not device.runs_models:
        raise ValueError(f"Expected a device that runs whole models but got {device.ref.kind}")
    reference = reference or next(iter(databases))
    say = progress or (lambda text: None)
    found: dict[str, EndToEnd] = {}

    def failed(name: str, exc_or_reply: Any, **kw: Any) -> EndToEnd:
        if isinstance(exc_or_reply, Failed):
            return EndToEnd(name, exc_or_reply.status.value, exc_or_reply.message, **kw)
        status = "timeout" if isinstance(exc_or_reply, JobTimeout) else "runtime_error"
        return EndToEnd(name, status, str(exc_or_reply), **kw)

    with tempfile.TemporaryDirectory(prefix="dragon-model-") as tmp, \
            Worker(memory_limit_mb=config.memory_limit_mb) as builder, \
            device.worker(config.memory_limit_mb) as runner:
        module = os.path.join(tmp, "module.json")
        with open(module, "w", encoding="utf-8") as f:
            f.write(ir.save_json(mod))
        inputs = os.path.join(tmp, "inputs.npz")
        np.savez(inputs, *model_inputs(mod, seed))  # arr_0, arr_1, ...
        built: dict[str, tuple[str, float, int]] = {}
        for i, (name, database) in enumerate(databases.items()):
            say(f"building the model: {name}")
            library = os.path.join(tmp, f"{i}.so")
            try:
                # A model is many kernels: five kernels' build time, at least.
                reply = builder.call(ModelBuildJob(module, target_dict(tgt), library, database),
                                     timeout=config.build_timeout_s * 5)
            except WorkerError as exc:
                found[name] = failed(name, exc)
                continue
            if not isinstance(reply, ModelBuilt):
                found[name] = failed(name, reply)
                continue
            built[name] = (library, reply.build_s, reply.scheduled)
        with device.measuring():
            outputs: dict[str, list[np.ndarray]] = {}
            for i, (name, (library, build_s, scheduled)) in enumerate(built.items()):
                say(f"checking the outputs: {name}")
                path = os.path.join(tmp, f"{i}.out.npz")
                try:
                    reply = runner.call(ModelRunJob(library, inputs, device.ref, path),
                                        timeout=config.run_timeout_s)
                except WorkerError as exc:
                    found[name] = failed(name, exc, build_s=build_s, scheduled=scheduled)
                    continue
                if not isinstance(reply, ModelRan):
                    found[name] = failed(name, reply, build_s=build_s, scheduled=scheduled)
                    continue
                with np.load(path) as data:
                    outputs[name] = [data[f"arr_{j}"] for j in range(len(data.files))]
            checked: dict[str, EndToEnd] = {}
            for name, (_, build_s, scheduled) in built.items():
                if name not in outputs:
                    continue
                if name == reference:
                    checked[name] = EndToEnd(name, "correct", "the reference", None, [],
                                             build_s, scheduled, 0.0)
                    continue
                if reference not in outputs:
                    found[name] = EndToEnd(name, "unchecked", f"the reference {reference!r} "
                                           "did not run", build_s=build_s, scheduled=scheduled)
                    continue
                result = compare(outputs[name], outputs[reference]) \
                    if len(outputs[name]) == len(outputs[reference]) else None
                if result is None or not result.ok:
                    found[name] = EndToEnd(
                        name, "incorrect", result.message if result else
                        f"{len(outputs[name])} outputs, expected {len(outputs[reference])}",
                        build_s=build_s, scheduled=scheduled,
                        max_abs_error=result.max_abs_error if result else None)
                    continue
                checked[name] = EndToEnd(name, "correct", "", None, [], build_s, scheduled,
                                         result.max_abs_error)
            times: dict[str, list[float]] = {name: [] for name in checked}
            for r in range(rounds):
                for name in list(times):
                    say(f"timing round {r + 1}/{rounds}: {name}")
                    job = ModelRunJob(built[name][0], inputs, device.ref, None,
                                      max(1, config.repeat), int(config.min_repeat_ms))
                    try:
                        ran: Any = runner.call(job, timeout=config.run_timeout_s)
                    except WorkerError as exc:
                        ran = exc
                    if not isinstance(ran, ModelRan):
                        e = checked.pop(name)
                        found[name] = failed(name, ran, build_s=e.build_s,
                                             scheduled=e.scheduled)
                        del times[name]
                        continue
                    times[name] += ran.times
        for name, e in checked.items():
            found[name] = EndToEnd(name, "correct", e.message, statistics.median(times[name]),
                                   times[name], e.build_s, e.scheduled, e.max_abs_error)
    return {name: found[name] for name in databases}

