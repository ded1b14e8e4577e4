"""Dataset records through Hugging Face ``datasets``: local jsonl / json / parquet / arrow
files, a directory of them (``train-*.parquet``… name the splits) or one written by
``save_to_disk``, or a Hub dataset id read from the local cache only.

The engine never downloads: a Hub dataset must be in the cache (``HF_HOME`` /
``HF_DATASETS_CACHE``) before the run starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdpspec.spec.v1 import Data
from fsdpspec_runners.engine.errors import EngineError, first_line

_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow"}


@dataclass(frozen=True)
class RecordSets:
    """The training records and the evaluation records (None without ``data.eval``)."""

    train: Any
    eval: Any | None


def load_record_sets(data: Data, seed: int) -> RecordSets:
    """Training and evaluation records as ``data`` describes them."""
    train = load_records(data.path, data.split, streaming=data.streaming)
    if data.eval.fraction:
        parts = train.train_test_split(test_size=data.eval.fraction, seed=seed, shuffle=True)
        return RecordSets(parts["train"], parts["test"])
    if data.eval.path or data.eval.split:
        split = data.eval.split or data.split
        return RecordSets(train, load_records(data.eval.path or data.path, split,
                                              streaming=data.streaming))
    return RecordSets(train, None)


def load_records(location: str, split: str, *, streaming: bool) -> Any:
    """One split of a local dataset (absolute path) or a cached Hub dataset (an id)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read before datasets is imported
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets

    datasets.disable_progress_bars()
    try:
        if not Path(location).is_absolute():
            return datasets.load_dataset(location, split=split, streaming=streaming)
        return _load_local(Path(location), split, streaming)
    except EngineError:
        raise
    except (ConnectionError, FileNotFoundError) as exc:
        if Path(location).is_absolute():
            raise EngineError(f"data.path: cannot read {location}: {first_line(exc)}") from None
        raise EngineError(
            f"data.path: Hub dataset {location} is not in the local cache; fetch it with "
            f"`huggingface-cli download --repo-type dataset {location}`"
        ) from None
    except (ValueError, KeyError) as exc:  # unknown split, unreadable file, bad schema
        raise EngineError(f"data.path: {location} (split {split!r}): {first_line(exc)}") from None


def _load_local(path: Path, split: str, streaming: bool) -> Any:
    import datasets

    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise EngineError(f"data.path: {path} has no split {split!r} "
                                  f"(splits: {', '.join(loaded)})")
            loaded = loaded[split]
        return loaded.to_iterable_dataset() if streaming else loaded
    if path.is_dir():
        return datasets.load_dataset(str(path), split=split, streaming=streaming)
    builder = _BUILDERS.get(path.suffix)
    if builder is None or not path.is_file():
        raise EngineError(f"data.path: {path} is not a {'/'.join(_BUILDERS)} file or a "
                          "dataset directory")
    # A single file is whichever split is asked for.
    return datasets.load_dataset(builder, data_files={split: str(path)}, split=split,
                                 streaming=streaming)


def fingerprint(records: Any) -> str:
    """What identifies a loaded split's content (``datasets`` hashes the files)."""
    return str(records._fingerprint)
