"""Examples as Hugging Face datasets on disk, written so that a reader never sees half of one.

    OUT/construction/     DatasetDict (train, validation, test), ``datasets.load_from_disk``
    OUT/refinement/       the same, for refinement
    OUT/records.jsonl.gz  every record of every committed task, failures included, in task
                          order (one JSON object per line, as in OUT/records/<task>.jsonl);
                          ``datasets.load_dataset("json", data_files=...)`` reads it

Each dataset is saved into a temporary folder inside OUT and renamed into place; an older one
under the final name is first renamed aside and removed after, so the final name holds a
complete dataset or, for an instant, nothing.  Every split exists, empty or not, with the
columns of ``construction_features()`` or ``refinement_features()``.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable
from typing import Any

from dragon_dsl.files import atomic_file, replace_dir
from training.datagen.examples import SPLITS, Examples
from training.datagen.records import Record
from training.prompts.templates import PROMPT_VERSION, PromptConfig, reformat

__all__ = ["FEATURES", "RECORDS_FILE", "TASKS", "construction_features", "dataset_dict",
           "in_prompt_format", "refinement_features", "save_atomically", "write_datasets",
           "write_records"]

RECORDS_FILE = "records.jsonl.gz"
TASKS = ("construction", "refinement")


def _features(extra: dict[str, str]) -> Any:
    from datasets import Features, Value

    common = {"task": "string", "workload": "string", "workload_id": "string",
              "family": "string", "target": "string", "device": "string", "rules": "string",
              "holdout": "string", "prompt_version": "int32", "prompt": "string",
              "completion": "string", "script": "string", "latency_s": "float64",
              "spread_s": "float64", "verified": "bool"}
    return Features({name: Value(dtype) for name, dtype in {**common, **extra}.items()})


def construction_features() -> Any:
    """The columns of ``OUT/construction``."""
    return _features({"best_latency_s": "float64", "rank": "int32"})


def refinement_features() -> Any:
    """The columns of ``OUT/refinement``."""
    return _features({"start_script": "string", "start_latency_s": "float64",
                      "start_spread_s": "float64", "start_index": "int32",
                      "start_third": "string", "speedup": "float64"})


FEATURES = {"construction": construction_features, "refinement": refinement_features}


def dataset_dict(rows: dict[str, list[dict[str, Any]]], features: Any) -> Any:
    """A ``DatasetDict`` with every split of ``SPLITS``, empty ones included.

    >>> dataset_dict({}, construction_features())["test"].num_rows
    0
    """
    from datasets import Dataset, DatasetDict

    names = set(features)
    for split, split_rows in rows.items():
        for row in split_rows:
            if set(row) != names:
                raise ValueError(f"Expected the columns {sorted(names)} but got a {split} row "
                                 f"with {sorted(row)}")
    # Column by column: from_list cannot type an empty split.
    return DatasetDict({split: Dataset.from_dict(
        {name: [row[name] for row in rows.get(split, [])] for name in features},
        features=features) for split in SPLITS})


def in_prompt_format(rows: Any, config: PromptConfig) -> Any:
    """Dataset rows (format ``PROMPT_VERSION``, as datasets are written) with their ``prompt``
    and, where there is one, ``completion`` as a model of ``config``'s format reads and writes
    them (``training.prompts.reformat``), in memory; the rows themselves for the default."""
    if config.version == PROMPT_VERSION:
        return rows
    completions = "completion" in rows.column_names

    def one(row: dict[str, Any]) -> dict[str, str]:
        prompt, completion = reformat(row["prompt"], row["completion"] if completions else "",
                                      config)
        return {"prompt": prompt, "completion": completion} if completions else {"prompt": prompt}

    return rows.map(one, load_from_cache_file=False, keep_in_memory=True)


def save_atomically(data: Any, path: str) -> None:
    """``data.save_to_disk`` into a temporary folder beside ``path``, then renamed to it
    (``dragon_dsl.files.replace_dir``)."""
    with replace_dir(path) as tmp:
        _save(data, tmp)


def _save(data: Any, path: str) -> None:
    from datasets.utils import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    # An empty split saved with no shard cannot be loaded back: give it one (empty) shard.
    shards = {split: 1 if len(part) == 0 else None for split, part in data.items()}
    quiet = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        data.save_to_disk(path, num_shards=shards)
    finally:
        if not quiet:
            enable_progress_bars()


def write_records(out: str, records: Iterable[Record]) -> str:
    """Every record, gzipped JSONL, to ``OUT/records.jsonl.gz`` (through ``atomic_file``)."""
    path = os.path.join(out, RECORDS_FILE)
    with atomic_file(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for record in records:
            f.write((record.to_json() + "\n").encode())
    return path


def write_datasets(out: str, examples: Examples,
                   records: Iterable[Record] | None = None) -> dict[str, str]:
    """Write ``OUT/construction``, ``OUT/refinement`` and (given ``records``) the records
    file; the paths written, by name.

    >>> import tempfile
    >>> from training.datagen.examples import build_examples
    >>> sorted(write_datasets(tempfile.mkdtemp(), build_examples([])))
    ['construction', 'refinement']
    """
    paths = {}
    for task in TASKS:
        path = os.path.join(out, task)
        save_atomically(dataset_dict(getattr(examples, task), FEATURES[task]()), path)
        paths[task] = path
    if records is not None:
        paths["records"] = write_records(out, records)
    return paths
