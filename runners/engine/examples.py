"""One dataset record → one training example: token ids and the labels that carry loss.

``text`` trains on every token. ``chat`` renders ``messages`` with the tokenizer's chat
template and trains only on the assistant turns (the text each assistant message adds to
the rendering, end-of-turn tokens included); ``prompt_completion`` trains only on the
completion and its EOS. Every other label is ``IGNORE``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fsdpspec.spec.v1 import Data
from fsdpspec_runners.engine.errors import EngineError, first_line

IGNORE = -100  # cross_entropy's ignore_index
RENDER_TIMEOUT_S = 10.0  # a real template renders a record in milliseconds


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
    text = render_chat(hf, messages)
    spans = list(_assistant_spans(hf, messages, text))
    encoded = hf(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    labels = [
        token if any(start <= begin < end for start, end in spans) else IGNORE
        for token, (begin, _) in zip(ids, encoded["offset_mapping"], strict=True)
    ]
    return Example(ids, labels)


class RenderTimeout(Exception):
    def __str__(self) -> str:
        return (f"rendering one record took more than {RENDER_TIMEOUT_S:g} s (does the "
                "template loop?)")


@contextmanager
def _time_bound(seconds: float) -> Iterator[None]:
    """Raise RenderTimeout in the block after ``seconds`` (a template's loops are Python
    code, so the alarm interrupts them). Only the main thread can take signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum: int, _frame: Any) -> None:
        raise RenderTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def render_chat(hf: Any, messages: list[dict[str, Any]], *, generation_prompt: bool = False) -> str:
    try:
        with _time_bound(RENDER_TIMEOUT_S):
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
        before = render_chat(hf, messages[:index], generation_prompt=True) if index else ""
        upto = render_chat(hf, messages[: index + 1])
        if not (text.startswith(before) and text.startswith(upto)):
            raise EngineError(
                "the chat template does not render a conversation as the concatenation of "
                "its turns, so assistant tokens cannot be told apart"
            )
        yield len(before), len(upto)
