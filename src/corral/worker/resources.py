"""What this machine offers: CPUs, memory and NVIDIA GPUs, unless the operator says otherwise.

Overrides win over detection, so a worker can offer less than the machine has (sharing it
with other work) or a virtual capacity (tests, simulations of a GPU cluster on a laptop).
"""

from __future__ import annotations

import logging

import psutil

from corral.core.protocol import Capacity

log = logging.getLogger("corral.worker.resources")


def detect_gpus() -> list[str]:
    """Names of the NVIDIA GPUs that NVML sees, in device-index order; none when NVML is absent or fails."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:  # no driver, no library, no permission: a CPU-only machine
        log.info("no NVIDIA GPUs detected (%s)", error)
        return []
    try:
        names = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            names.append(name.decode() if isinstance(name, bytes) else name)
        return names
    except Exception as error:
        log.warning("NVML failed while listing GPUs, offering none: %s", error)
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception as error:
            log.debug("nvmlShutdown failed: %s", error)


def detect_capacity(
    cpus: float | None = None, memory: int | None = None, gpus: int | None = None
) -> tuple[Capacity, list[str]]:
    """The capacity to register with, and the names of the GPUs behind it.

    With a GPU override, the detected names are kept for the devices that exist and the
    rest (virtual devices) are named "virtual".
    """
    names = detect_gpus()
    if gpus is not None:
        names = names[:gpus] + ["virtual"] * (gpus - len(names))
    capacity = Capacity(
        cpu=float(cpus if cpus is not None else psutil.cpu_count() or 1),
        memory=int(memory if memory is not None else psutil.virtual_memory().total),
        gpu=len(names),
    )
    return capacity, names
