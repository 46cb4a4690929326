"""Hostile use of ``dragon eval`` (issue 24): model names that share a folder, counts and
sampling settings that are no counts or settings, servers that drip, flood or nest their
replies, an ``--out`` that cannot be written, and damaged data or models.  Each ends in one
``dragon: ...`` line, exit 2 (``ExitCode.USAGE``), no traceback and bounded time, before any
request where the flags alone are wrong; nothing is reported under another model's name.  In
process (``dragon_dsl.cli.main``), against a fake OpenAI-compatible server started here."""

from __future__ import annotations

import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from training.evaluate import TaskError, load_tasks

from .test_hostile import USAGE, one_line, run

# One task (the validation split's softmax, tests/tiny_datagen.py), one attempt, timed once.
SMALL = ["--split", "validation", "--kinds", "construction", "--max-tasks", "1", "-k", "1",
         "--repeat", "1", "--min-repeat-ms", "1", "--no-metaschedule", "--builders", "1", "-q"]
DRIP_FOR_S = 8.0  # the dripping server gives up by itself then (the unbounded client waited)


class Server:
    """``POST /v1/completions``; the served model's name chooses the answer: ``good`` one
    correct script per choice, ``drip`` a byte every 0.1 s, ``flood`` 3 MB of text (with its
    length), ``stream`` the same without a length, ``deep`` JSON nested 100,000 deep."""

    def __init__(self, script: str) -> None:
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                model = body["model"]
                if model == "drip":
                    self.send_response(200)
                    self.send_header("Content-Length", str(10**6))
                    self.end_headers()
                    end = time.monotonic() + DRIP_FOR_S
                    while time.monotonic() < end:
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.1)
                    return
                if model in ("flood", "stream"):
                    text = "x" * (3 << 20)
                elif model == "deep":
                    return self._send(b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                                      length=True)
                else:
                    text = script
                choices = [{"index": i, "text": text, "finish_reason": "stop"}
                           for i in range(body["n"])]
                self._send(json.dumps({"choices": choices}).encode(), length=model != "stream")

            def _send(self, data: bytes, *, length: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if length:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Quiet(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address) -> None:
                pass  # a client that gave up has closed the connection

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def model(self, name: str, served: str = "good", options: str = "") -> str:
        return f"{name}={self.url}#{served}{options}"


@pytest.fixture(scope="module")
def server(datagen_dir):
    [task] = load_tasks(datagen_dir, "validation", ("construction",), max_tasks=1)
    fake = Server(task.metaschedule_script)
    yield fake
    fake.httpd.shutdown()


def evaluate(capsys, data, out, *models: str, extra=(), seconds: float = 60.0):
    argv = ["eval", *(a for m in models for a in ("--model", m)), "--data", data, "--out", out,
            *SMALL, *extra]
    return run(argv, capsys, seconds=seconds)


def refused(capsys, data, out, *models: str, extra=(), seconds: float = 60.0) -> str:
    code, _, err = evaluate(capsys, data, out, *models, extra=extra, seconds=seconds)
    assert code == USAGE, err
    return one_line(err)


@pytest.fixture(scope="module")
def evaluated(server, datagen_dir, tmp_path_factory):
    """A finished evaluation of the model ``a_b`` (served: the task's correct script)."""
    from dragon_dsl.cli import main

    out = tmp_path_factory.mktemp("hostile-eval") / "out"
    argv = ["eval", "--model", server.model("a_b"), "--data", datagen_dir, "--out", out, *SMALL]
    assert main([str(a) for a in argv]) == 0
    return out


# ---- 1. model names map to distinct folders ---------------------------------------------------

def test_two_model_names_with_one_folder_are_refused_naming_both(server, datagen_dir, tmp_path,
                                                                 capsys):
    before = len(server.requests)
    line = refused(capsys, datagen_dir, tmp_path / "out", server.model("a b"),
                   server.model("a_b"))
    assert line.startswith("dragon: ") and "'a b'" in line and "'a_b'" in line
    assert len(server.requests) == before  # refused before any request


@pytest.mark.slow  # the evaluation it resumes measures for about 30 s
def test_a_model_whose_folder_a_resumed_evaluation_holds_is_refused(server, datagen_dir,
                                                                    evaluated, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(evaluated, out)
    line = refused(capsys, datagen_dir, out, server.model("a b"))
    assert "'a b'" in line and "'a_b'" in line
    for name in (".", ".."):
        assert "cannot name a folder" in refused(capsys, datagen_dir, tmp_path / "o2",
                                                 server.model(name))


# ---- 2, 3, 5. counts and settings, refused before any request ---------------------------------

@pytest.mark.parametrize(("flags", "field"), [
    (["--max-tasks", "-1"], "max_tasks"), (["--max-tasks", "0"], "max_tasks"),
    (["--temperature", "-1"], "temperature"), (["--temperature", "inf"], "temperature"),
    (["--top-p", "7"], "top_p"), (["--max-new-tokens", "-5"], "max_new_tokens"),
    (["--repeat", "0"], "repeat"), (["--tie", "nan"], "tie"), (["--builders", "0"], "builders"),
    (["--min-unscheduled-us", "-50"], "min_unscheduled_us"),
    (["--min-unscheduled-us", "inf"], "min_unscheduled_us"),
    (["--sample-tasks", "0"], "sample_tasks"),
    (["--sample-tasks", "2", "--max-tasks", "2"], "sample_tasks"),
])
def test_a_bad_count_or_setting_is_refused_before_any_request(flags, field, server, datagen_dir,
                                                              tmp_path, capsys):
    before = len(server.requests)
    line = refused(capsys, datagen_dir, tmp_path / "out", server.model("m"), extra=flags)
    assert line.startswith("dragon: ") and field in line
    assert len(server.requests) == before
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_load_tasks_refuses_a_count_that_is_not_positive(datagen_dir):
    with pytest.raises(TaskError, match="max_tasks"):
        load_tasks(datagen_dir, "validation", ("construction",), max_tasks=-1)
    assert len(load_tasks(datagen_dir, "validation", ("construction",), max_tasks=None)) == 1
    with pytest.raises(TaskError, match="sample"):
        load_tasks(datagen_dir, "validation", ("construction",), sample=0)


def test_sample_tasks_draws_a_seeded_part_of_the_split_in_its_order():
    """On the kept corpus' test split (workload by workload, so its first tasks are a few
    families): the same seed draws the same tasks, another seed others, the drawn keep the
    split's order and are not its first ones; a sample past the split's size is all of it."""
    corpus = Path(__file__).resolve().parent.parent / "corpus" / "llvm"
    every = load_tasks(corpus, "test", ("refinement",))
    drawn = load_tasks(corpus, "test", ("refinement",), sample=20, seed=0)
    assert len(drawn) == 20 and drawn == load_tasks(corpus, "test", ("refinement",), sample=20)
    assert drawn != load_tasks(corpus, "test", ("refinement",), sample=20, seed=1)
    where = [every.index(task) for task in drawn]
    assert where == sorted(where) and where != list(range(20))
    assert load_tasks(corpus, "test", ("refinement",), sample=len(every) + 1) == every


# ---- 4. a server that drips, floods or nests --------------------------------------------------

def test_a_dripping_server_is_bounded_by_the_whole_request_timeout(server, datagen_dir, tmp_path,
                                                                   capsys):
    start = time.perf_counter()
    line = refused(capsys, datagen_dir, tmp_path / "out", server.model("m", "drip", "?timeout=1"),
                   seconds=60)
    assert time.perf_counter() - start < DRIP_FOR_S - 2  # well before the server gives up
    assert "no complete answer within 1 s" in line and server.url in line and "'m'" in line


@pytest.mark.parametrize("served", ["flood", "stream"])
def test_an_oversized_reply_is_refused_naming_the_model_and_url(served, server, datagen_dir,
                                                                tmp_path, capsys):
    line = refused(capsys, datagen_dir, tmp_path / "out", server.model("m", served))
    assert "bytes" in line and server.url in line and "'m'" in line


def test_a_deeply_nested_reply_is_a_clear_error(server, datagen_dir, tmp_path, capsys):
    line = refused(capsys, datagen_dir, tmp_path / "out", server.model("m", "deep"))
    assert "nests JSON too deeply" in line and server.url in line


# ---- 6. an --out that cannot be written -------------------------------------------------------

def test_an_out_that_is_a_file_or_unwritable_is_refused_before_any_request(server, datagen_dir,
                                                                           tmp_path, capsys):
    before = len(server.requests)
    a_file = tmp_path / "file"
    a_file.write_text("mine\n")
    line = refused(capsys, datagen_dir, a_file, server.model("m"))
    assert line == f"dragon: --out {a_file}: exists and is not a directory"
    assert a_file.read_text() == "mine\n"
    # sysfs takes no new files, not even from root (a chmod would not stop root)
    line = refused(capsys, datagen_dir, "/sys/dragon-eval", server.model("m"))
    assert line.startswith("dragon: --out /sys/dragon-eval: cannot create a file in /sys")
    assert len(server.requests) == before


@pytest.mark.slow  # the evaluation it resumes measures for about 30 s
def test_a_result_that_cannot_be_written_is_shown_and_says_where(server, datagen_dir, evaluated,
                                                                 tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(evaluated, out)
    (out / "summary.json").unlink()
    (out / "summary.json").mkdir()  # the run is measured; only its summary cannot be written
    code, stdout, err = evaluate(capsys, datagen_dir, out, server.model("a_b"))
    assert code == USAGE, err
    assert "a_b" in stdout and "correct" in stdout  # the result, shown instead
    line = one_line(err)
    assert line.startswith("dragon: the result above could not be written to ")
    assert str(out / "summary.json") in line


# ---- 7. damaged data and models ---------------------------------------------------------------

@pytest.fixture
def data_copy(datagen_dir, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(datagen_dir, copy, ignore=shutil.ignore_patterns("records*"))
    return copy


def test_a_corrupt_dataset_dict_names_the_file(server, data_copy, tmp_path, capsys):
    damaged = data_copy / "construction" / "dataset_dict.json"
    damaged.write_text('{"splits": [')
    line = refused(capsys, data_copy, tmp_path / "out", server.model("m"))
    assert line.startswith(f"dragon: {damaged}: not a readable dataset file")


def test_a_truncated_arrow_file_names_the_file(server, data_copy, tmp_path, capsys):
    [damaged] = (data_copy / "construction" / "validation").glob("*.arrow")
    damaged.write_bytes(damaged.read_bytes()[:900])
    line = refused(capsys, data_copy, tmp_path / "out", server.model("m"))
    assert line.startswith(f"dragon: {damaged}: not a readable dataset file")


def test_a_truncated_model_names_the_weights_file(datagen_dir, tmp_path, capsys):
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path / "model"
    LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                 num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=2)).save_pretrained(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:weights.stat().st_size // 2])
    line = refused(capsys, datagen_dir, tmp_path / "out", f"m={folder}")
    assert line.startswith(f"dragon: model 'm': cannot load {weights}: ")
