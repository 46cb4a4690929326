"""A kept corpus packs its committed tasks into compressed shards (``RecordStore.pack``,
``dragon datagen --pack``): every task reads back as it was committed, a kill at any moment of
a pack loses and duplicates nothing, a task run again replaces its packed self, and a damaged
shard is named.  The tasks are the repository corpus' own (a real MetaSchedule search,
``corpus/llvm``), committed again into a folder of each test's."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from pathlib import Path

import pytest

from training.datagen.records import DataError, RecordStore, TaskSummary, read_shard, shard_paths

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "llvm"


@pytest.fixture(scope="module")
def kept() -> dict[str, tuple[TaskSummary, list]]:
    """Six of the corpus' committed tasks (failed ones included, if any): key -> (summary,
    records)."""
    store = RecordStore(str(CORPUS))
    done = store.done()
    assert len(done) >= 6, "the kept corpus holds at least six tasks"
    keys = sorted(done)[:6]
    return {k: (done[k], store.read(k) if done[k].status != "failed" else []) for k in keys}


def _loose(root: Path, kept) -> RecordStore:
    store = RecordStore(str(root))
    for summary, records in kept.values():
        store.commit(summary, records)
    return store


def _everything(store: RecordStore) -> dict[str, tuple[TaskSummary, list]]:
    done = store.done()
    return {k: (s, store.read(k) if s.status != "failed" else []) for k, s in done.items()}


def test_packed_tasks_read_back_as_committed(tmp_path, kept):
    store = _loose(tmp_path / "a", kept)
    before = _everything(store)
    written = store.pack(per_shard=4)
    assert [os.path.basename(p) for p in written] == ["00000.jsonl.gz", "00001.jsonl.gz"]
    assert os.listdir(store.tasks_dir) == [] and os.listdir(store.records_dir) == []
    again = RecordStore(store.root)                       # a new reader: from the shards alone
    assert _everything(again) == before == kept
    assert list(again.all_records()) == [r for k in sorted(kept) for r in kept[k][1]]
    assert [len(list(read_shard(p))) for p in shard_paths(again.shards_dir)] == [4, 2]
    # The same tasks give the same bytes: a shard kept in git does not change when repacked
    # (gzip's header holds no time stamp).
    assert all(Path(p).read_bytes()[4:8] == bytes(4) for p in written)
    other = _loose(tmp_path / "b", kept)
    other.pack(per_shard=4)
    assert [Path(p).read_bytes() for p in shard_paths(other.shards_dir)] == \
        [Path(p).read_bytes() for p in shard_paths(again.shards_dir)]


def test_a_later_pack_fills_the_last_shard_first(tmp_path, kept):
    keys = sorted(kept)
    store = _loose(tmp_path, {k: kept[k] for k in keys[:3]})
    store.pack(per_shard=4)
    for k in keys[3:]:
        store.commit(*kept[k])
    assert RecordStore(store.root).done().keys() == kept.keys()  # loose and packed, read as one
    written = store.pack(per_shard=4)
    assert [os.path.basename(p) for p in written] == ["00000.jsonl.gz", "00001.jsonl.gz"]
    assert [[p.summary.key for p in read_shard(s)] for s in shard_paths(store.shards_dir)] == \
        [keys[:4], keys[4:]]
    assert _everything(RecordStore(store.root)) == kept
    assert store.pack() == []                                    # nothing loose: nothing written


def test_a_pack_killed_before_its_clean_up_loses_and_repeats_nothing(tmp_path, kept,
                                                                     monkeypatch):
    store = _loose(tmp_path, kept)
    removed = []

    def killed(self, key):                 # the shard is whole; the process dies before this
        removed.append(key)
        raise KeyboardInterrupt

    monkeypatch.setattr(RecordStore, "_remove_loose", killed)
    with pytest.raises(KeyboardInterrupt):
        store.pack()
    monkeypatch.undo()
    assert removed and len(os.listdir(store.tasks_dir)) == len(kept)  # all still loose too
    reader = RecordStore(store.root)
    assert _everything(reader) == kept                                # each task read once
    assert reader.pack() == []         # the packed copies stand: the loose ones are removed
    assert os.listdir(store.tasks_dir) == [] and _everything(RecordStore(store.root)) == kept


def test_a_task_run_again_replaces_its_packed_self(tmp_path, kept):
    store = _loose(tmp_path, kept)
    store.pack()
    key = sorted(kept)[0]
    summary, records = kept[key]
    rerun = dataclasses.replace(summary, attempts=summary.attempts + 1, extra={"rerun": True})
    store.commit(rerun, records[:1])       # as --retry-failed commits a task it ran again
    assert RecordStore(store.root).done()[key] == rerun
    assert RecordStore(store.root).read(key) == records[:1]
    written = store.pack()
    assert written == shard_paths(store.shards_dir)
    reader = RecordStore(store.root)
    assert reader.done()[key] == rerun and reader.read(key) == records[:1]
    assert {k: v for k, v in _everything(reader).items() if k != key} == \
        {k: v for k, v in kept.items() if k != key}
    with pytest.raises(DataError, match="is packed in .*a packed task is kept"):
        reader.forget(key)


def test_a_damaged_shard_is_named(tmp_path, kept):
    store = _loose(tmp_path, kept)
    [path] = store.pack()
    data = gzip.decompress(Path(path).read_bytes()).decode()
    Path(path).write_bytes(Path(path).read_bytes()[:100])             # cut short
    with pytest.raises(DataError, match=r"00000\.jsonl\.gz: not a gzip shard of tasks"):
        RecordStore(store.root).done()
    lines = data.splitlines()
    Path(path).write_bytes(gzip.compress(("\n".join([lines[0], "{}", *lines[2:]]) + "\n")
                                         .encode()))
    with pytest.raises(DataError, match=r"00000\.jsonl\.gz:2: not a packed task"):
        RecordStore(store.root).done()
    task = json.loads(lines[0])
    task["records"][0] = {"workload": task["summary"]["workload"]}   # a record without fields
    Path(path).write_bytes(gzip.compress(("\n".join([json.dumps(task), *lines[1:]]) + "\n")
                                         .encode()))
    key = task["summary"]["key"]
    assert key in RecordStore(store.root).done()                      # the summary is fine
    with pytest.raises(DataError, match=rf"00000\.jsonl\.gz:1: record 0 of task {key} is not "
                                        r"a record \(missing field"):
        RecordStore(store.root).read(key)
