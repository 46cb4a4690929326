"""A small `dragon datagen` output for the training tests (``dragon sft``, ``dragon rl``): a real
MetaSchedule search of two tiny workloads, committed as `dragon datagen` commits it (manifest,
records), then its datasets.  By identity hash, softmax falls in validation (fraction 0.4) and
matmul in train."""

from __future__ import annotations

from pathlib import Path

SPECS = ["matmul(m=32,n=32,k=32)", "softmax(m=32,n=64)"]
TARGET = {"kind": "llvm", "num-cores": 2}


def write_datagen(root: Path) -> Path:
    """``root/out``: the datagen manifest, the records of a real search of ``SPECS`` and the
    construction and refinement datasets, one workload's examples in the validation split."""
    from codegen.measure import MeasureConfig
    from codegen.search.tune import SearchConfig
    from training.datagen.dataset import write_datasets
    from training.datagen.examples import ExampleConfig, build_examples
    from training.datagen.generate import check_manifest
    from training.datagen.records import RecordStore
    from training.datagen.runner import RunnerSettings, TaskRunner
    from training.datagen.tasks import tasks_for

    out = root / "out"
    tasks = tasks_for(SPECS, TARGET, "llvm", SearchConfig(trials=16, per_round=8, population=32),
                      300)
    out.mkdir(parents=True)
    check_manifest(str(out), {"target": TARGET}, tasks)
    runner = TaskRunner(RunnerSettings(MeasureConfig(repeat=2, min_repeat_ms=1),
                                       cache=str(root / "cache.sqlite")))
    store = RecordStore(str(out))
    try:
        for task in tasks:
            result = runner.run(task)
            store.commit(result.summary, result.records)
    finally:
        runner.close()
    records = list(store.all_records())
    examples = build_examples(records, ExampleConfig(validation_fraction=0.4, test_fraction=0.0))
    write_datasets(str(out), examples, records)
    return out
