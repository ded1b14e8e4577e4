"""Data, tokenizer and template failures are one EngineError line (the first failing
rank prints it), never a traceback or a hang: a deeply nested jsonl record, a tokenizer
that transformers rejects though its files are JSON, a dataset with no records, a chat
template that loops, a part that packs into nothing. In-process: no training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from chat_assets import chat_tokenizer  # noqa: E402

from fsdpspec.spec.v1 import Data  # noqa: E402
from fsdpspec_runners.engine import examples  # noqa: E402
from fsdpspec_runners.engine.data import Tokenizer, read_documents  # noqa: E402
from fsdpspec_runners.engine.errors import EngineError  # noqa: E402


def test_a_deeply_nested_jsonl_record_names_its_file_and_line(tmp_path: Path) -> None:
    file = tmp_path / "d.jsonl"
    file.write_text('{"text": "fine"}\n{"text": "x", "deep": ' + "[" * 100_000
                    + "]" * 100_000 + "}\n")
    data = Data(source="jsonl", path=str(file))
    with pytest.raises(EngineError) as caught:
        list(read_documents(data))
    assert str(caught.value) == f"data.path: {file}:2: nested deeper than 32 levels"


def test_a_tokenizer_transformers_rejects_is_one_line(tmp_path: Path) -> None:
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    (tok / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast"}))
    with pytest.raises(EngineError) as caught:
        Tokenizer(str(tok))
    assert str(caught.value).startswith(f"data.tokenizer: cannot load {tok}: ")
    assert "\n" not in str(caught.value)


def test_a_dataset_without_records_is_one_line(tmp_path: Path) -> None:
    from fsdpspec_runners.engine.records import load_records

    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(EngineError) as caught:
        load_records(str(tmp_path / "empty.jsonl"), "train", streaming=False)
    assert str(caught.value) == (f"data.path: {tmp_path / 'empty.jsonl'} (split 'train') "
                                 "holds no records")


LOOPING = ("{% for a in range(100000) %}{% for b in range(100000) %}{{ '' }}{% endfor %}"
           "{% endfor %}{% for m in messages %}{{ m['content'] }}{% endfor %}")


def test_a_chat_template_that_loops_is_stopped_by_the_time_bound(
    tmp_path: Path, monkeypatch
) -> None:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(chat_tokenizer(tmp_path / "tok"))
    hf.chat_template = LOOPING
    tokenizer = type("T", (), {"hf": hf})()
    monkeypatch.setattr(examples, "RENDER_TIMEOUT_S", 0.5)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    with pytest.raises(EngineError) as caught:
        examples.chat_example(messages, tokenizer)
    assert str(caught.value) == ("the chat template cannot render a record: rendering one "
                                 "record took more than 0.5 s (does the template loop?)")


def test_an_eval_part_that_packs_into_nothing_names_data_eval(tmp_path: Path) -> None:
    """Only a part with nothing to predict is refused now: an empty document is its EOS
    alone (a short one is one padded sequence, below)."""
    from fsdpspec_runners.engine.datasource import _pack

    data = Data(source="dataset", path="x", seq_len=64)
    with pytest.raises(EngineError) as caught:
        _pack([{"text": ""}], data, Tokenizer(None), "data.eval")
    assert str(caught.value).startswith("data.eval: the data holds less than one sequence of "
                                        "64 tokens")


def test_text_shorter_than_one_sequence_is_one_padded_sequence() -> None:
    """A small held-out fraction of a text dataset used to pack into nothing and fail the
    run after validate passed it; it is one sequence now, its padding without loss."""
    from fsdpspec_runners.engine.datasource import _pack
    from fsdpspec_runners.engine.examples import IGNORE

    data = Data(source="dataset", path="x", seq_len=64)
    packed, note = _pack([{"text": "too short"}], data, Tokenizer(None), "data.eval")
    assert note is None
    ids, labels = packed["input_ids"][0].tolist(), packed["labels"][0].tolist()
    assert len(ids) == 64 and bytes(ids[:9]) == b"too short"
    assert labels[:10] == ids[:10] and set(labels[10:]) == {IGNORE}  # 9 bytes + EOS
