"""Training tokens: the shipped corpus, local text / jsonl files, or synthetic tokens.

Documents are tokenised, joined with EOS and packed into ``seq_len`` sequences. Step
``s`` takes global sequences ``[s·G, (s+1)·G)`` of a seeded permutation (one per epoch);
rank ``r`` takes every ``world``-th of them. The order depends only on the seed, so the
position — sequences consumed — is all a checkpoint needs to continue exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import torch

from fsdpspec.semantics import BYTE_EOS, BYTE_VOCAB
from fsdpspec.spec.v1 import Data
from fsdpspec_runners.engine.errors import EngineError, first_line
from fsdpspec_runners.local.datafiles import DataFilesError, data_files


class Tokenizer:
    """Byte-level by default; a local Hugging Face tokenizer directory when given."""

    def __init__(self, directory: str | None) -> None:
        self._hf = _local_tokenizer(directory) if directory else None
        self.vocab_size = len(self._hf) if self._hf else BYTE_VOCAB
        self.eos_id = self._eos_of(self._hf) if self._hf else BYTE_EOS

    def encode(self, text: str) -> list[int]:
        """Token ids of one document, EOS appended."""
        if self._hf is None:
            return list(text.encode("utf-8")) + [BYTE_EOS]
        return list(self._hf(text, add_special_tokens=False)["input_ids"]) + [self.eos_id]

    @staticmethod
    def _eos_of(tokenizer: object) -> int:
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            raise EngineError("data.tokenizer has no eos_token; documents cannot be separated")
        return int(eos)


def _local_tokenizer(directory: str) -> object:
    from transformers import AutoTokenizer

    if not Path(directory).is_dir():
        raise EngineError(f"data.tokenizer: {directory} is not a directory")
    try:
        return AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise EngineError(f"data.tokenizer: cannot load {directory}: {first_line(exc)}") from None


def read_documents(data: Data) -> Iterator[str]:
    """The text documents of a corpus / text / jsonl source."""
    if data.source == "corpus":
        yield from _paragraphs(
            resources.files("fsdpspec").joinpath("data/corpus.txt").read_text("utf-8")
        )
    elif data.source == "text":
        for file in _files(data):
            yield _read(file)
    else:
        for file in _files(data):
            yield from _jsonl_texts(file, data.text_field)


def _read(file: Path) -> str:
    """A data file's text; undecodable bytes become U+FFFD rather than stop the run."""
    try:
        return file.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise EngineError(f"data.path: cannot read {file}: {exc.strerror}") from None


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def _files(data: Data) -> list[Path]:
    if data.path is None:
        raise EngineError("data.path is required for text and jsonl sources")
    try:
        return data_files(Path(data.path), data.source)
    except DataFilesError as exc:
        raise EngineError(f"data.path: {exc}") from None


def _jsonl_texts(file: Path, field: str) -> Iterator[str]:
    for number, line in enumerate(_read(file).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            text = record[field]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise EngineError(
                f"{file}:{number}: not a JSON object with a {field!r} string"
            ) from None
        if not isinstance(text, str):
            raise EngineError(f"{file}:{number}: field {field!r} is not a string")
        yield text


def pack(documents: Iterator[str], tokenizer: Tokenizer, seq_len: int) -> torch.Tensor:
    """[num_sequences, seq_len] token ids of the documents joined end to end."""
    ids = [token for doc in documents for token in tokenizer.encode(doc)]
    count = len(ids) // seq_len
    if count == 0:
        raise EngineError(f"the data holds {len(ids)} tokens, fewer than one seq_len ({seq_len})")
    return torch.tensor(ids[: count * seq_len], dtype=torch.long).view(count, seq_len)


class SequenceSource:
    """Global sequence number → token ids, in a seeded order."""

    def __init__(self, data: Data, vocab_size: int | None, seed: int) -> None:
        self._seed = seed
        self._vocab = vocab_size
        self._seq_len = data.seq_len
        self._packed: torch.Tensor | None = None
        self._order: tuple[int, torch.Tensor] | None = None
        if data.source == "synthetic" and vocab_size is None:
            raise EngineError("synthetic data needs the vocabulary size: set model.geometry")
        if data.source != "synthetic":
            tokenizer = Tokenizer(data.tokenizer)
            if vocab_size is not None and tokenizer.vocab_size > vocab_size:
                raise EngineError(
                    f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary "
                    f"is {vocab_size}"
                )
            self._packed = pack(read_documents(data), tokenizer, data.seq_len)

    def sequence(self, index: int) -> torch.Tensor:
        """The ``index``-th sequence of the stream (epochs repeat in a new order)."""
        if self._packed is None:
            generator = torch.Generator().manual_seed(self._seed * 1_000_003 + index)
            return torch.randint(0, self._vocab, (self._seq_len,), generator=generator)
        epoch, offset = divmod(index, len(self._packed))
        return self._packed[self._epoch_order(epoch)[offset]]

    def _epoch_order(self, epoch: int) -> torch.Tensor:
        if self._order is None or self._order[0] != epoch:
            generator = torch.Generator().manual_seed(self._seed * 1_000_003 + epoch)
            self._order = (epoch, torch.randperm(len(self._packed), generator=generator))
        return self._order[1]


class Batches:
    """Micro-batches for each optimizer step of this rank; resumable by position."""

    def __init__(self, source: SequenceSource, data: Data, rank: int, world_size: int) -> None:
        per_step = data.micro_batch_size * world_size
        if data.global_batch_size % per_step:
            raise EngineError(
                f"data.global_batch_size {data.global_batch_size} is not a multiple of "
                f"micro_batch_size × processes = {per_step}"
            )
        self.accumulation_steps = data.global_batch_size // per_step
        self._source = source
        self._data = data
        self._rank = rank
        self._world = world_size
        self.position = 0  # global sequences consumed

    def next_step(self) -> list[torch.Tensor]:
        """This rank's micro-batches for the next optimizer step."""
        micro, start = self._data.micro_batch_size, self.position
        batches = []
        for accum in range(self.accumulation_steps):
            first = start + (accum * self._world + self._rank) * micro
            batches.append(torch.stack([self._source.sequence(first + j) for j in range(micro)]))
        self.position += self._data.global_batch_size
        return batches

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])
