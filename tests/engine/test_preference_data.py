"""``data.format: preference`` in-process (no training): what a pair becomes (loss on the
completion tokens only, chosen then rejected, split where TRL splits them), chat
records rendered by the template, the truncation rules and their counts, and one line
naming the file and record of a pair without a chosen or a rejected answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from chat_assets import chat_tokenizer  # noqa: E402

from fsdpspec.spec.v1 import Data  # noqa: E402
from fsdpspec_runners.engine.data import Tokenizer  # noqa: E402
from fsdpspec_runners.engine.datasource import _pack  # noqa: E402
from fsdpspec_runners.engine.errors import EngineError  # noqa: E402
from fsdpspec_runners.engine.examples import IGNORE  # noqa: E402
from fsdpspec_runners.engine.records import load_records  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    return Tokenizer(str(chat_tokenizer(tmp_path_factory.mktemp("tok"))))


def _pairs(tmp_path: Path, records: list[dict], tokenizer: Tokenizer, seq_len: int = 16):
    file = tmp_path / "pairs.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    data = Data(source="dataset", path=str(file), format="preference", seq_len=seq_len,
                tokenizer=tokenizer.directory)
    return file, _pack(load_records(str(file), "train", streaming=False), data, tokenizer,
                       "data.path")


def _ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text)[:-1]


def test_a_text_pair_carries_loss_on_its_completions_only(tmp_path: Path,
                                                          tokenizer: Tokenizer) -> None:
    record = {"prompt": "w1 w2 please", "chosen": " sure w3", "rejected": " w4 w5 w6"}
    _, (packed, note) = _pairs(tmp_path, [record], tokenizer)
    assert note is None and packed["input_ids"].shape == (1, 2, 16)
    prompt, eos, pad = _ids(tokenizer, "w1 w2 please"), tokenizer.eos_id, tokenizer.pad_id
    chosen, rejected = _ids(tokenizer, " sure w3") + [eos], _ids(tokenizer, " w4 w5 w6") + [eos]
    for row, completion in enumerate((chosen, rejected)):  # chosen first, then rejected
        used = len(prompt) + len(completion)
        assert packed["input_ids"][0, row].tolist() == prompt + completion + [pad] * (16 - used)
        assert packed["labels"][0, row].tolist() == (
            [IGNORE] * len(prompt) + completion + [IGNORE] * (16 - used))


def test_a_chat_pair_is_rendered_by_the_template(tmp_path: Path,
                                                 tokenizer: Tokenizer) -> None:
    record = {"prompt": [{"role": "user", "content": "w1 please"}],
              "chosen": [{"role": "assistant", "content": "sure w3"}],
              "rejected": [{"role": "assistant", "content": "w4"}]}
    _, (packed, _) = _pairs(tmp_path, [record], tokenizer, seq_len=24)
    hf = tokenizer.hf
    prompt = hf.apply_chat_template(record["prompt"], add_generation_prompt=True,
                                    return_dict=False)
    whole = hf.apply_chat_template(record["prompt"] + record["chosen"], return_dict=False)
    ids, labels = packed["input_ids"][0, 0].tolist(), packed["labels"][0, 0].tolist()
    assert ids[:len(whole)] == whole
    assert labels[:len(whole)] == [IGNORE] * len(prompt) + whole[len(prompt):]


def test_truncation_cuts_completions_and_drops_prompts_that_fill_seq_len(
        tmp_path: Path, tokenizer: Tokenizer) -> None:
    records = [{"prompt": "w1", "chosen": " w2", "rejected": " w3"},
               {"prompt": "w1 w2", "chosen": " " + " ".join(["w5"] * 20), "rejected": " w3"},
               {"prompt": " ".join(["w1"] * 9), "chosen": " w2", "rejected": " w3"}]
    _, (packed, note) = _pairs(tmp_path, records, tokenizer, seq_len=8)
    assert packed["input_ids"].shape == (2, 2, 8)
    assert note == ("data.path: 1 of 3 preference pairs are longer than seq_len 8; their "
                    "completions were cut at the end; 1 of 3 preference pairs have a prompt "
                    "of seq_len 8 tokens or more and were left out")
    assert (packed["labels"][1, 0] != IGNORE).sum() == 6  # 8 - the prompt's 2


@pytest.mark.parametrize("missing", ["chosen", "rejected"])
def test_a_pair_without_an_answer_names_its_file_and_record(
        tmp_path: Path, tokenizer: Tokenizer, missing: str) -> None:
    good = {"prompt": "w1", "chosen": " w2", "rejected": " w3"}
    bad = {k: v for k, v in good.items() if k != missing}
    with pytest.raises(EngineError) as caught:
        _pairs(tmp_path, [good, bad], tokenizer)
    file = tmp_path / "pairs.jsonl"
    assert str(caught.value) == f"data.path: {file} (split train) record 1 has no {missing!r}"


def test_a_field_the_records_lack_lists_their_fields(tmp_path: Path,
                                                     tokenizer: Tokenizer) -> None:
    record = {"prompt": "w1", "good": " w2", "rejected": " w3"}
    with pytest.raises(EngineError) as caught:
        _pairs(tmp_path, [record], tokenizer)
    assert str(caught.value).endswith(
        "record 0 has no 'chosen' (fields: ['good', 'prompt', 'rejected'])")


# Records whose prompt is implicit (TRL reads them so: trl-lib/ultrafeedback_binarized's
# chosen and rejected hold the whole conversation), and one whose text prompt stands
# beside chat completions (TRL ignores it).
IMPLICIT = [
    {"chosen": "w1 w2 please sure w3", "rejected": "w1 w2 please w4 w5"},
    {"chosen": [{"role": "user", "content": "w1 please"},
                {"role": "assistant", "content": "w2 w3"}],
     "rejected": [{"role": "user", "content": "w1 please"},
                  {"role": "assistant", "content": "w4"}]},
    {"prompt": "w1 please",
     "chosen": [{"role": "user", "content": "w1 please"},
                {"role": "assistant", "content": "w2"}],
     "rejected": [{"role": "user", "content": "w1 please"},
                  {"role": "assistant", "content": "w5 w6"}]},
    {"chosen": "w1 w2", "rejected": "w1 w2 w3"},  # one a prefix of the other
]


@pytest.mark.parametrize("record", IMPLICIT)
def test_an_implicit_prompt_is_split_as_trl_splits_it(tmp_path: Path, tokenizer: Tokenizer,
                                                       record: dict) -> None:
    """The pair is the pair of the record TRL's maybe_extract_prompt makes, token for
    token, and said once."""
    from trl.data_utils import maybe_extract_prompt

    for part in ("implicit", "trl"):
        (tmp_path / part).mkdir()
    _, (packed, note) = _pairs(tmp_path / "implicit", [record], tokenizer)
    _, (refereed, _) = _pairs(tmp_path / "trl", [maybe_extract_prompt(dict(record))],
                              tokenizer)
    assert packed["input_ids"].tolist() == refereed["input_ids"].tolist()
    assert packed["labels"].tolist() == refereed["labels"].tolist()
    assert note == ("data.path: 1 of 1 preference pairs have no prompt of their completions' "
                    "kind; the common start of chosen and rejected is their prompt (TRL's "
                    "extract_prompt)")


def test_an_implicit_prompt_needs_a_common_start(tmp_path: Path,
                                                 tokenizer: Tokenizer) -> None:
    with pytest.raises(EngineError) as caught:
        _pairs(tmp_path, [{"chosen": "w1 w2", "rejected": "x3 x4"}], tokenizer)
    assert str(caught.value).endswith(
        "record 0 has no prompt, and its chosen and rejected share no start to take as one")
