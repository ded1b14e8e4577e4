"""Records → examples → packed sequences: which tokens carry loss, and where positions
restart. In-process, with the real tokenizer and `datasets`."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("datasets")

from chat_assets import ANSWER, QUESTION, chat_parquet, chat_tokenizer, conversation  # noqa: E402

from fsdpspec.spec.v1 import Data  # noqa: E402
from fsdpspec_runners.engine.data import Tokenizer  # noqa: E402
from fsdpspec_runners.engine.examples import (  # noqa: E402
    IGNORE,
    Example,
    chat_example,
    prompt_completion_example,
)
from fsdpspec_runners.engine.packing import Fitting, example_rows  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    return Tokenizer(str(chat_tokenizer(tmp_path_factory.mktemp("tokenizer"))))


def _tokens(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    return tokenizer.hf.convert_ids_to_tokens(ids)


def test_chat_loss_is_on_the_assistant_turn_only(tokenizer: Tokenizer) -> None:
    import random

    example = chat_example(conversation(random.Random(1)), tokenizer)
    trained = [label for label in example.labels if label != IGNORE]
    # The answer's words and the end-of-turn token after them; nothing else.
    assert _tokens(tokenizer, trained) == [*ANSWER.split(), "</s>"]
    untrained = [i for i, label in zip(example.ids, example.labels, strict=True) if label == IGNORE]
    assert " ".join(_tokens(tokenizer, untrained)).count(QUESTION) == 1
    assert "<|assistant|>" in _tokens(tokenizer, untrained)


def test_prompt_completion_trains_the_completion_and_eos(tokenizer: Tokenizer) -> None:
    example = prompt_completion_example(QUESTION, ANSWER, tokenizer)
    trained = [label for label in example.labels if label != IGNORE]
    assert _tokens(tokenizer, trained) == [*ANSWER.split(), "</s>"]
    assert len(example.ids) == len(QUESTION.split()) + len(ANSWER.split()) + 1


def test_packing_keeps_examples_whole_and_restarts_positions() -> None:
    a = Example([5, 6, 7], [IGNORE, 6, 7])
    b = Example([8, 9], [IGNORE, 9])
    c = Example([10, 11, 12, 13], [IGNORE, IGNORE, 12, 13])
    rows = list(example_rows([a, b, c], seq_len=6, pad_id=0, several=True))
    assert [r["input_ids"] for r in rows] == [[5, 6, 7, 8, 9, 0], [10, 11, 12, 13, 0, 0]]
    assert [r["position_ids"] for r in rows] == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]]
    # An example's first token is never a target (it would be predicted from the one
    # before), and padding carries no loss.
    assert rows[0]["labels"] == [IGNORE, 6, 7, IGNORE, 9, IGNORE]
    one_each = list(example_rows([a, b], seq_len=6, pad_id=0, several=False))
    assert [r["input_ids"] for r in one_each] == [[5, 6, 7, 0, 0, 0], [8, 9, 0, 0, 0, 0]]


def test_examples_without_a_target_are_dropped() -> None:
    silent = Example([1, 2, 3], [IGNORE, IGNORE, IGNORE])  # a chat with no assistant turn
    kept = Example([5, 6], [IGNORE, 6])
    fitting = Fitting()
    rows = list(example_rows([silent, kept], seq_len=3, pad_id=0, several=True,
                             fitting=fitting))
    assert [r["input_ids"] for r in rows] == [[5, 6, 0]]
    assert fitting.note("data.path", 3) == ("data.path: 1 of 2 examples have no token that "
                                            "carries loss and were left out")


def test_a_prompt_longer_than_seq_len_is_cut_from_its_start() -> None:
    """The answer (labels 7, 8) starts past seq_len 4: the example keeps the 2 tokens
    before it and its answer, where it used to be dropped (and a set of such examples
    failed the run after validate passed it)."""
    long = Example([1, 2, 3, 4, 5, 6, 7, 8], [IGNORE] * 6 + [7, 8])
    fits = Example([5, 6], [IGNORE, 6])  # its answer lies within seq_len: as before
    fitting = Fitting()
    rows = list(example_rows([long, fits], seq_len=4, pad_id=0, several=False,
                             fitting=fitting))
    assert [r["input_ids"] for r in rows] == [[5, 6, 7, 8], [5, 6, 0, 0]]
    assert rows[0]["labels"] == [IGNORE, IGNORE, 7, 8]
    assert rows[0]["position_ids"] == [0, 1, 2, 3]
    assert fitting.note("data.eval", 4) == ("data.eval: 1 of 2 examples have no answer token "
                                            "within seq_len 4; their prompts were cut from "
                                            "the start")
    assert Fitting(examples=3).note("data.path", 4) is None


def test_a_byte_prompt_longer_than_seq_len_trains_its_completion(tmp_path: Path) -> None:
    """The soundness case: prompt_completion records of 40 bytes, no tokenizer (one
    token a byte), seq_len 16, packing off. Every example is cut, none is lost, and the
    note names the part."""
    import json

    from fsdpspec_runners.engine.datasource import _pack
    from fsdpspec_runners.engine.records import load_records

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": "w1 w2 w3 w4 " * 4, "completion": "w5 w6"})
                             + "\n" for _ in range(3)))
    data = Data(source="dataset", path=str(pairs), format="prompt_completion", seq_len=16,
                packing=False)
    packed, note = _pack(load_records(str(pairs), "train", streaming=False), data,
                         Tokenizer(None), "data.path")
    assert packed["input_ids"].shape == (3, 16)
    assert ((packed["labels"] != IGNORE).sum(dim=1) > 0).all()
    assert note == ("data.path: 3 of 3 examples have no answer token within seq_len 16; "
                    "their prompts were cut from the start")


def test_streamed_sequences_equal_the_cached_ones(tmp_path: Path, tokenizer: Tokenizer) -> None:
    """The stream yields the same sequences, in the same order, as the tokenized set."""
    from fsdpspec_runners.engine.datasource import StreamSource, _pack
    from fsdpspec_runners.engine.records import load_records

    location = str(chat_parquet(tmp_path / "chats", train=12, test=2))
    data = Data(source="dataset", path=location, format="chat", seq_len=48,
                tokenizer=tokenizer.directory)
    packed, _note = _pack(load_records(location, "train", streaming=False), data, tokenizer,
                          "data.path")
    stream = StreamSource(load_records(location, "train", streaming=True), data, tokenizer)
    count = len(packed["input_ids"])
    for index in (0, 2, count + 1):  # forward only, across an epoch boundary
        row = stream.sequence(index)
        for name, tensor in packed.items():
            assert row[name].tolist() == tensor[index % count].tolist()


def test_hub_dataset_ids_read_the_local_cache_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`org/name` is read from a cache in the Hub layout; one not cached is one line that
    says how to fetch it."""
    from fsdpspec_runners.engine.errors import EngineError
    from fsdpspec_runners.engine.records import load_records

    repo = tmp_path / "hub" / "datasets--acme--chats"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("a" * 40)
    chat_parquet(repo / "snapshots" / ("a" * 40), train=5, test=1)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert len(load_records("acme/chats", "test", streaming=False)) == 1
    with pytest.raises(EngineError, match=r"acme/other is not in the local cache; fetch it "
                       r"with `huggingface-cli download --repo-type dataset acme/other`"):
        load_records("acme/other", "train", streaming=False)


def test_a_held_out_fraction_is_seeded_and_disjoint(tmp_path: Path) -> None:
    from fsdpspec_runners.engine.records import load_record_sets

    location = str(chat_parquet(tmp_path / "chats", train=20, test=1))
    data = Data(source="dataset", path=location, format="chat", eval={"fraction": 0.25})
    first, again = load_record_sets(data, seed=3), load_record_sets(data, seed=3)
    assert (len(first.train), len(first.eval)) == (15, 5)
    assert first.eval["messages"] == again.eval["messages"]
    everything = load_record_sets(Data(source="dataset", path=location), seed=3).train
    split = [*first.train["messages"], *first.eval["messages"]]
    assert sorted(map(str, split)) == sorted(map(str, everything["messages"]))


def test_a_fifo_ref_in_the_cache_never_blocks_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from fsdpspec_runners.engine.errors import EngineError
    from fsdpspec_runners.engine.records import load_records

    refs = tmp_path / "hub" / "datasets--acme--chats" / "refs"
    refs.mkdir(parents=True)
    os.mkfifo(refs / "main")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(EngineError, match="acme/chats is not in the local cache"):
        load_records("acme/chats", "train", streaming=False)


def test_a_stream_says_when_it_cut_a_prompt(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A streamed set is never packed whole, so the note comes at the first cut example."""
    import json

    import torch

    from fsdpspec_runners.engine.datasource import StreamSource
    from fsdpspec_runners.engine.dist import Runtime
    from fsdpspec_runners.engine.records import load_records

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": "w1 " * 12, "completion": "w5"}) + "\n"
                             for _ in range(2)))
    data = Data(source="dataset", path=str(pairs), format="prompt_completion", seq_len=16,
                streaming=True)
    stream = StreamSource(load_records(str(pairs), "train", streaming=True), data,
                          Tokenizer(None), Runtime(0, 1, 0, torch.device("cpu")))
    assert (stream.sequence(0)["labels"] != IGNORE).any()
    stream.sequence(1)
    # Once (the packer had read the second example when it gave the first sequence).
    assert capsys.readouterr().out == ("data.path (so far in the stream): 2 of 2 examples "
                                       "have no answer token within seq_len 16; their "
                                       "prompts were cut from the start\n")
