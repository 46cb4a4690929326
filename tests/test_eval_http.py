"""``dragon eval`` over OpenAI-compatible HTTP endpoints (``training.evaluate.http_model``),
against a fake server this test starts: what each request carries (the prompt a local model
gets, n, temperature, the grammar where the mode says), the attempts measured for real
(MetaSchedule's best script for the task, a misspelt copy, a script naming a block the kernel
lacks, and one that writes past its output), and every failure an
``EvalError`` naming the model and the URL."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dragon_dsl.configs import from_flat
from training.evaluate import EvalConfig, EvalError, load_tasks, run_eval
from training.evaluate.http_model import HttpModel, parse_spec
from training.grammars.gbnf import sampling_grammar_as

from .tiny_datagen import TARGET

CONFIG = from_flat(EvalConfig, split="validation", kinds=("construction",), max_tasks=1,
                   attempts=4, temperature=0.7, top_p=0.9, max_new_tokens=256, seed=5, repeat=2,
                   min_repeat_ms=1.0, metaschedule=False,  # MetaSchedule's rival: test_eval_models
                   builders=1)


# Scripts for the validation task (softmax, tests/tiny_datagen.py) that parse: one names a block
# the kernel lacks, one applies and builds but writes past the end of its output.
NOT_APPLIED = 'block "T_softmax_nrm" -> b\n'
PAST_THE_END = ('block "T_softmax_norm" -> b\nloops b -> i, j\n'
                "split i [none, 3] disable_predication=true -> i0, i1\n")
# What each attempt measures as, in the order the server gives the scripts.
STATUSES = ["correct", "parse_error", "apply_error", "incorrect"]


class FakeServer:
    """``POST /v1/completions``: the served model name chooses the behaviour.  ``good``
    answers every choice asked for, ``one`` one per request (as llama.cpp does), each giving
    the scripts in turn; ``fail`` answers HTTP 500, ``reject`` 400, ``garbage`` a body that
    is not JSON, ``empty`` no choices, ``slow`` after 3 s."""

    def __init__(self, scripts: list[str]) -> None:
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, **body})
                model = body["model"]
                if model == "fail":
                    return self._send(500, b'{"error": "out of memory"}')
                if model == "reject":
                    return self._send(400, b"unknown field")
                if model == "garbage":
                    return self._send(200, b"<html>not json</html>")
                if model == "slow":
                    time.sleep(3)
                n = 1 if model == "one" else body["n"]
                done = sum(1 for r in server.requests[:-1] if r["model"] == model
                           and r["prompt"] == body["prompt"])
                first = 0 if model != "one" else done
                choices = [] if model == "empty" else [
                    {"index": i, "text": scripts[(first + i) % len(scripts)],
                     "finish_reason": "stop"}
                    for i in range(n)]
                self._send(200, json.dumps({"object": "text_completion",
                                            "choices": choices}).encode())

            def _send(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address) -> None:
                pass  # a client that timed out has closed the connection: nothing to say

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def of(self, model: str) -> list[dict]:
        return [r for r in self.requests if r["model"] == model]


@pytest.fixture(scope="module")
def task(datagen_dir):
    [task] = load_tasks(datagen_dir, "validation", ("construction",), max_tasks=1)
    return task


@pytest.fixture(scope="module")
def server(task):
    correct = task.metaschedule_script
    malformed = correct.replace("block ", "blok ", 1)
    assert malformed != correct
    fake = FakeServer([correct, malformed, NOT_APPLIED, PAST_THE_END])
    yield fake
    fake.httpd.shutdown()


@pytest.fixture(scope="module")
def evaluation(server, datagen_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval-http") / "out"
    models = {"lark": f"{server.url}#good?grammar=lark",
              "gbnf": f"{server.url}#one?grammar=gbnf",
              "free": f"{server.url}#good?grammar=none"}
    summary = run_eval(models, datagen_dir, out, target=TARGET, config=CONFIG, progress=False)
    return out, models, summary


def test_requests_carry_the_prompt_the_settings_and_the_grammar(evaluation, server, task):
    out, _, _ = evaluation
    [generated] = (out / "generated" / "lark").glob("*.json")
    prompt = json.loads(generated.read_text())["prompt"]
    from codegen.workloads import workload
    from training.prompts.templates import construction_prompt

    assert prompt == construction_prompt(workload(task.workload), TARGET)  # a local model's
    for request in server.requests:
        assert request["path"] == "/v1/completions" and request["prompt"] == prompt
        assert (request["temperature"], request["top_p"], request["max_tokens"],
                request["stop"]) == (0.7, 0.9, 256, ["<end>"])
    [lark] = server.of("good")[:1]
    assert lark["n"] == 4 and "grammar" not in lark
    assert lark["structured_outputs"] == {"grammar": sampling_grammar_as("lark")}
    free = [r for r in server.of("good") if "structured_outputs" not in r]
    assert len(free) == 1 and "grammar" not in free[0] and "guided_grammar" not in free[0]
    # One choice per request: asked again for the rest, the seed moved on.
    one = server.of("one")
    first = one[0]
    assert [r["n"] for r in one] == [4, 3, 2, 1]
    assert [r["seed"] for r in one] == [first["seed"] + i for i in range(4)]
    assert first["grammar"] == sampling_grammar_as("gbnf") and "structured_outputs" not in first
    assert first["seed"] == lark["seed"] == free[0]["seed"]


def test_attempts_are_measured_as_the_server_wrote_them(evaluation):
    out, models, summary = evaluation
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * CONFIG.attempts
    for row in rows:
        assert row["grammar"] == parse_spec(row["model"], models[row["model"]]).grammar
        assert row["status"] == STATUSES[row["attempt"]], row
        if row["attempt"] == 0:  # MetaSchedule's best script, timed here
            assert row["latency_s"] > 0
        else:
            assert row["latency_s"] is None
        if row["attempt"] == 1:
            assert "blok" in row["message"] or "blok" in row["script"]
        if row["attempt"] == 3:
            assert "past the end of T_softmax_norm" in row["message"]
        assert row["finish_reason"] == "end" and row["unscheduled_s"] > 0
    for name in models:
        figures = summary["by_model"][name]["construction"]
        assert figures["attempts"] == 4
        # Distinct shares: counting builds or applies as correct, or parse errors as parsed,
        # changes one of them.
        assert (figures["parses"], figures["applies"], figures["builds"],
                figures["correct"]) == (0.75, 0.5, 0.5, 0.25)
        assert figures["fast_p"]["0"] == 1.0
    manifest = json.loads((out / "eval.json").read_text())
    assert manifest["models"] == models


def test_a_rerun_asks_the_server_nothing(evaluation, server, datagen_dir):
    out, models, summary = evaluation
    before = len(server.requests)
    again = run_eval(models, datagen_dir, out, target=TARGET, config=CONFIG, progress=False)
    assert len(server.requests) == before and again["by_model"] == summary["by_model"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("model,needle", [
    ("fail", 'HTTP 500 Internal Server Error: {"error": "out of memory"}'),
    ("reject", "HTTP 400 Bad Request: unknown field (a server that takes no grammar: add "
               "?grammar=none)"),
    ("garbage", "the reply is not JSON: b'<html>not json</html>'"),
    ("empty", "the reply has no completion choices"),
    ("slow", "no complete answer within 0.5 s"),
])
def test_server_failures_name_the_model_and_the_url(server, model, needle):
    http = HttpModel("m", f"{server.url}#{model}?timeout=0.5")
    with pytest.raises(EvalError) as info:
        http.generate("prompt", None, "llvm", CONFIG, 0)
    message = str(info.value)
    assert message.startswith(f"model 'm' at {server.url}/completions: ") and needle in message


def test_a_server_that_is_down_is_a_clear_error_in_run_eval_and_the_cli(datagen_dir, tmp_path,
                                                                       capsys):
    from dragon_dsl.cli import main

    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(EvalError, match=f"model 'x' at {url}/completions: cannot connect"):
        run_eval({"x": f"{url}#m"}, datagen_dir, tmp_path / "a", target=TARGET, config=CONFIG,
                 progress=False)
    code = main(["eval", "--model", f"x={url}#m", "--data", str(datagen_dir), "--out",
                 str(tmp_path / "b"), "--split", "validation", "--kinds", "construction",
                 "--max-tasks", "1", "-k", "1", "-q", "--target", json.dumps(TARGET)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    last = err.strip().splitlines()[-1]  # (after notes on stale entry points, if any)
    assert last.startswith(f"dragon: model 'x' at {url}/completions: cannot connect")


@pytest.mark.parametrize("spec,needle", [
    ("http://h:8000/v1", "no served model name"),
    ("http://h:8000/v1#", "no served model name"),
    ("ftp://h/v1#m", "not an http(s) URL"),
    ("http://h:99999/v1#m", "Port out of range"),
    ("http://h/v1#m?grammar=regex", "grammar='regex' is not one of lark, lark-guided, gbnf"),
    ("http://h/v1#m?temperature=1", "unknown option 'temperature=1'"),
    ("http://h/v1#m?timeout=0", "timeout='0' is not a positive number"),
    ("http://h/v1#m?key_env=DRAGON_TEST_NO_SUCH_VARIABLE", "no such environment variable"),
])
def test_bad_endpoints_are_refused_before_anything_runs(spec, needle):
    with pytest.raises(EvalError, match=None) as info:
        parse_spec("m", spec)
    assert needle in str(info.value) and str(info.value).startswith(f"--model m={spec}: ")
