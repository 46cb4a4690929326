"""``dragon cost-model``: MetaSchedule's XGBoost cost model trained on ``dragon datagen`` records.

    dragon cost-model --records corpus/llvm --out training/models/dragon-tiny/cost_model.tar
    dragon cost-model --records data/a data/b --out cm.tar --holdout-families softmax,conv2d
    dragon cost-model --records corpus/llvm --out cm.tar --folds 5

Prints how the model trained on the training split ranks the held-out workloads' candidates,
beside MetaSchedule's untrained model; then trains on every record and saves the model (a tar
file, ``XGBModel.save``'s) with the report beside it (``cost_model.json`` for
``cost_model.tar``).  Exit codes (``ExitCode``): 0 saved, 1 records without a correct candidate
to learn from, 2 usage errors (bad flags, a folder without records, a damaged record, an --out
that cannot be written).
"""

from __future__ import annotations

import json
import sys

from dragon_dsl.cli_kit import (
    ExitCode,
    UsageError,
    add_config_arguments,
    config_from_args,
    examples,
)

__all__ = ["register"]


def cmd_cost_model(args) -> int:
    from codegen.search.cost_model import CostModelError
    from dragon_dsl.files import unwritable
    from training.datagen.cost_model import (
        CostModelConfig,
        NothingToLearn,
        report_path,
        run_cost_model,
    )
    from training.datagen.records import DataError

    config = config_from_args(CostModelConfig, args)
    for path in (args.out, report_path(args.out)):
        problem = unwritable(path)  # now, not after the features of every record
        if problem:
            raise UsageError(f"--out {problem}")
    try:
        report = run_cost_model(args.records, args.out, config, progress=not args.quiet)
    except NothingToLearn as exc:
        print(f"dragon: {exc}", file=sys.stderr)
        return ExitCode.FINDINGS
    except (DataError, CostModelError) as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(report.to_dict(), indent=1, sort_keys=True))
        return ExitCode.OK
    skipped = f"{report.skipped_records} skipped: no script, or it no longer applies"
    if report.skipped_workloads:
        skipped += f"; {len(report.skipped_workloads)} workloads that no longer build"
    print(f"cost-model: {report.records} records of {report.workloads} workloads ({skipped})")
    if report.summaries:
        how = (f"{config.folds}-fold cross-validation" if config.folds else
               f"{len(report.heldout)} held-out workloads")
        print(f"ranking the candidates of workloads not trained on ({how}):")
        print("\n".join(report.table()))
    else:
        print("no held-out workload to rank (nothing evaluated)")
    print(f"saved: {report.model_path} ({report.model_bytes / 1e6:.2f} MB; trained on "
          f"{report.trained_on} candidates, {report.kept} kept for online learning); "
          f"report: {report_path(report.model_path)}")
    return ExitCode.OK


def register(subparsers) -> None:
    """Add ``dragon cost-model`` (the ``dragon.commands`` entry point)."""
    from training.datagen.cost_model import CostModelConfig

    p = subparsers.add_parser(
        "cost-model", help="train MetaSchedule's cost model on datagen records, measured",
        description="Train MetaSchedule's XGBoost cost model (its per-store features, its "
                    "XGBModel) on every measured candidate of `dragon datagen` outputs, "
                    "failures included; report how it ranks the candidates of held-out "
                    "workloads beside the untrained model (Kendall tau, top-1 and top-5 "
                    "recall of the measured best, best of the top 5 over the best); then "
                    "train on all records and save the model, a tar file MetaSchedule's "
                    "XGBModel.load reads, with a JSON report beside it.",
        **examples("dragon cost-model --records corpus/llvm "
                   "--out training/models/dragon-tiny/cost_model.tar",
                   "dragon cost-model --records data/a data/b --out cm.tar "
                   "--holdout-families softmax,conv2d",
                   "dragon cost-model --records corpus/llvm --out cm.tar --folds 5"))
    p.add_argument("--records", required=True, nargs="+", metavar="DIR",
                   help="`dragon datagen` output folders (their records/ and tasks/)")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="the saved model (a tar file); the JSON report goes beside it")
    add_config_arguments(p, CostModelConfig)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_cost_model)
