"""Dataset records through Hugging Face ``datasets``: local jsonl / json / parquet / arrow
files, a directory of them (``train-*.parquet``… name the splits) or one written by
``save_to_disk``, or a Hub dataset id read from the local cache only.

The engine never downloads: a Hub dataset must be in the Hugging Face cache (``HF_HOME``
/ ``HF_HUB_CACHE``, as `huggingface-cli download --repo-type dataset` leaves it) before
the run starts; its snapshot directory is then read like a local one.
"""

from __future__ import annotations

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
    import datasets

    datasets.disable_progress_bars()
    path = Path(location) if Path(location).is_absolute() else cached_hub_dataset(location)
    try:
        records = _load_local(path, split, streaming)
    except EngineError:
        raise
    except StopIteration:  # datasets' reading of an empty file or snapshot
        raise EngineError(f"data.path: {location} (split {split!r}) holds no records") from None
    except Exception as exc:  # unknown split, unreadable file, schema, an empty snapshot…
        raise EngineError(f"data.path: {location} (split {split!r}): {first_line(exc)}") from None
    if not streaming and len(records) == 0:
        raise EngineError(f"data.path: {location} (split {split!r}) holds no records")
    return records


def cached_hub_dataset(repo: str) -> Path:
    """The local snapshot of Hub dataset ``org/name[@revision]`` (never downloaded),
    found by fsdpspec's own cache reader: its refs are read bounded and non-blocking."""
    from fsdpspec.catalog.hub import cached_snapshot, parse_hub_id

    hub = parse_hub_id(repo, "dataset")
    found = cached_snapshot(hub) if hub is not None else None
    if found is None:
        repo_id = repo.partition("@")[0]
        raise EngineError(
            f"data.path: Hub dataset {repo} is not in the local cache; fetch it with "
            f"`huggingface-cli download --repo-type dataset {repo_id}`"
        )
    return found


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
