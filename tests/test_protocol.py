"""The measurement seam: typed worker messages and the devices they name."""

from __future__ import annotations

import dataclasses

import pytest

from codegen.measure import MeasureConfig, Outcome, Status, devices
from codegen.measure.build import Artifact
from codegen.measure.protocol import (
    Applied,
    ApplyJob,
    BuildJob,
    Built,
    DescribeJob,
    DeviceInfo,
    DeviceRef,
    Error,
    Failed,
    LiveClose,
    LiveOpen,
    LiveState,
    LiveStep,
    PingJob,
    Pong,
    Progress,
    Ready,
    ReferenceJob,
    RunJob,
    WorkloadData,
    decode,
    encode,
)

WL = WorkloadData("matmul(m=8,n=8,k=8)", '{"root": 1}')
ART = Artifact("/tmp/x/kernel.so", "cuda", "/tmp/x/kernel.cubin", "ab" * 32)
CPU = DeviceRef("cpu", "llvm")
MESSAGES = [
    ApplyJob(WL, 'block "C" -> C', {"kind": "llvm", "num-cores": 2}),
    BuildJob(WL, {"kind": "llvm"}, "/tmp/out", script="block \"C\" -> C"),
    BuildJob(WL, {"kind": "cuda"}, "/tmp/out", module='{"nodes": []}'),
    ReferenceJob(WL, MeasureConfig(repeat=3, flush_l2=False)),
    RunJob(WL, ART, MeasureConfig(), DeviceRef("rpc", "cuda", {"tracker": "h:9190", "key": "k"})),
    RunJob(WL, ART, MeasureConfig(cutoff_factor=4.0), CPU, 2.5e-3),
    DescribeJob(CPU), PingJob(),
    LiveOpen(3, WL, {"kind": "llvm"}, ['block "C" -> C']), LiveOpen(4, WL, None),
    LiveStep(3, "loops C -> i, j, k"), LiveClose([3, 4]),
    LiveState({"postproc_set": None, "statements": 1, "scope": {"C": "block"}}),
    Applied("# from tvm.script import ir as I"), Built(ART, 1.5), Ready(3, 1),
    DeviceInfo("cuda (no GPU)", False), Pong(42),
    Failed(Status.PARSE_ERROR, "parse", "expected a name", 3, 9), Progress("verify"),
    Error("ValueError: boom"),
    Outcome(Status.CORRECT, "time", latency_s=1e-3, spread_s=1e-5, repeats=[1e-3, 1e-3]),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_survives_the_pipe_with_its_types(message):
    back = decode(encode(message))
    assert back == message and type(back) is type(message)
    for f in dataclasses.fields(message):  # nested records come back as records, not dicts
        assert type(getattr(back, f.name)) is type(getattr(message, f.name))


def test_only_protocol_messages_are_encoded():
    with pytest.raises(TypeError, match="Expected a protocol message"):
        encode(WL)


def test_devices_are_chosen_once_from_the_target():
    cpu = devices.create({"kind": "llvm", "num-cores": 1})
    assert isinstance(cpu, devices.LocalCPU) and cpu.cores == 1
    assert cpu.worker_env() == {"TVM_NUM_THREADS": "1"} and len(cpu.worker_cpus()) == 1
    assert cpu.known_info() is None  # named by the measuring worker itself
    gpu = devices.create("cuda")
    assert isinstance(gpu, devices.LocalCUDA) and gpu.ref == DeviceRef("cuda", "cuda")
    remote = devices.create("cuda", rpc={"tracker": "127.0.0.1:9190", "key": "h100"})
    assert isinstance(remote, devices.RPCDevice)
    assert remote.known_info() == DeviceInfo("rpc:h100", True)
    assert cpu.runs_models and gpu.runs_models and not remote.runs_models
    for device in (cpu, gpu, remote):  # inside the measuring worker, from the job's ref
        assert type(devices.create(device.ref)) is type(device)
        assert devices.create(device.ref) is devices.create(device.ref)  # kept per process
    with pytest.raises(ValueError, match="Expected an llvm or cuda target"):
        devices.create({"kind": "c"})


def test_whole_models_run_only_where_the_device_says_so():
    from codegen.model_build import measure_models

    remote = devices.create("llvm", rpc={"server": "127.0.0.1:9090"})
    with pytest.raises(ValueError, match="a device that runs whole models but got rpc"):
        measure_models(None, "llvm", {"before": None}, device=remote)


def test_a_gpu_less_machine_says_so():
    info = devices.LocalCUDA(DeviceRef("cuda", "cuda")).describe()
    assert isinstance(info, DeviceInfo) and info.name
