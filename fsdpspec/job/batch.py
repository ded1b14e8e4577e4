"""The batch of a job: micro-batch, sequence length, global batch and accumulation,
derived once from `data`, the data-parallel size (`ParallelDims.dp_size`) and the
context-parallel degree that splits each sequence."""

from __future__ import annotations

from dataclasses import dataclass

from fsdpspec.spec.v1 import JobSpec


@dataclass(frozen=True)
class Batch:
    """Sequences per micro-batch of one data-parallel rank, per step of every rank, and
    the micro-batches one rank runs per optimizer step."""

    micro: int
    seq: int
    global_size: int
    dp_size: int
    # Ranks each sequence is split over (context parallelism): each holds seq ÷ cp tokens.
    cp: int = 1
    # Sequences the model runs per example: a preference pair (DPO) is two, its chosen
    # and its rejected answer, concatenated into one forward.
    per_example: int = 1

    @property
    def per_pass(self) -> int:
        """Sequences one micro-batch of every data-parallel rank holds."""
        return self.micro * self.dp_size

    @property
    def accumulation(self) -> int:
        """Micro-batches per optimizer step (at least 1)."""
        return max(1, self.global_size // self.per_pass)

    @property
    def divides(self) -> bool:
        """The global batch is a whole number of micro-batches over every data-parallel
        rank (FS501)."""
        return self.global_size % self.per_pass == 0

    @property
    def sequences(self) -> int:
        """Sequences one forward of a micro-batch runs (what activations scale with)."""
        return self.micro * self.per_example

    @property
    def local_seq(self) -> int:
        """The tokens of each sequence one rank holds (all of them without context
        parallelism): what its activations scale with."""
        return self.seq // self.cp

    @property
    def tokens(self) -> int:
        """Tokens one forward of a micro-batch of one rank runs."""
        return self.sequences * self.local_seq

    def as_json(self) -> dict[str, int]:
        return {"micro": self.micro, "seq": self.seq, "global": self.global_size,
                "accumulation": self.accumulation, "per_example": self.per_example}


def sequences_per_example(spec: JobSpec) -> int:
    """2 for a preference pair (DPO: chosen and rejected), else 1."""
    return 2 if spec.train.objective == "dpo" else 1


def batch_of(spec: JobSpec, dp_size: int, cp: int = 1) -> Batch:
    data = spec.data
    return Batch(micro=data.micro_batch_size, seq=data.seq_len,
                 global_size=data.global_batch_size, dp_size=dp_size, cp=cp,
                 per_example=sequences_per_example(spec))
