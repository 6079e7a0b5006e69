"""GPU detection through NVML, against a fake NVML module injected at the edge; what a task learns of its GPUs."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from corral.cli.main import main
from corral.core.protocol import BuildOrder, GpuDevice, GpuUse
from corral.worker.resources import (
    MPS_PIPE_DIRECTORY,
    GpuMeter,
    detect_capacity,
    detect_gpus,
    gpu_env,
    mps_pipe_directory,
    sharing_note,
)

GB = 10**9


class FakeNvml:
    """What pynvml offers that corral calls, with two devices (names as bytes, as old pynvml returns)."""

    def __init__(self, devices=(("NVIDIA H100 80GB HBM3", 80 * 2**30, "GPU-aaa"), ("NVIDIA H100 80GB HBM3",
                                                                                      80 * 2**30, "GPU-bbb")),
                 fail_init: bool = False, fail_on: str | None = None) -> None:
        self.devices, self.fail_init, self.fail_on = list(devices), fail_init, fail_on
        self.shut_down = False

    def _maybe_fail(self, name: str) -> None:
        if self.fail_on == name:
            raise RuntimeError(f"NVML error in {name}")

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        self._maybe_fail("name")
        return self.devices[handle][0].encode()

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self.devices[handle][1], used=0, free=self.devices[handle][1])

    def nvmlDeviceGetUUID(self, handle):
        return self.devices[handle][2]


def test_detects_model_memory_and_uuid_per_device():
    nvml = FakeNvml()
    assert detect_gpus(nvml) == [
        GpuDevice(index=0, model="NVIDIA H100 80GB HBM3", memory=80 * 2**30, uuid="GPU-aaa"),
        GpuDevice(index=1, model="NVIDIA H100 80GB HBM3", memory=80 * 2**30, uuid="GPU-bbb"),
    ]
    assert nvml.shut_down


def test_no_nvml_means_no_gpus():
    assert detect_gpus(FakeNvml(fail_init=True)) == []


def test_an_nvml_failure_while_listing_offers_none_and_still_shuts_down():
    nvml = FakeNvml(fail_on="name")
    assert detect_gpus(nvml) == []
    assert nvml.shut_down


@pytest.mark.parametrize(("override", "models"), [
    (None, ["NVIDIA H100 80GB HBM3"] * 2),
    (1, ["NVIDIA H100 80GB HBM3"]),
    (3, ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "virtual"]),
    (0, []),
])
def test_a_gpu_override_keeps_real_devices_first(override, models):
    capacity, devices = detect_capacity(cpus=4, memory=2**30, gpus=override, custom={"tpu": 2}, nvml=FakeNvml())
    assert [d.model for d in devices] == models
    assert [d.index for d in devices] == list(range(len(models)))
    assert capacity.gpu == len(models) and capacity.custom == {"tpu": 2}


def test_virtual_gpus_report_the_memory_given_and_real_ones_keep_theirs():
    _, devices = detect_capacity(cpus=4, memory=2**30, gpus=3, nvml=FakeNvml(), gpu_memory=24 * 2**30)
    assert [(d.model, d.memory) for d in devices] == [("NVIDIA H100 80GB HBM3", 80 * 2**30)] * 2 + [
        ("virtual", 24 * 2**30)]


@pytest.mark.parametrize("args", [["worker", "--controller", "http://127.0.0.1:1"], ["up"]])
def test_a_virtual_gpu_memory_needs_virtual_gpus(args):
    flag = "--gpu-memory" if args[0] == "worker" else "--worker-gpu-memory"
    result = CliRunner().invoke(main, [*args, flag, "24G"])
    assert result.exit_code == 2 and "virtual GPUs" in result.output and "gpus too" in result.output


def test_an_mps_daemon_is_found_by_its_control_pipe_where_the_environment_or_the_default_says(tmp_path):
    assert mps_pipe_directory({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}) is None  # no control pipe: no daemon
    os.mkfifo(tmp_path / "control")
    assert mps_pipe_directory({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}) == tmp_path
    assert mps_pipe_directory({}) == (Path(MPS_PIPE_DIRECTORY) if (Path(MPS_PIPE_DIRECTORY) / "control").exists()
                                      else None)


def test_the_startup_note_says_whether_shares_are_held_by_mps_or_cooperative(tmp_path):
    assert "cooperative" in sharing_note(None) and "CORRAL_GPU_SHARE" in sharing_note(None)
    assert str(tmp_path) in sharing_note(tmp_path) and "MPS limits" in sharing_note(tmp_path)


def _order(gpu_ids, share=None, memory=None) -> BuildOrder:
    return BuildOrder(task_id=1, attempt=0, job_id=1, task_index=0, command=["x"], env={}, gpu_ids=gpu_ids,
                      gpu_share=share, gpu_memory=memory)


@pytest.mark.parametrize(("order", "memory", "mps", "env"), [
    (_order([0, 1]), {}, True, {"CUDA_VISIBLE_DEVICES": "0,1"}),  # whole devices: as ever, even under MPS
    (_order([1], 0.25), {1: 80 * GB}, False, {"CUDA_VISIBLE_DEVICES": "1", "CORRAL_GPU_SHARE": "0.25"}),
    (_order([1], 0.25), {1: 80 * GB}, True, {
        "CUDA_VISIBLE_DEVICES": "1", "CORRAL_GPU_SHARE": "0.25", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={20 * GB // 2**20}M"}),  # its share of device 1, which it sees as 0
    (_order([0], 0.5, 10 * GB), {0: 80 * GB}, True, {
        "CUDA_VISIBLE_DEVICES": "0", "CORRAL_GPU_SHARE": "0.5", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={10 * GB // 2**20}M"}),  # the memory the share reserved
    (_order([0], 0.07), {}, True, {  # device memory unknown: no memory limit
        "CUDA_VISIBLE_DEVICES": "0", "CORRAL_GPU_SHARE": "0.07", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "7"}),
])
def test_a_task_sees_its_devices_and_a_share_its_share_and_under_mps_its_limits(order, memory, mps, env):
    assert gpu_env(order, memory, mps) == env


class BusyNvml(FakeNvml):
    """Two devices in use: device 0 holds 5 GiB and is 40% busy; device 1 samples no utilisation."""

    inits = 0

    def nvmlInit(self):
        super().nvmlInit()
        self.inits += 1

    def nvmlDeviceGetMemoryInfo(self, handle):
        self._maybe_fail(f"memory {handle}")
        return SimpleNamespace(total=self.devices[handle][1], used=5 * 2**30 * (handle == 0), free=0)

    def nvmlDeviceGetUtilizationRates(self, handle):
        if handle == 1:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return SimpleNamespace(gpu=40, memory=10)


def test_the_meter_reads_each_devices_memory_and_utilisation_opening_nvml_once():
    nvml = BusyNvml()
    meter = GpuMeter([0, 1], nvml)
    expected = [GpuUse(index=0, memory_used=5 * 2**30, memory_total=80 * 2**30, utilization=40),
                GpuUse(index=1, memory_used=0, memory_total=80 * 2**30, utilization=None)]
    assert meter.read() == expected and meter.read() == expected
    assert nvml.inits == 1


def test_a_device_the_meter_cannot_read_is_left_out_of_that_reading():
    assert [use.index for use in GpuMeter([0, 1], BusyNvml(fail_on="memory 0")).read()] == [1]


def test_without_nvml_or_devices_the_meter_reads_nothing_and_stops_trying():
    meter = GpuMeter([0, 1], BusyNvml(fail_init=True))
    assert meter.read() == [] and meter.indices == []
    nvml = BusyNvml()
    assert GpuMeter([], nvml).read() == [] and nvml.inits == 0  # virtual GPUs only: NVML is never opened
