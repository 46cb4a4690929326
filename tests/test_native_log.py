"""TVM's native log goes through ``logging``: each kind of message once per process."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from dragon_dsl.tvm_support import native_log


def test_native_lines_are_logged_once_and_other_output_passes_through(caplog, capfd):
    line = b"[22:42:39] /project/include/tvm/x.h:12: Warning: once per kind, %d\n"
    with caplog.at_level(logging.WARNING, logger="tvm"):
        with native_log():
            for _ in range(3):
                os.write(2, line % 1)
            os.write(2, line % 2)
            os.write(2, b"not TVM's\n")
    messages = [r.getMessage() for r in caplog.records if r.name == "tvm"]
    assert messages == ["once per kind, 1 (/project/include/tvm/x.h:12)",
                        "once per kind, 2 (/project/include/tvm/x.h:12)"]
    assert "not TVM's" in capfd.readouterr().err


@pytest.mark.slow  # BERT imported twice in a process of its own; the mechanism is the test above's
def test_importing_a_model_twice_warns_once_about_its_gathers():
    # BERT's embedding lookups are `take`s: legalizing each printed TVM's warning every time.
    code = ("from codegen.workloads.models import import_model\n"
            "import_model('bert'); import_model('bert')\n")
    # One torch thread: beside the other test workers, a thread per core only waits its turn.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("Fast mode segfaults") == 1, done.stderr[-2000:]
