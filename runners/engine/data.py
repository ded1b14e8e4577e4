"""Training tokens: the shipped corpus, local text / jsonl files, a dataset (see
``datasource``), or synthetic tokens.

Documents are tokenised, joined with EOS and packed into ``seq_len`` sequences. Step
``s`` takes global sequences ``[s·G, (s+1)·G)`` of a seeded permutation (one per epoch);
data-parallel rank ``r`` takes every ``dp_size``-th of them (`ParallelDims.dp_rank`). The
order depends only on the seed, so the position — sequences consumed — is all a
checkpoint needs to continue exactly.

A sequence is a dict of ``[seq_len]`` tensors: ``input_ids``, and for chat /
prompt_completion data also ``labels`` and ``position_ids`` (see ``packing``).
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import torch

from fsdpspec.job.batch import Batch
from fsdpspec.jsonfile import JsonFileError, Limits, parse
from fsdpspec.runfiles.datafiles import DataFilesError, data_files
from fsdpspec.semantics import BYTE_EOS, BYTE_VOCAB
from fsdpspec.spec.v1 import Data
from fsdpspec_runners.engine.errors import EngineError, first_line
from fsdpspec_runners.engine.examples import text_example
from fsdpspec_runners.engine.packing import Sequences, text_rows, to_tensors


class Tokenizer:
    """Byte-level by default; a local Hugging Face tokenizer directory when given."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self._hf = _local_tokenizer(directory) if directory else None
        self.vocab_size = len(self._hf) if self._hf else BYTE_VOCAB
        self.eos_id = self._eos_of(self._hf) if self._hf else BYTE_EOS
        pad = getattr(self._hf, "pad_token_id", None)
        self.pad_id = self.eos_id if pad is None else int(pad)

    @property
    def hf(self) -> object:
        """The Hugging Face tokenizer (chat templates need one)."""
        if self._hf is None:
            raise EngineError("data.format chat needs data.tokenizer with a chat template")
        return self._hf

    @property
    def eos_text(self) -> str | None:
        """The EOS token's text (None for the byte-level tokenizer: its EOS is no byte)."""
        return getattr(self._hf, "eos_token", None) if self._hf else None

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
    except Exception as exc:  # tokenizers' Rust errors are plain Exceptions
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


# A record is a document and its fields; a jsonl line holding more is not one.
RECORD_LIMITS = Limits(max_depth=32, max_string=1 << 30)


def _jsonl_texts(file: Path, field: str) -> Iterator[str]:
    for number, line in enumerate(_read(file).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = parse(line, f"{file}:{number}", RECORD_LIMITS)
        except JsonFileError as exc:
            raise EngineError(f"data.path: {exc}") from None
        text = record.get(field) if isinstance(record, dict) else None
        if text is None:
            raise EngineError(
                f"{file}:{number}: not a JSON object with a {field!r} string"
            )
        if not isinstance(text, str):
            raise EngineError(f"{file}:{number}: field {field!r} is not a string")
        yield text


def model_tokenizer(data: Data, vocab_size: int | None) -> Tokenizer:
    """``data.tokenizer``, checked against the model's vocabulary."""
    tokenizer = Tokenizer(data.tokenizer)
    if vocab_size is not None and tokenizer.vocab_size > vocab_size:
        raise EngineError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary "
            f"is {vocab_size}"
        )
    return tokenizer


class SequenceSource:
    """Global sequence number → a sequence's tensors, in a seeded order."""

    def __init__(
        self, data: Data, vocab_size: int | None, seed: int, packed: Sequences | None = None
    ) -> None:
        self._seed = seed
        self._vocab = vocab_size
        self._seq_len = data.seq_len
        self._packed = packed
        self._order: tuple[int, torch.Tensor] | None = None
        if data.source == "synthetic" and vocab_size is None:
            raise EngineError("synthetic data needs the vocabulary size: set model.geometry")
        if packed is None and data.source != "synthetic":
            tokenizer = model_tokenizer(data, vocab_size)
            documents = (text_example(doc, tokenizer) for doc in read_documents(data))
            self._packed = to_tensors(text_rows(documents, data.seq_len, tokenizer.pad_id),
                                      data.seq_len)

    @property
    def sequences(self) -> Sequences | None:
        """The tokenized sequences (None for synthetic data); a column added here (the
        precomputed reference log-probs) comes with every sequence."""
        return self._packed

    def sequence(self, index: int) -> dict[str, torch.Tensor]:
        """The ``index``-th sequence of the stream (epochs repeat in a new order)."""
        if self._packed is None:
            generator = torch.Generator().manual_seed(self._seed * 1_000_003 + index)
            ids = torch.randint(0, self._vocab, (self._seq_len,), generator=generator)
            return {"input_ids": ids}
        count = len(self._packed["input_ids"])
        epoch, offset = divmod(index, count)
        row = self._epoch_order(epoch, count)[offset]
        return {name: tensor[row] for name, tensor in self._packed.items()}

    def _epoch_order(self, epoch: int, count: int) -> torch.Tensor:
        if self._order is None or self._order[0] != epoch:
            generator = torch.Generator().manual_seed(self._seed * 1_000_003 + epoch)
            self._order = (epoch, torch.randperm(count, generator=generator))
        return self._order[1]


class Batches:
    """Micro-batches for each optimizer step of this rank; resumable by position."""

    def __init__(self, source: SequenceSource, batch: Batch, dp_rank: int) -> None:
        if not batch.divides:  # FS501 says so before a run
            raise EngineError(
                f"data.global_batch_size {batch.global_size} is not a multiple of "
                f"micro_batch_size × data-parallel ranks = {batch.per_pass}"
            )
        self.accumulation_steps = batch.accumulation
        self._source = source
        self._micro = batch.micro
        self._global = batch.global_size
        self._rank = dp_rank
        self._dp_size = batch.dp_size
        self.position = 0  # global sequences consumed

    def next_step(self) -> list[dict[str, torch.Tensor]]:
        """This rank's micro-batches for the next optimizer step."""
        micro, start = self._micro, self.position
        batches = []
        for accum in range(self.accumulation_steps):
            first = start + (accum * self._dp_size + self._rank) * micro
            batches.append(stack([self._source.sequence(first + j) for j in range(micro)]))
        self.position += self._global
        return batches

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])


def stack(sequences: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Sequences → one batch, ``[len(sequences), seq_len]`` per tensor."""
    return {name: torch.stack([s[name] for s in sequences]) for name in sequences[0]}
