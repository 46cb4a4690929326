"""Measuring on another machine through TVM's RPC tracker, so that a node without a GPU gets
CUDA-measured outcomes from GPU machines.

On each GPU machine::

    python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190          # once, anywhere
    python -m tvm.exec.rpc_server --tracker TRACKER:9190 --key h100    # per GPU

and here ``Evaluator("cuda", rpc={"tracker": "TRACKER:9190", "key": "h100"})`` (the
``RPCDevice`` of ``codegen.measure.devices``).  Building
stays local (parallel, to cubin); the artifact is uploaded, loaded, verified and timed on the
remote device; the reference outputs are computed here on the CPU.  MetaSchedule's own search
reaches the same tracker through its ``RPCRunner`` (``metaschedule_best(runner=...)``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

__all__ = ["LocalTracker", "connect", "parse_address"]


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` as a pair.

    >>> parse_address("10.0.0.2:9190")
    ('10.0.0.2', 9190)
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"Expected an RPC address like 'host:9190' but got address={address!r}")
    return host or "127.0.0.1", int(port)


def connect(rpc: dict[str, Any]):
    """An RPC session: ``{"tracker": "host:port", "key": K}`` asks the tracker for a device
    registered under K; ``{"server": "host:port"}`` connects to a server directly."""
    from tvm import rpc as tvm_rpc

    timeout = int(rpc.get("session_timeout_s", 120))
    if "tracker" in rpc:
        host, port = parse_address(rpc["tracker"])
        tracker = tvm_rpc.connect_tracker(host, port)
        return tracker.request(rpc["key"], priority=int(rpc.get("priority", 1)),
                               session_timeout=timeout)
    if "server" in rpc:
        host, port = parse_address(rpc["server"])
        return tvm_rpc.connect(host, port, session_timeout=timeout)
    raise ValueError(f"Expected an rpc dict with 'tracker' and 'key', or 'server', but got "
                     f"rpc={rpc!r}")


@dataclass
class LocalTracker:
    """A tracker and one server on this machine (for tests and for trying the setup).

    >>> with LocalTracker(key="cpu") as t:                          # doctest: +SKIP
    ...     t.rpc
    {'tracker': '127.0.0.1:9190', 'key': 'cpu'}
    """

    key: str = "local"
    port: int = 9190

    def __enter__(self) -> LocalTracker:
        from tvm.rpc.server import Server
        from tvm.rpc.tracker import Tracker

        self.tracker = Tracker(host="127.0.0.1", port=self.port, port_end=self.port + 100,
                               silent=True)
        self.server = Server(host="127.0.0.1", port=self.tracker.port + 101,
                             port_end=self.tracker.port + 300, key=self.key, silent=True,
                             tracker_addr=("127.0.0.1", self.tracker.port))
        self._wait_for_server()
        return self

    def _wait_for_server(self, timeout: float = 60.0) -> None:
        from tvm import rpc as tvm_rpc

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            summary = tvm_rpc.connect_tracker("127.0.0.1", self.tracker.port).summary()
            if any(q.get("free", 0) for k, q in summary.get("queue_info", {}).items()
                   if k == self.key):
                return
            time.sleep(0.2)
        raise TimeoutError(f"the RPC server did not register with the tracker in {timeout} s")

    @property
    def rpc(self) -> dict[str, Any]:
        return {"tracker": f"127.0.0.1:{self.tracker.port}", "key": self.key}

    def __exit__(self, *exc) -> None:
        self.server.terminate()
        self.tracker.terminate()
