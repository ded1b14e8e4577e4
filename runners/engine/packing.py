"""Examples → fixed-length sequences: ``input_ids``, ``labels`` and ``position_ids``.

``text`` examples are joined end to end and cut every ``seq_len`` tokens, positions
running on (pre-training style). ``chat`` / ``prompt_completion`` examples are never split:
they are placed whole, in order, into sequences (several per sequence when packing, one
otherwise), positions restart at 0 at each example, and the rest of a sequence is padding
with ``IGNORE`` labels. An example longer than ``seq_len`` is truncated.

A transformers model given these ``position_ids`` (and no attention mask) attends within
each example only: it derives a block-diagonal mask for sdpa / eager and variable-length
sequences for flash_attention_2. A factory model receives only the ids, so its attention
crosses example boundaries; the labels still keep the loss on each example's own tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from fsdpspec_runners.engine.errors import EngineError
from fsdpspec_runners.engine.examples import IGNORE, Example

Sequences = dict[str, torch.Tensor]  # name → [num_sequences, seq_len]
Row = dict[str, list[int]]  # name → seq_len values


def text_rows(examples: Iterable[Example], seq_len: int) -> Iterator[Row]:
    """Documents joined end to end, cut into ``seq_len`` pieces (the tail is dropped)."""
    ids: list[int] = []
    for example in examples:
        ids += example.ids
        while len(ids) >= seq_len:
            yield {"input_ids": ids[:seq_len]}
            ids = ids[seq_len:]


def example_rows(
    examples: Iterable[Example], seq_len: int, pad_id: int, *, several: bool
) -> Iterator[Row]:
    """Whole examples placed in order into padded sequences."""
    row: Row = {"input_ids": [], "labels": [], "position_ids": []}
    for example in examples:
        if all(label == IGNORE for label in example.labels[1:seq_len]):
            continue  # nothing to learn (its answer was cut off, or it has none)
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
