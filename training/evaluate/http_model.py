"""A model behind an OpenAI-compatible HTTP endpoint (vLLM, llama.cpp, SGLang, a hosted API),
for ``dragon eval``.

    --model NAME=http://HOST:PORT/v1#SERVED_MODEL[?grammar=lark&timeout=600&key_env=VAR]

Attempts come from ``POST /v1/completions`` with the prompt a local model gets, ``n``,
``temperature``, ``top_p``, ``max_tokens``, ``seed`` and the end marker as ``stop``; a server
that returns fewer choices than asked (llama.cpp gives one) is asked again for the rest, the
seed moved on.  ``grammar`` says how the sampling grammar (``dragon grammar``, scripts that may
end with ``<end>``) goes with each request (``GRAMMAR_MODES``): ``lark`` (the default) for
vLLM's ``structured_outputs.grammar`` (its guidance backend reads llguidance Lark),
``lark-guided`` for vLLM before v0.12 (``guided_grammar``), ``gbnf`` for llama.cpp's ``grammar``
field, ``gbnf-vllm`` for vLLM's xgrammar backend, ``none`` for no constraint.  ``key_env`` names
an environment variable holding a bearer token (never written to the evaluation's files).

No schedule-aware decoding here: an attempt is measured as the server wrote it.  Every failure
(connection refused, HTTP 4xx/5xx, a reply that is not a completion, a timeout) is an
``EvalError`` naming the model and the URL.  ``timeout`` bounds each request as a whole, from
connecting to the reply's last byte (a server that drips bytes cannot stretch it), and a reply
is read to at most ``reply_limit`` bytes and parsed to a bounded depth (``json`` nesting past
Python's recursion limit is an ``EvalError`` too).  Standard library only (``urllib``).
"""

from __future__ import annotations

import functools
import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

from training.evaluate.errors import EvalError
from training.grammars.gbnf import sampling_grammar_as
from training.prompts.templates import STOP, PromptConfig, split_completion

if TYPE_CHECKING:
    from codegen.targets import TargetLike
    from codegen.workloads.workload import WorkloadLike

__all__ = ["GRAMMAR_MODES", "HttpModel", "HttpSpec", "parse_spec"]

# mode -> (grammar format, where the request carries it)
GRAMMAR_MODES: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "lark": ("lark", ("structured_outputs", "grammar")),
    "lark-guided": ("lark", ("guided_grammar",)),
    "gbnf": ("gbnf", ("grammar",)),
    "gbnf-vllm": ("gbnf", ("structured_outputs", "grammar")),
    "none": (None, ()),
}
_OPTIONS = ("grammar", "timeout", "key_env")
_FINISH = {"stop": "end", "length": "length"}
# A reply may hold this much besides its text, plus this many bytes per token asked for (JSON
# escapes included): a completion of n x max_tokens never comes near; 80 MB of junk does.
_REPLY_BASE = 1 << 20
_REPLY_PER_TOKEN = 64
_CHUNK = 1 << 16


def reply_limit(n: int, max_tokens: int) -> int:
    """The most bytes read of a reply to ``n`` completions of ``max_tokens`` tokens.

    >>> reply_limit(4, 640)
    1212416
    """
    return _REPLY_BASE + n * max_tokens * _REPLY_PER_TOKEN


class HttpSpec:
    """``http://host:port/v1#served-model?options``, read and checked."""

    def __init__(self, url: str, model: str, grammar: str = "lark", timeout_s: float = 600.0,
                 key_env: str | None = None) -> None:
        self.url, self.model, self.grammar = url, model, grammar
        self.timeout_s, self.key_env = timeout_s, key_env


def parse_spec(name: str, text: str) -> HttpSpec:
    """The endpoint of ``--model NAME=TEXT``; EvalError naming what is wrong.

    >>> s = parse_spec("m", "http://localhost:8000/v1#qwen?grammar=gbnf")
    >>> s.url, s.model, s.grammar
    ('http://localhost:8000/v1', 'qwen', 'gbnf')
    """
    def bad(what: str) -> EvalError:
        return EvalError(f"--model {name}={text}: {what}; expected "
                         "NAME=http://HOST:PORT/v1#SERVED_MODEL[?grammar=MODE&timeout=S]")

    url, _, fragment = text.partition("#")
    model, _, query = fragment.partition("?")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad("not an http(s) URL with a host")
    try:
        parts.port  # noqa: B018  (a bad port raises)
    except ValueError as exc:
        raise bad(str(exc)) from None
    if not model:
        raise bad("no served model name after '#'")
    options: dict[str, str] = {}
    for pair in query.split("&") if query else []:
        key, sep, value = pair.partition("=")
        if not sep or key not in _OPTIONS:
            raise bad(f"unknown option {pair!r} (options: {', '.join(_OPTIONS)})")
        options[key] = value
    grammar = options.get("grammar", "lark")
    if grammar not in GRAMMAR_MODES:
        raise bad(f"grammar={grammar!r} is not one of {', '.join(GRAMMAR_MODES)}")
    try:
        timeout = float(options.get("timeout", "600"))
    except ValueError:
        timeout = -1.0
    if not timeout > 0:
        raise bad(f"timeout={options['timeout']!r} is not a positive number of seconds")
    key_env = options.get("key_env") or None
    if key_env is not None and not os.environ.get(key_env):
        raise bad(f"key_env={key_env}: no such environment variable is set")
    return HttpSpec(url.rstrip("/"), urllib.parse.unquote(model), grammar, timeout, key_env)


@functools.cache
def _grammar(fmt: str) -> str:
    return sampling_grammar_as(fmt)


class HttpModel:
    """A served model; ``generate`` gives ``config.attempts`` samples of one prompt."""

    def __init__(self, name: str, spec: str) -> None:
        self.name, self.source = name, spec
        self.prompt_config = PromptConfig()  # a served model is asked in the default format
        self.spec = parse_spec(name, spec)
        self.endpoint = f"{self.spec.url}/completions"

    def close(self) -> None:
        pass

    def request_body(self, prompt: str, config: Any, n: int, seed: int) -> dict[str, Any]:
        """The JSON of one completions request."""
        body: dict[str, Any] = {
            "model": self.spec.model, "prompt": prompt, "n": n,
            "temperature": config.sampling.temperature, "top_p": config.sampling.top_p,
            "max_tokens": config.sampling.max_new_tokens, "seed": seed, "stop": [STOP]}
        fmt, path = GRAMMAR_MODES[self.spec.grammar]
        if fmt is not None:
            *outer, last = path
            place = body
            for key in outer:
                place = place.setdefault(key, {})
            place[last] = _grammar(fmt)
        return body

    def generate(self, prompt: str, workload: WorkloadLike, target: TargetLike, config: Any,
                 seed: int) -> list[dict[str, Any]]:
        samples: list[dict[str, Any]] = []
        while len(samples) < config.attempts:
            choices = self._complete(self.request_body(
                prompt, config, config.attempts - len(samples), seed + len(samples)))
            for choice in choices[:config.attempts - len(samples)]:
                text = choice["text"]
                reason = choice.get("finish_reason")
                reason = reason[:40] if isinstance(reason, str) else str(None)
                samples.append({"script": split_completion(text, require_end=False),
                                "finish_reason": _FINISH.get(reason, reason),
                                "completion": text, "grammar": self.spec.grammar})
        return samples

    def _fail(self, what: str) -> EvalError:
        return EvalError(f"model {self.name!r} at {self.endpoint}: {what}")

    def _complete(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The choices of one request, in index order; EvalError on any failure."""
        raw = self._post(body, reply_limit(body["n"], body["max_tokens"]))
        try:
            reply = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise self._fail(f"the reply is not JSON: {raw[:120]!r}") from None
        except RecursionError:
            raise self._fail(f"the reply nests JSON too deeply: {raw[:60]!r}...") from None
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or not choices or not all(
                isinstance(c, dict) and isinstance(c.get("text"), str) for c in choices):
            raise self._fail(f"the reply has no completion choices with text: "
                             f"{raw[:200]!r}")
        return sorted(choices, key=lambda c: c.get("index", 0)
                      if isinstance(c.get("index", 0), int) else 0)

    def _post(self, body: dict[str, Any], limit: int) -> bytes:
        """The reply's bytes, within ``timeout`` seconds in all and ``limit`` bytes; the
        exchange runs in a thread so that no server, however slow to drip, holds us longer."""
        headers = {"Content-Type": "application/json"}
        if self.spec.key_env:
            headers["Authorization"] = f"Bearer {os.environ.get(self.spec.key_env, '')}"
        request = urllib.request.Request(self.endpoint, data=json.dumps(body).encode(),
                                         headers=headers, method="POST")
        result: dict[str, Any] = {}
        cancelled = threading.Event()

        def exchange() -> None:
            try:
                result["raw"] = self._read(request, limit, cancelled)
            except BaseException as exc:  # noqa: BLE001  handed to the waiting thread
                result["error"] = exc

        worker = threading.Thread(target=exchange, name=f"eval-http-{self.name}", daemon=True)
        worker.start()
        worker.join(self.spec.timeout_s)
        if worker.is_alive():
            cancelled.set()  # the worker stops at its next read; nobody waits for it
            raise self._fail(f"no complete answer within {self.spec.timeout_s:g} s")
        if "error" in result:
            raise result["error"]
        return result["raw"]

    def _read(self, request: urllib.request.Request, limit: int,
              cancelled: threading.Event) -> bytes:
        try:
            with urllib.request.urlopen(request, timeout=self.spec.timeout_s) as response:
                length = response.headers.get("Content-Length")
                if length and length.isdigit() and int(length) > limit:
                    raise self._fail(f"the reply would be {int(length)} bytes, more than the "
                                     f"{limit} a completion of this request can need")
                chunks, size = [], 0
                while not cancelled.is_set():
                    chunk = response.read1(_CHUNK)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > limit:
                        raise self._fail(f"the reply is longer than the {limit} bytes a "
                                         "completion of this request can need")
                    chunks.append(chunk)
                return b"".join(chunks)
        except urllib.error.HTTPError as exc:
            detail = exc.read(400).decode("utf-8", "replace").strip()
            hint = (" (a server that takes no grammar: add ?grammar=none)"
                    if exc.code in (400, 422) and self.spec.grammar != "none" else "")
            raise self._fail(f"HTTP {exc.code} {exc.reason}: {detail[:300]}{hint}") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                raise self._fail(f"no complete answer within {self.spec.timeout_s:g} s") from None
            raise self._fail(f"cannot connect ({reason})") from None
        except TimeoutError:
            raise self._fail(f"no complete answer within {self.spec.timeout_s:g} s") from None
        except (OSError, ValueError) as exc:  # a connection reset, a malformed status line
            raise self._fail(f"{type(exc).__name__}: {exc}") from None
