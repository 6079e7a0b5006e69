"""What this machine offers: CPUs, memory, NVIDIA GPUs and custom slots, unless the operator says otherwise.

Overrides win over detection, so a worker can offer less than the machine has (sharing it
with other work) or a virtual capacity (tests, simulations of a GPU cluster on a laptop).
GPUs are read through NVML (model, memory and UUID per device, and at each heartbeat their use);
the NVML module is a parameter so the detection can be tested against a fake one.

A task with a share of one GPU sees that device and its share (CORRAL_GPU_SHARE). Only an MPS
control daemon can hold it to the share; without one, sharing is cooperative.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import psutil

from corral.core.protocol import BuildOrder, Capacity, GpuDevice, GpuUse

log = logging.getLogger("corral.worker.resources")
MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"  # where an MPS control daemon listens unless CUDA_MPS_PIPE_DIRECTORY says
MiB = 2**20


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def detect_gpus(nvml: ModuleType | None = None) -> list[GpuDevice]:
    """The NVIDIA GPUs that NVML sees, in device-index order; none when NVML is absent or fails."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception as error:  # no driver, no library, no permission: a CPU-only machine
        log.info("no NVIDIA GPUs detected (%s)", error)
        return []
    try:
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            devices.append(GpuDevice(
                index=index, model=_text(nvml.nvmlDeviceGetName(handle)),
                memory=int(nvml.nvmlDeviceGetMemoryInfo(handle).total), uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            ))
        return devices
    except Exception as error:
        log.warning("NVML failed while listing GPUs, offering none: %s", error)
        return []
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as error:
            log.debug("nvmlShutdown failed: %s", error)


def detect_capacity(
    cpus: float | None = None, memory: int | None = None, gpus: int | None = None,
    custom: dict[str, float] | None = None, nvml: ModuleType | None = None, gpu_memory: int = 0,
) -> tuple[Capacity, list[GpuDevice]]:
    """The capacity to register with, and the GPUs behind it.

    With a GPU override, the detected devices are kept for the indices that exist and the
    rest (virtual devices) are named "virtual", each with `gpu_memory` bytes (0: unknown),
    so that placement by GPU memory can be tried without NVML.
    """
    devices = detect_gpus(nvml)
    if gpus is not None:
        devices = devices[:gpus] + [GpuDevice(index=i, model="virtual", memory=gpu_memory)
                                    for i in range(len(devices), gpus)]
    capacity = Capacity(
        cpu=float(cpus if cpus is not None else psutil.cpu_count() or 1),
        memory=int(memory if memory is not None else psutil.virtual_memory().total),
        gpu=len(devices),
        custom=dict(custom or {}),
    )
    return capacity, devices


def mps_pipe_directory(environ: Mapping[str, str]) -> Path | None:
    """The directory of the MPS control daemon that this worker's tasks would connect to, if one runs: the one
    CUDA_MPS_PIPE_DIRECTORY names (else the default) when it holds the daemon's `control` pipe."""
    directory = Path(environ.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_PIPE_DIRECTORY)
    return directory if (directory / "control").exists() else None


def sharing_note(mps: Path | None) -> str:
    """What this worker does for tasks with a share of one GPU, said once at its start."""
    if mps is not None:
        return (f"GPU shares: MPS control daemon at {mps}; a task with a share gets its part of the device's threads "
                "and memory as MPS limits")
    return (f"GPU shares are cooperative: no MPS control daemon (CUDA_MPS_PIPE_DIRECTORY or {MPS_PIPE_DIRECTORY}), "
            "so a task with a share sees its whole device and is trusted to use only CORRAL_GPU_SHARE of it")


def gpu_env(order: BuildOrder, device_memory: Mapping[int, int], mps: bool) -> dict[str, str]:
    """The variables that give a task its GPUs: the devices by index and, for a share of one device, the share;
    under MPS also its limits: the share in percent of the threads, and the device memory the share reserved
    (else its share of the device's memory, when known)."""
    env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, order.gpu_ids))}
    if order.gpu_share is None or len(order.gpu_ids) != 1:
        return env
    device = order.gpu_ids[0]
    env["CORRAL_GPU_SHARE"] = f"{order.gpu_share:g}"
    if mps:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(round(order.gpu_share * 100))
        memory = order.gpu_memory or int(order.gpu_share * device_memory.get(device, 0))
        if memory >= MiB:
            # CUDA numbers the devices a process sees after CUDA_VISIBLE_DEVICES: its one device is 0.
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={memory // MiB}M"
    return env


class GpuMeter:
    """Reads the use of the NVIDIA devices at `indices` (memory used and total, utilisation) for the heartbeat.
    NVML is opened once, at the first reading; where it is absent or fails there are no readings, and a device
    whose reading fails is left out of that one. Virtual devices are never read: NVML knows nothing of them."""

    def __init__(self, indices: list[int], nvml: ModuleType | None = None) -> None:
        self.indices, self._nvml, self._opened = list(indices), nvml, False

    def read(self) -> list[GpuUse]:
        if not self.indices or not self._open():
            return []
        nvml, readings = self._nvml, []
        for index in self.indices:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                readings.append(GpuUse(index=index, memory_used=min(int(memory.used), int(memory.total)),
                                       memory_total=int(memory.total), utilization=self._utilization(handle)))
            except Exception as error:
                log.debug("NVML could not read device %s: %s", index, error)
        return readings

    def _utilization(self, handle: object) -> int | None:
        try:
            return min(100, max(0, int(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)))
        except Exception:  # not every device or driver samples it
            return None

    def _open(self) -> bool:
        if not self._opened:
            try:
                if self._nvml is None:
                    import pynvml
                    self._nvml = pynvml
                self._nvml.nvmlInit()
            except Exception as error:
                log.info("NVML cannot read the GPUs' use; heartbeats carry none (%s)", error)
                self.indices = []
                return False
            self._opened = True
        return True
