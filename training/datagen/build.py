"""From a datagen directory's committed records to its datasets and card, in one call.

Building reads only committed tasks (``RecordStore.all_records``) and is deterministic, so it
runs again after every ``dragon datagen`` invocation (a resumed run, other selection flags)
and always describes the records on disk.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from training.datagen.card import write_card
from training.datagen.dataset import write_datasets
from training.datagen.examples import ExampleConfig, Examples, build_examples
from training.datagen.generate import MANIFEST
from training.datagen.records import RecordStore

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["BuildReport", "build_datasets"]


@dataclass
class BuildReport:
    examples: Examples
    paths: dict[str, str]
    card: str

    @property
    def count(self) -> int:
        return sum(len(rows) for task in (self.examples.construction, self.examples.refinement)
                   for rows in task.values())

    def __str__(self) -> str:
        summary = self.examples.summary()
        parts = []
        for task in ("construction", "refinement"):
            counts = summary[task]
            parts.append(f"{task} {sum(counts.values())} "
                         f"({', '.join(f'{k} {v}' for k, v in counts.items())})")
        skipped = sum(summary["skipped"].values())
        return (f"datasets: {'; '.join(parts)} from {summary['records']} records of "
                f"{summary['workloads']} workloads"
                + (f"; {skipped} scripts skipped (see the card)" if skipped else "")
                + f" -> {os.path.dirname(self.card)}")


def _generation(out: str) -> dict[str, Any]:
    try:
        with open(os.path.join(out, MANIFEST), encoding="utf-8") as f:
            settings = json.load(f).get("settings", {})
    except (OSError, ValueError):
        return {}
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def build_datasets(out: str, config: ExampleConfig | None = None, *,
                   tokenizer: PreTrainedTokenizerBase | None = None,
                   progress: bool = False) -> BuildReport:
    """Build the construction and refinement datasets of ``out`` and write them, the records
    file and the card."""
    store = RecordStore(out)
    records = list(store.all_records())
    examples = build_examples(records, config, progress=progress)
    paths = write_datasets(out, examples, records)
    card = write_card(out, examples, tokenizer=tokenizer, generation=_generation(out))
    return BuildReport(examples, paths, card)
