"""Examples → fixed-length sequences: ``input_ids``, ``labels`` and ``position_ids``.

``text`` examples are joined end to end and cut every ``seq_len`` tokens, positions
running on (pre-training style); text shorter than one sequence is one padded sequence.
``chat`` / ``prompt_completion`` examples are never split: they are placed whole, in
order, into sequences (several per sequence when packing, one otherwise), positions
restart at 0 at each example, and the rest of a sequence is padding with ``IGNORE``
labels. An example longer than ``seq_len`` is cut at its end, unless that would leave
none of its answer: then its start is cut instead, keeping the ``seq_len // 2`` tokens
just before the answer (the context nearest to it), so that a prompt longer than
``seq_len`` still trains on its answer rather than failing a run that validate passed.
``Fitting`` counts those examples, and the engine says how many there were. An example
with no target at all (a chat without an assistant turn) is left out.

A transformers model given these ``position_ids`` (and no attention mask) attends within
each example only: it derives a block-diagonal mask for sdpa / eager and variable-length
sequences for flash_attention_2. A factory model receives only the ids, so its attention
crosses example boundaries; the labels still keep the loss on each example's own tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from fsdpspec_runners.engine.errors import EngineError
from fsdpspec_runners.engine.examples import IGNORE, Example

Sequences = dict[str, torch.Tensor]  # name → [num_sequences, seq_len]
Row = dict[str, list[int]]  # name → seq_len values


def text_rows(examples: Iterable[Example], seq_len: int, pad_id: int) -> Iterator[Row]:
    """Documents joined end to end, cut into ``seq_len`` pieces (the tail is dropped). A
    part shorter than one sequence (a small held-out fraction) is that one sequence,
    padded with tokens that carry no loss."""
    ids: list[int] = []
    whole = 0
    for example in examples:
        ids += example.ids
        while len(ids) >= seq_len:
            yield {"input_ids": ids[:seq_len]}
            ids, whole = ids[seq_len:], whole + 1
    if not whole and len(ids) > 1:  # one token alone has nothing to predict
        yield _padded({"input_ids": ids, "labels": list(ids),
                       "position_ids": list(range(len(ids)))}, seq_len, pad_id)


@dataclass
class Fitting:
    """How the examples of one part of the data fitted ``seq_len``."""

    examples: int = 0
    start_cut: int = 0  # examples whose prompt was cut from its start (see the module)
    dropped: int = 0  # examples without any target

    def note(self, part: str, seq_len: int) -> str | None:
        """One line for the user when an example did not fit as written, else None."""
        if not (self.start_cut or self.dropped):
            return None
        said = []
        if self.start_cut:
            said.append(f"{self.start_cut} of {self.examples} examples have no answer token "
                        f"within seq_len {seq_len}; their prompts were cut from the start")
        if self.dropped:
            said.append(f"{self.dropped} of {self.examples} examples have no token that "
                        "carries loss and were left out")
        return f"{part}: {'; '.join(said)}"


def _fitted(example: Example, seq_len: int, fitting: Fitting) -> Example | None:
    """``example`` with its start cut when no answer token would lie within ``seq_len``
    (its first token is never a target); None when it has no target at all."""
    fitting.examples += 1
    first = next((i for i, label in enumerate(example.labels) if i and label != IGNORE), None)
    if first is None:
        fitting.dropped += 1
        return None
    if first < seq_len:
        return example
    fitting.start_cut += 1
    start = first - max(1, seq_len // 2)
    return Example(example.ids[start:], example.labels[start:])


def example_rows(
    examples: Iterable[Example], seq_len: int, pad_id: int, *, several: bool,
    fitting: Fitting | None = None,
) -> Iterator[Row]:
    """Whole examples placed in order into padded sequences."""
    fitting = fitting if fitting is not None else Fitting()
    row: Row = {"input_ids": [], "labels": [], "position_ids": []}
    for whole in examples:
        example = _fitted(whole, seq_len, fitting)
        if example is None:
            continue  # nothing to learn
        used = len(row["input_ids"])
        if used and (not several or used + len(example.ids) > seq_len):
            yield _padded(row, seq_len, pad_id)
            row, used = {"input_ids": [], "labels": [], "position_ids": []}, 0
        take = min(len(example.ids), seq_len - used)
        row["input_ids"] += example.ids[:take]
        # The first token of an example is never a target: it would be predicted from
        # the previous example.
        row["labels"] += [IGNORE, *example.labels[1:take]]
        row["position_ids"] += range(take)
    if row["input_ids"]:
        yield _padded(row, seq_len, pad_id)


def _padded(row: Row, seq_len: int, pad_id: int) -> Row:
    """Fill to ``seq_len``; the padding is one more example (positions from 0) that
    carries no loss, so the model's packed-sequence mask keeps it apart."""
    pad = seq_len - len(row["input_ids"])
    return {
        "input_ids": row["input_ids"] + [pad_id] * pad,
        "labels": row["labels"] + [IGNORE] * pad,
        "position_ids": row["position_ids"] + list(range(pad)),
    }


def to_tensors(rows: Iterable[Row], seq_len: int) -> Sequences:
    """Rows as ``[num_sequences, seq_len]`` long tensors."""
    rows = list(rows)
    if not rows:
        raise EngineError(f"the data holds less than one sequence of {seq_len} tokens that "
                          "carries loss")
    return {name: torch.tensor([row[name] for row in rows], dtype=torch.long)
            for name in rows[0]}
