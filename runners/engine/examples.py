"""One dataset record → one training example: token ids and the labels that carry loss.

``text`` trains on every token. ``chat`` renders ``messages`` with the tokenizer's chat
template and trains only on the assistant turns (the text each assistant message adds to
the rendering, end-of-turn tokens included); ``prompt_completion`` trains only on the
completion and its EOS. Every other label is ``IGNORE``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fsdpspec.spec.v1 import Data
from fsdpspec_runners.engine.errors import EngineError, first_line

IGNORE = -100  # cross_entropy's ignore_index


@dataclass(frozen=True)
class Example:
    """Token ids and per-token labels (the id itself, or IGNORE), of equal length."""

    ids: list[int]
    labels: list[int]


def example_builder(data: Data, tokenizer: Any) -> Callable[[dict[str, Any]], Example]:
    """The function that turns a record into an Example for ``data.format``."""
    if data.format == "chat":
        return lambda record: chat_example(_field(record, data.messages_field), tokenizer)
    if data.format == "prompt_completion":
        return lambda record: prompt_completion_example(
            _text(record, data.prompt_field), _text(record, data.completion_field), tokenizer
        )
    return lambda record: text_example(_text(record, data.text_field), tokenizer)


def _field(record: dict[str, Any], name: str) -> Any:
    if name not in record:
        raise EngineError(f"a data record has no field {name!r} (fields: {sorted(record)})")
    return record[name]


def _text(record: dict[str, Any], name: str) -> str:
    value = _field(record, name)
    if not isinstance(value, str):
        raise EngineError(f"data field {name!r} is {type(value).__name__}, not a string")
    return value


def text_example(text: str, tokenizer: Any) -> Example:
    """A document, EOS appended; every token carries loss."""
    ids = tokenizer.encode(text)
    return Example(ids, list(ids))


def prompt_completion_example(prompt: str, completion: str, tokenizer: Any) -> Example:
    """Prompt then completion + EOS, tokenized apart so the boundary is exact; the loss
    is on the completion only."""
    prompt_ids = tokenizer.encode(prompt)[:-1]  # encode appends EOS: not between the two
    completion_ids = tokenizer.encode(completion)
    return Example(prompt_ids + completion_ids, [IGNORE] * len(prompt_ids) + completion_ids)


def chat_example(messages: Any, tokenizer: Any) -> Example:
    """A conversation rendered by the chat template; loss on assistant text only."""
    hf = tokenizer.hf
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise EngineError("a chat record's messages are not a list of {role, content} objects")
    text = _render(hf, messages)
    spans = list(_assistant_spans(hf, messages, text))
    encoded = hf(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    labels = [
        token if any(start <= begin < end for start, end in spans) else IGNORE
        for token, (begin, _) in zip(ids, encoded["offset_mapping"], strict=True)
    ]
    return Example(ids, labels)


def _render(hf: Any, messages: list[dict[str, Any]], *, generation_prompt: bool = False) -> str:
    try:
        return hf.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )
    except Exception as exc:  # jinja raises its own errors for a template's raise_exception
        raise EngineError(f"the chat template cannot render a record: {first_line(exc)}") from None


def _assistant_spans(hf: Any, messages: list[dict[str, Any]], text: str):
    """Character spans of ``text`` each assistant message adds: from the rendering of the
    turns before it (with the generation prompt) to the rendering that includes it."""
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        before = _render(hf, messages[:index], generation_prompt=True) if index else ""
        upto = _render(hf, messages[: index + 1])
        if not (text.startswith(before) and text.startswith(upto)):
            raise EngineError(
                "the chat template does not render a conversation as the concatenation of "
                "its turns, so assistant tokens cannot be told apart"
            )
        yield len(before), len(upto)
