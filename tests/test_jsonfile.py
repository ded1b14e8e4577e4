"""fsdpspec/jsonfile.py, the one bounded JSON reader: a FIFO or a device is refused
without being read, and a read that never answers (a stale network mount) is given up
after READ_TIMEOUT_S, each with FS040 and one line naming the file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from fsdpspec import jsonfile
from fsdpspec.jsonfile import JsonFileError, load_object


def test_a_fifo_is_refused_with_its_code_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)  # no writer: a blocking open or read would wait forever
    with pytest.raises(JsonFileError) as caught:
        load_object(fifo)
    assert caught.value.coded() == f"FS040 {fifo} is a FIFO, device or socket, not a regular file"


def test_a_device_is_refused_with_its_code() -> None:
    with pytest.raises(JsonFileError) as caught:
        load_object(Path("/dev/zero"))  # endless: read to a size limit it would be garbage
    assert caught.value.coded() == "FS040 /dev/zero is a FIFO, device or socket, not a regular file"


def test_a_read_that_never_answers_is_given_up(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    """The read bound on a real read that blocks: the read end of a pipe whose writer
    stays open and silent, as a stale network mount leaves a read(2). The bound is
    lowered so the test does not wait 10 s; what is checked is the refusal, not a time."""
    monkeypatch.setattr(jsonfile, "READ_TIMEOUT_S", 0.2)
    read_end, write_end = os.pipe()
    before = set(threading.enumerate())
    try:
        with pytest.raises(JsonFileError) as caught:
            jsonfile._read_within(read_end, 1 << 20, tmp_path / "config.json")
        assert caught.value.coded() == (f"FS040 {tmp_path / 'config.json'}: no answer after "
                                        "0.2 s (a stale network mount?)")
        (reader,) = set(threading.enumerate()) - before  # the blocked read, left behind
    finally:
        os.close(write_end)  # the abandoned read now sees end of file, and returns
    reader.join()
    os.close(read_end)
