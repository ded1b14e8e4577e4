"""The accelerator catalogue: usable memory, dense peak throughput, bf16 support.

Memory is what a process can allocate (the marketed size in GiB as the driver reports
it); TFLOP/s are dense (no sparsity) bf16/fp16 peaks from the vendors' data sheets.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_gib: float
    bf16_tflops: float
    fp16_tflops: float
    fp32_tflops: float
    supports_bf16: bool
    is_gpu: bool = True


CATALOG: dict[str, Accelerator] = {
    a.name: a
    for a in (
        Accelerator("A100-40GB", 39.4, 312.0, 312.0, 19.5, True),
        Accelerator("A100-80GB", 79.1, 312.0, 312.0, 19.5, True),
        Accelerator("H100-80GB", 79.1, 989.0, 989.0, 67.0, True),
        Accelerator("H200-141GB", 139.8, 989.0, 989.0, 67.0, True),
        Accelerator("B200", 178.4, 2250.0, 2250.0, 80.0, True),
        Accelerator("L40S", 44.4, 362.0, 362.0, 91.6, True),
        Accelerator("L4", 22.0, 121.0, 121.0, 30.3, True),
        Accelerator("A10G", 22.0, 70.0, 70.0, 31.2, True),
        Accelerator("RTX-4090", 23.6, 165.2, 165.2, 82.6, True),
        Accelerator("MI300X", 191.5, 1307.0, 1307.0, 163.4, True),
        Accelerator("V100", 31.7, 0.0, 125.0, 15.7, False),
        Accelerator("T4", 14.6, 0.0, 65.0, 8.1, False),
        # A CPU "device" is host memory; its size comes from resources.host_memory_gib.
        Accelerator("cpu", 0.0, 1.0, 1.0, 1.0, True, is_gpu=False),
    )
}


def accelerator_names() -> list[str]:
    """Catalogue names, in catalogue order."""
    return list(CATALOG)
