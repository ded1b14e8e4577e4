"""The accelerator catalogue: memory, dense peak throughput, bandwidths and the share of
the peak a training step's matrix multiplies reach.

Memory is what a process can allocate (the marketed size in GiB as the driver reports
it); TFLOP/s are dense (no sparsity) bf16/fp16 peaks from the vendors' data sheets.
FP8 TFLOP/s are the dense e4m3 peaks with FP32 accumulation (Hopper, Ada, Blackwell,
CDNA 3); Ampere, Volta and Turing have no FP8 tensor cores (0). Bandwidths are per
device and per direction, in GB/s (10^9 bytes): device memory (HBM, the data sheet's
figure), the link to the other devices of the node (NVLink / Infinity
Fabric, or PCIe where the card has no such link), the NIC per device between nodes
(400 Gb/s InfiniBand on H100-class systems, 200 Gb/s on A100, 100 Gb/s elsewhere) and
host↔device (PCIe: 25 GB/s usable of Gen4 x16, 50 of Gen5). `docs/tune.md` lists the
sources. ``*_efficiency`` is the achievable fraction of the dtype's peak that the
step-time model (`fsdpspec.plan.steptime`) runs the FLOPs at: fitted on published runs
where one exists for the device (named beside the entry), else the prior
``DEFAULT_EFFICIENCY``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

# The share of the bf16/fp16 (tensor-core) peak an unfitted GPU is assumed to reach in
# a training step, and of the fp32 (CUDA-core) peak: a prior, not a measurement.
DEFAULT_EFFICIENCY = 0.5
DEFAULT_FP32_EFFICIENCY = 0.7

# Fitted by benchmarks/step_time.py (`--fit`) on one published row each:
# torchtitan, Llama 3 8B, 64 × A100-80GB, local batch 1, seq 8192, selective-layer AC.
A100_BF16_EFFICIENCY = 0.713
# torchtitan, Llama 3.1 8B, 8 × H100 96 GB HBM2e (500 W), local batch 2, seq 8192,
# selective-op AC.
H100_96GB_BF16_EFFICIENCY = 0.436


@dataclass(frozen=True)
class Accelerator:
    """One device of the catalogue: memory, peak TFLOP/s per dtype, links, efficiency."""

    name: str
    memory_gib: float
    bf16_tflops: float
    fp16_tflops: float
    fp32_tflops: float
    supports_bf16: bool
    is_gpu: bool = True
    intra_node_gbps: float = 32.0
    inter_node_gbps: float = 12.5
    hbm_gbps: float = 1000.0
    host_gbps: float = 25.0
    bf16_efficiency: float = DEFAULT_EFFICIENCY
    fp16_efficiency: float = DEFAULT_EFFICIENCY
    fp32_efficiency: float = DEFAULT_FP32_EFFICIENCY
    # Fixed costs, calibrated by `fsdpspec tune --measure` (0 / None until measured: the
    # catalogue has no published figure for them, docs/tune.md).
    collective_latency_us: float = 0.0
    layer_overhead_us: float = 0.0
    optimizer_gbps: float | None = None
    # Dense FP8 (e4m3) tensor-core peak, FP32 accumulation (0: no FP8 tensor cores).
    fp8_tflops: float = 0.0

    def peak_tflops(self, dtype: str) -> float:
        """Dense peak for a compute dtype ("bfloat16", "float16", "float32"); the fp32 peak
        where the device has none for the dtype (V100's bfloat16 is emulated). 0: unknown."""
        peak = {"bfloat16": self.bf16_tflops, "float16": self.fp16_tflops}.get(
            dtype, self.fp32_tflops)
        return peak or self.fp32_tflops

    def efficiency(self, dtype: str) -> float:
        """The achievable share of ``peak_tflops(dtype)`` (the peak that dtype falls back
        to carries its own dtype's efficiency)."""
        table = {"bfloat16": (self.bf16_tflops, self.bf16_efficiency),
                 "float16": (self.fp16_tflops, self.fp16_efficiency)}
        peak, share = table.get(dtype, (0.0, 0.0))
        return share if peak else self.fp32_efficiency

    def achievable_tflops(self, dtype: str) -> float:
        """What a training step's matrix multiplies run at: peak × efficiency."""
        return self.peak_tflops(dtype) * self.efficiency(dtype)


def _gpu(name: str, memory_gib: float, bf16: float, fp16: float, fp32: float, *,
         bf16_ok: bool = True, intra: float = 32.0, inter: float = 12.5, hbm: float,
         host: float = 25.0, fp8: float = 0.0, **efficiency: float) -> Accelerator:
    return Accelerator(name, memory_gib, bf16, fp16, fp32, bf16_ok, True, intra, inter,
                       hbm, host, fp8_tflops=fp8, **efficiency)


CATALOG: dict[str, Accelerator] = {
    a.name: a
    for a in (
        _gpu("A100-40GB", 39.4, 312.0, 312.0, 19.5, intra=300.0, inter=25.0, hbm=1555.0,
             bf16_efficiency=A100_BF16_EFFICIENCY, fp16_efficiency=A100_BF16_EFFICIENCY),
        _gpu("A100-80GB", 79.1, 312.0, 312.0, 19.5, intra=300.0, inter=25.0, hbm=2039.0,
             bf16_efficiency=A100_BF16_EFFICIENCY, fp16_efficiency=A100_BF16_EFFICIENCY),
        _gpu("H100-80GB", 79.1, 989.0, 989.0, 67.0, intra=450.0, inter=50.0, hbm=3350.0,
             host=50.0, fp8=1979.0),
        # Meta's Grand Teton H100: 96 GB HBM2e at 2.4 TB/s, 500 W (torchtitan's benchmarks).
        _gpu("H100-96GB", 94.5, 989.0, 989.0, 67.0, intra=450.0, inter=50.0, hbm=2400.0,
             host=50.0, fp8=1979.0, bf16_efficiency=H100_96GB_BF16_EFFICIENCY,
             fp16_efficiency=H100_96GB_BF16_EFFICIENCY),
        _gpu("H200-141GB", 139.8, 989.0, 989.0, 67.0, intra=450.0, inter=50.0, hbm=4800.0,
             host=50.0, fp8=1979.0),
        _gpu("B200", 178.4, 2250.0, 2250.0, 80.0, intra=900.0, inter=50.0, hbm=8000.0,
             host=50.0, fp8=4500.0),
        _gpu("L40S", 44.4, 362.0, 362.0, 91.6, hbm=864.0, fp8=733.0),
        _gpu("L4", 22.0, 121.0, 121.0, 30.3, hbm=300.0, fp8=242.0),
        _gpu("A10G", 22.0, 70.0, 70.0, 31.2, hbm=600.0),
        _gpu("RTX-4090", 23.6, 165.2, 165.2, 82.6, hbm=1008.0, fp8=330.3),
        _gpu("MI300X", 191.5, 1307.0, 1307.0, 163.4, intra=448.0, inter=50.0, hbm=5300.0,
             host=50.0, fp8=2614.9),
        _gpu("V100", 31.7, 0.0, 125.0, 15.7, bf16_ok=False, intra=150.0, hbm=900.0,
             host=12.0),
        _gpu("T4", 14.6, 0.0, 65.0, 8.1, bf16_ok=False, intra=16.0, hbm=320.0, host=12.0),
        # A CPU "device" is host memory; its size comes from resources.host_memory_gib.
        # Its rates are placeholders: `fsdpspec tune --measure` calibrates this machine.
        Accelerator("cpu", 0.0, 1.0, 1.0, 1.0, True, is_gpu=False, intra_node_gbps=10.0,
                    hbm_gbps=10.0, host_gbps=10.0, fp32_efficiency=1.0),
    )
}

# The fields `resources.performance` (and a custom accelerator) may set.
PERFORMANCE_FIELDS = ("hbm_gbps", "intra_node_gbps", "inter_node_gbps", "host_gbps",
                      "bf16_efficiency", "fp16_efficiency", "fp32_efficiency",
                      "collective_latency_us", "layer_overhead_us", "optimizer_gbps")


def accelerator_names() -> list[str]:
    """Catalogue names, in catalogue order."""
    return list(CATALOG)


def with_performance(device: Accelerator, overrides: Any) -> Accelerator:
    """``device`` with the bandwidths and efficiencies ``overrides`` sets (its fields
    that are not None): clusters differ from the data sheet."""
    if overrides is None:
        return device
    changes = {f: getattr(overrides, f) for f in PERFORMANCE_FIELDS
               if getattr(overrides, f, None) is not None}
    return replace(device, **changes) if changes else device


def resolve_accelerator(value: object, performance: Any = None) -> Accelerator:
    """The spec's `resources.accelerator` (a catalogue name or a custom device) as an
    Accelerator, with `resources.performance` applied. A custom device is a GPU unless
    it says `device: cpu`; the bandwidths it leaves unset are the catalogue defaults."""
    if isinstance(value, str):
        return with_performance(CATALOG[value], performance)
    device = Accelerator(
        name=value.name, memory_gib=value.memory_gib, bf16_tflops=value.bf16_tflops,
        fp16_tflops=value.fp16_tflops, fp32_tflops=value.fp32_tflops,
        supports_bf16=value.supports_bf16, is_gpu=value.device == "gpu",
        fp8_tflops=value.fp8_tflops,
    )
    return with_performance(with_performance(device, value), performance)
