"""Activation offload (`fsdp.activation_offload`): the tensors autograd saves in forward
go to pinned host memory, copied on a side stream so the transfer overlaps the next
kernels, and come back to the device when backward unpacks them.

Unlike ``torch.autograd.graph.save_on_cpu`` it leaves parameters alone (FSDP's gathered
parameters are saved by every matmul, and copying them out would move the whole model
over PCIe each forward) and tensors too small to be worth a transfer. On a CPU there is
nothing to move: the lint rule FS230 refuses the field there, and so does the engine.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

from fsdpspec_runners.engine.errors import EngineError

# Below this many bytes a copy costs more in launch latency than it saves.
MIN_OFFLOAD_BYTES = 1 << 20


class _Offloaded:
    """A saved tensor's host copy, its device, and the event its copy finished at."""

    def __init__(self, host: torch.Tensor, device: torch.device, done: Any) -> None:
        self.host, self.device, self.done = host, device, done


class OffloadSavedTensors(torch.autograd.graph.saved_tensors_hooks):
    """Pack saved activations into pinned host memory on a side stream; unpack them
    back onto the compute stream, after their copy out has finished."""

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device)
        super().__init__(self._pack, self._unpack)

    def _pack(self, tensor: torch.Tensor) -> Any:
        if (tensor.device.type != "cuda" or isinstance(tensor, nn.Parameter)
                or tensor.numel() * tensor.element_size() < MIN_OFFLOAD_BYTES):
            return tensor
        self.stream.wait_stream(torch.cuda.current_stream(tensor.device))
        with torch.cuda.stream(self.stream):
            host = torch.empty(tensor.size(), dtype=tensor.dtype, pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        # The device block may be reused only once the side stream has read it.
        tensor.record_stream(self.stream)
        return _Offloaded(host, tensor.device, done)

    @staticmethod
    def _unpack(packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        torch.cuda.current_stream(packed.device).wait_event(packed.done)
        return packed.host.to(packed.device, non_blocking=True)


def activation_offload(enabled: bool, device: torch.device) -> AbstractContextManager:
    """The context a micro-batch's forward runs in: offloading, or nothing."""
    if not enabled:
        return nullcontext()
    if device.type != "cuda":
        raise EngineError("fsdp.activation_offload needs a GPU: on the CPU saved tensors are "
                          "in host memory already (FS230)")
    return OffloadSavedTensors(device)
