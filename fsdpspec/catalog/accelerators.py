"""The accelerator catalogue: usable memory, dense peak throughput, bf16 support.

Memory is what a process can allocate (the marketed size in GiB as the driver reports
it); TFLOP/s are dense (no sparsity) bf16/fp16 peaks from the vendors' data sheets.
Link bandwidths are per device and per direction, in GB/s: NVLink / Infinity Fabric (or
PCIe where the card has no such link) inside a node, and the usual NIC per device
between nodes (400 Gb/s InfiniBand on H100-class systems, 200 Gb/s on A100, 100 Gb/s
elsewhere). The planner uses them only to say whether a step is likely
communication-bound.
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
    intra_node_gbps: float = 32.0
    inter_node_gbps: float = 12.5

    def peak_tflops(self, dtype: str) -> float:
        """Dense peak for a compute dtype ("bfloat16", "float16", "float32"); the fp32 peak
        where the device has none for the dtype (V100's bfloat16 is emulated). 0: unknown."""
        peak = {"bfloat16": self.bf16_tflops, "float16": self.fp16_tflops}.get(
            dtype, self.fp32_tflops)
        return peak or self.fp32_tflops


CATALOG: dict[str, Accelerator] = {
    a.name: a
    for a in (
        Accelerator("A100-40GB", 39.4, 312.0, 312.0, 19.5, True, True, 300.0, 25.0),
        Accelerator("A100-80GB", 79.1, 312.0, 312.0, 19.5, True, True, 300.0, 25.0),
        Accelerator("H100-80GB", 79.1, 989.0, 989.0, 67.0, True, True, 450.0, 50.0),
        Accelerator("H200-141GB", 139.8, 989.0, 989.0, 67.0, True, True, 450.0, 50.0),
        Accelerator("B200", 178.4, 2250.0, 2250.0, 80.0, True, True, 900.0, 50.0),
        Accelerator("L40S", 44.4, 362.0, 362.0, 91.6, True),
        Accelerator("L4", 22.0, 121.0, 121.0, 30.3, True),
        Accelerator("A10G", 22.0, 70.0, 70.0, 31.2, True),
        Accelerator("RTX-4090", 23.6, 165.2, 165.2, 82.6, True),
        Accelerator("MI300X", 191.5, 1307.0, 1307.0, 163.4, True, True, 448.0, 50.0),
        Accelerator("V100", 31.7, 0.0, 125.0, 15.7, False, True, 150.0, 12.5),
        Accelerator("T4", 14.6, 0.0, 65.0, 8.1, False, True, 16.0, 12.5),
        # A CPU "device" is host memory; its size comes from resources.host_memory_gib.
        Accelerator("cpu", 0.0, 1.0, 1.0, 1.0, True, is_gpu=False, intra_node_gbps=10.0),
    )
}


def accelerator_names() -> list[str]:
    """Catalogue names, in catalogue order."""
    return list(CATALOG)


def resolve_accelerator(value: object) -> Accelerator:
    """The spec's `resources.accelerator` (a catalogue name or a custom device) as an
    Accelerator; a custom device is a GPU with the catalogue's default link speeds."""
    if isinstance(value, str):
        return CATALOG[value]
    return Accelerator(
        name=value.name, memory_gib=value.memory_gib, bf16_tflops=value.bf16_tflops,
        fp16_tflops=value.fp16_tflops, fp32_tflops=value.fp32_tflops,
        supports_bf16=value.supports_bf16,
    )
