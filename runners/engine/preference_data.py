"""``data.format: preference``: a record's prompt with its chosen and its rejected
completion → one row of two sequences, tokenized as TRL's ``DPOTrainer`` tokenizes them.

A record holds ``prompt``, ``chosen`` and ``rejected`` (``data.prompt_field``,
``chosen_field``, ``rejected_field``), all text or all chat messages:

- text: the prompt alone, and the prompt + completion (+ EOS unless it ends with one)
  as one string, are tokenized; the completion's tokens are those of the whole after the
  common prefix of the two (tokens may merge across the boundary).
- chat: the prompt's messages rendered by the tokenizer's chat template with the
  generation prompt, and prompt + completion messages rendered whole; split the same way.

A record without a prompt (or with a prompt of the other kind: text beside chat
completions) holds it implicitly, as TRL's ``maybe_extract_prompt`` reads it: the longest
common start of chosen and rejected (messages, or characters less the space that ends
it) is the prompt. Such records are counted and said once.

Loss is on the completion tokens only (the labels of the prompt and the padding are
``IGNORE``). Truncation, as TRL's ``keep_start``: each of prompt + chosen and prompt +
rejected is cut at ``seq_len`` (its completion loses its end); a pair whose prompt alone
fills ``seq_len`` has no completion token left and is left out. Both are counted and
said once (``PairFitting``). Pairs are never packed: row ``i`` is ``input_ids`` and
``labels`` of shape ``[2, seq_len]``, chosen then rejected, padded on the right.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from fsdpspec.spec.v1 import Data
from fsdpspec_runners.engine.errors import EngineError
from fsdpspec_runners.engine.examples import IGNORE, render_chat
from fsdpspec_runners.engine.packing import Fitting, Row


@dataclass
class PairFitting(Fitting):
    """How the pairs of one part of the data fitted ``seq_len`` (``examples`` counts
    pairs, ``dropped`` those whose prompt fills it)."""

    end_cut: int = 0  # pairs with a completion cut at its end
    implicit: int = 0  # pairs whose prompt is chosen's and rejected's common start

    def note(self, part: str, seq_len: int) -> str | None:
        said = []
        if self.implicit:
            said.append(f"{self.implicit} of {self.examples} preference pairs have no prompt "
                        "of their completions' kind; the common start of chosen and rejected "
                        "is their prompt (TRL's extract_prompt)")
        if self.end_cut:
            said.append(f"{self.end_cut} of {self.examples} preference pairs are longer "
                        f"than seq_len {seq_len}; their completions were cut at the end")
        if self.dropped:
            said.append(f"{self.dropped} of {self.examples} preference pairs have a prompt "
                        f"of seq_len {seq_len} tokens or more and were left out")
        return f"{part}: {'; '.join(said)}" if said else None


def preference_rows(records: Iterable[dict[str, Any]], data: Data, tokenizer: Any,
                    fitting: PairFitting, where: str) -> Iterator[Row]:
    """Each record as one row of two padded sequences (chosen, rejected); ``where``
    names the data in a record's error line."""
    for index, record in enumerate(records):
        name = f"{where} record {index}"
        fields = (data.prompt_field, data.chosen_field, data.rejected_field)
        if _prompt_implicit(record, *fields):
            record = dict(zip(fields, implicit_prompt(record[fields[1]], record[fields[2]],
                                                      name), strict=True))
            fitting.implicit += 1
        prompt, chosen, rejected = _fields(record, data, name)
        ids = _tokenized(prompt, chosen, rejected, tokenizer)
        fitting.examples += 1
        row = _fitted(*ids, data.seq_len, tokenizer.pad_id, fitting)
        if row is not None:
            yield row


def _prompt_implicit(record: dict[str, Any], prompt: str, chosen: str, rejected: str) -> bool:
    """TRL's test (``maybe_extract_prompt``): chosen and rejected present, and no prompt,
    or one of the other kind than chosen (text beside messages)."""
    if record.get(chosen) is None or record.get(rejected) is None:
        return False
    return record.get(prompt) is None or _is_messages(record[prompt]) != _is_messages(
        record[chosen])


def implicit_prompt(chosen: Any, rejected: Any, name: str) -> tuple[Any, Any, Any]:
    """The prompt, chosen and rejected of a pair whose prompt opens both completions, as
    TRL's ``extract_prompt`` splits them: at the first message (or character) where they
    differ, less a space before it; where neither differs, one message (character) before
    the shorter one's end."""
    if not chosen or not rejected or chosen[0] != rejected[0]:
        raise EngineError(f"{name} has no prompt, and its chosen and rejected share no start "
                          "to take as one")
    for index in range(min(len(chosen), len(rejected))):
        if chosen[index] != rejected[index]:
            if chosen[index - 1] == " ":
                index -= 1
            break
    return chosen[:index], chosen[index:], rejected[index:]


def _fields(record: dict[str, Any], data: Data, name: str) -> tuple[Any, Any, Any]:
    """The prompt, chosen and rejected of a record, all text or all message lists."""
    wanted = (data.prompt_field, data.chosen_field, data.rejected_field)
    values = []
    for field in wanted:
        value = record.get(field)
        if value is None:  # `datasets` gives a record its file's missing fields as None
            known = "" if field in record else f" (fields: {sorted(record)})"
            raise EngineError(f"{name} has no {field!r}{known}")
        values.append(value)
    kinds = {"text" if isinstance(v, str) else "chat" if _is_messages(v) else "?"
             for v in values}
    if kinds not in ({"text"}, {"chat"}):
        raise EngineError(f"{name}: {', '.join(map(repr, wanted))} must all be text or all "
                          "lists of {role, content} messages")
    return values[0], values[1], values[2]


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) for m in value)


def _tokenized(prompt: Any, chosen: Any, rejected: Any,
               tokenizer: Any) -> tuple[list[int], list[int], list[int]]:
    """Prompt ids and the chosen and rejected completion ids, split where the prompt's
    tokens and the whole's part (TRL's ``common_prefix_length``)."""
    if isinstance(prompt, str):
        # encode appends EOS: to the whole as TRL appends it to a completion without one.
        prompt_ids = tokenizer.encode(prompt)[:-1]
        whole = [tokenizer.encode(prompt + _without_eos(c, tokenizer)) for c in (chosen, rejected)]
    else:
        hf = tokenizer.hf
        prompt_ids = _chat_ids(hf, render_chat(hf, prompt, generation_prompt=True))
        whole = [_chat_ids(hf, render_chat(hf, prompt + c)) for c in (chosen, rejected)]
    cut = min(_common_prefix(prompt_ids, ids) for ids in whole)
    return prompt_ids[:cut], whole[0][cut:], whole[1][cut:]


def _without_eos(completion: str, tokenizer: Any) -> str:
    """A completion that ends with the EOS token's text keeps only the one EOS."""
    eos = tokenizer.eos_text
    return completion[: -len(eos)] if eos and completion.endswith(eos) else completion


def _chat_ids(hf: Any, text: str) -> list[int]:
    return list(hf(text, add_special_tokens=False)["input_ids"])


def _common_prefix(ids: list[int], other: list[int]) -> int:
    length = 0
    for a, b in zip(ids, other, strict=False):
        if a != b:
            break
        length += 1
    return length


def _fitted(prompt: list[int], chosen: list[int], rejected: list[int], seq_len: int,
            pad_id: int, fitting: PairFitting) -> Row | None:
    """The pair cut at ``seq_len`` from its end and padded; None when the prompt alone
    fills it."""
    if len(prompt) >= seq_len:
        fitting.dropped += 1
        return None
    if max(len(chosen), len(rejected)) > seq_len - len(prompt):
        fitting.end_cut += 1
    rows = []
    for completion in (chosen, rejected):
        ids = (prompt + completion)[:seq_len]
        labels = ([IGNORE] * len(prompt) + completion)[:seq_len]
        pad = seq_len - len(ids)
        rows.append((ids + [pad_id] * pad, labels + [IGNORE] * pad))
    return {"input_ids": [rows[0][0], rows[1][0]], "labels": [rows[0][1], rows[1][1]]}
