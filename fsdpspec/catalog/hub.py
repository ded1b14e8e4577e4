"""Hugging Face Hub ids (``org/name[@revision]``) resolved through the local cache.

Reads the cache layout ``huggingface_hub`` writes, without importing it (validate stays
fast and offline): ``<cache>/<type>s--<org>--<name>/refs/<revision>`` holds a commit
hash and ``snapshots/<commit>/`` the files. The cache is ``HF_HUB_CACHE``, else
``HF_HOME/hub``, else ``~/.cache/huggingface/hub``. Only ``fetch`` downloads, and it is
called by `fsdpspec run` alone, when ``HF_HUB_OFFLINE`` is not set.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from fsdpspec.jsonfile import JsonFileError, read_text

# org/name with Hub-legal characters, an optional @revision (branch, tag or commit).
_HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<rev>[\w./-]+))?")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_TRUE = {"1", "on", "yes", "true"}


class HubError(ValueError):
    """A Hub id that cannot be resolved here (one line, with the command that fixes it)."""


@dataclass(frozen=True)
class HubId:
    """A repository on the Hub, at a revision."""

    repo: str
    revision: str = "main"
    repo_type: str = "model"

    def __str__(self) -> str:
        return self.repo if self.revision == "main" else f"{self.repo}@{self.revision}"

    @property
    def download_command(self) -> str:
        kind = "" if self.repo_type == "model" else f" --repo-type {self.repo_type}"
        rev = "" if self.revision == "main" else f" --revision {self.revision}"
        return f"huggingface-cli download {self.repo}{kind}{rev}"


def parse_hub_id(value: str, repo_type: str = "model") -> HubId | None:
    """The Hub id ``value`` spells, or None when it is not shaped like one."""
    found = _HUB_ID.fullmatch(value)
    if found is None or ".." in value:
        return None
    return HubId(found["repo"], found["rev"] or "main", repo_type)


def cache_dir() -> Path:
    """Where huggingface_hub keeps downloaded repositories."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path("~/.cache/huggingface")
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids reaching the Hub."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def _repo_folder(hub: HubId) -> Path:
    return cache_dir() / f"{hub.repo_type}s--{hub.repo.replace('/', '--')}"


def cached_snapshot(hub: HubId) -> Path | None:
    """The cached snapshot directory of ``hub`` at its revision, or None."""
    folder = _repo_folder(hub)
    commit = hub.revision
    if not _COMMIT.fullmatch(commit):
        ref = folder / "refs" / commit
        try:
            commit = read_text(ref, 256)  # a FIFO or a stale mount must not hang validate
        except JsonFileError:
            return None
    snapshot = folder / "snapshots" / commit
    return snapshot if _COMMIT.fullmatch(commit) and snapshot.is_dir() else None


def snapshot(hub: HubId) -> Path:
    """The cached snapshot of ``hub``; HubError naming the download command when it is
    not cached."""
    found = cached_snapshot(hub)
    if found is not None:
        return found
    why = "and HF_HUB_OFFLINE is set" if offline() else "(`fsdpspec run` fetches it when online)"
    raise HubError(f"{hub} is not in the Hugging Face cache {cache_dir()} {why}; fetch it "
                   f"with `{hub.download_command}`")


def fetch(hub: HubId, patterns: list[str] | None = None) -> Path:
    """Download ``hub`` (the files matching ``patterns``, or all) into the cache unless
    it is there, and return its snapshot."""
    found = cached_snapshot(hub)
    if found is not None or offline():
        return snapshot(hub)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return Path(snapshot_download(hub.repo, revision=hub.revision, repo_type=hub.repo_type,
                                      allow_patterns=patterns))
    except (HfHubHTTPError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HubError(f"cannot download {hub}: {first}") from None
