"""FS530's reading of split names, as `datasets` infers them from file names."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdpspec.lint.splits import local_splits


@pytest.mark.parametrize("files, splits", [
    (["train.parquet", "test.parquet"], {"train", "test"}),
    (["data/train-00000-of-00002.parquet", "data/valid-00000-of-00001.parquet"],
     {"train", "validation"}),
    (["dev.jsonl", "training.jsonl", "eval.jsonl"], {"validation", "train", "test"}),
    (["chats.jsonl", "more.jsonl"], {"train"}),  # no split word: all of it is train
    (["data/mine-00000-of-00001.parquet"], {"mine"}),
    (["train/a.jsonl", "test/b.jsonl"], {"train", "test"}),
])
def test_split_names_come_from_the_file_names(files: list[str], splits: set[str],
                                              tmp_path: Path) -> None:
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}\n")
    assert local_splits(tmp_path) == splits


def test_save_to_disk_lists_its_splits(tmp_path: Path) -> None:
    (tmp_path / "dataset_dict.json").write_text('{"splits": ["train", "holdout"]}')
    assert local_splits(tmp_path) == {"train", "holdout"}
    (tmp_path / "dataset_dict.json").write_text("[" * 1000 + "]" * 1000)
    assert local_splits(tmp_path) is None  # unreadable: not told here, the run says it
