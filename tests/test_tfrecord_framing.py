"""TFRecord framing checked before TensorFlow reads a shard (issue 28, defects 1 and 5): a header that declares
more bytes than the file holds (2^40, 2^62: TensorFlow's reader would size its buffer from it and die of a
signal) is one line naming the shard, the record and the byte, through the real CLI, with nothing written; the
checking pass reads records back in batches bounded in bytes, not in records."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tfrecord_helpers import digits, write_shards

from specgen.diagnostics import SpecError
from specgen.framing import masked_crc32c
from specgen.ir.resolve import build_ir
from specgen.runtime import data
from specgen.runtime.sources import tfrecord
from specgen.runtime.sources.framing import Frames, FramingError, walk
from specgen.spec.load import load_spec

SPEC = """\
specgen: 1
name: framing
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: out}
layers:
  - {name: flat, op: flatten}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: ["*"], kind: sgd, learning_rate: 0.1}}
train: {batch_size: 16, seed: 5, shuffle_buffer: 16}
data:
  train: {tfrecord: "shards/*.tfrecord", features: {image: x}, labels: {label: y}SKIP}
checkpoint: {dir: run, every_steps: 100}
"""
RECORDS = 32  # digits in the shard; each record is 286 bytes, a 302-byte frame
FRAME = 302


def header(length: int, checksum: int | None = None) -> bytes:
    """A frame's 12-byte header declaring `length`, with the right checksum unless one is given."""
    packed = struct.pack("<Q", length)
    return packed + struct.pack("<I", masked_crc32c(packed) if checksum is None else checksum)


def shard_with(folder: Path, tail: bytes, skip_bad: bool = False) -> Path:
    """A spec and one shard of RECORDS good records followed by `tail` (a hostile frame)."""
    x, y = digits(RECORDS)
    (shard,) = write_shards(folder / "shards", x, y, shards=1)
    assert shard.stat().st_size == RECORDS * FRAME
    shard.write_bytes(shard.read_bytes() + tail)
    (folder / "spec.yaml").write_text(SPEC.replace("SKIP", ", skip_bad: true" if skip_bad else ""))
    return shard


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_huge_declared_length_is_one_line_not_a_signal(tmp_path: Path) -> None:
    """`specgen data` on a record declaring 2^40 bytes and `specgen train` on one declaring 2^62 (skip_bad on:
    framing is never skipped), both with a right length checksum and 20 bytes after: before, each ended the
    process with SIGSEGV. Run as the user runs them, in parallel (each imports TensorFlow)."""
    runs: dict[str, tuple[Path, dict[str, bytes], Any]] = {}
    for command, power in (("data", 40), ("train", 62)):
        folder = tmp_path / command
        shard_with(folder, header(2**power) + bytes(20), skip_bad=command == "train")
        before = files(folder)
        process = subprocess.Popen([sys.executable, "-m", "specgen", command, "spec.yaml",
                                    *(["--steps", "2"] if command == "train" else [])],
                                   cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        runs[command] = (folder, before, process)
    for command, power in (("data", 40), ("train", 62)):
        folder, before, process = runs[command]
        _, err = process.communicate(timeout=300)
        assert process.returncode == 1, (process.returncode, err)  # a signal would be negative
        assert "Traceback" not in err, err
        assert err.splitlines()[-2:] == [
            "spec.yaml:12:21: error: data.train (shards/*.tfrecord): shard shards/train-00000.tfrecord, cannot read "
            f"record 32 (at byte 9,664): it declares {2**power:,} bytes, but the file has 20 after its header, "
            "fewer than the record and its 4-byte checksum; the file is damaged or not a TFRecord file",
            "1 error found"], err
        assert files(folder) == before  # no run folder, nothing changed


@pytest.mark.parametrize(("tail", "reason"), [
    (header(2**64 - 1), "it declares 18,446,744,073,709,551,615 bytes, but the file has 0 after its header, fewer "
                        "than the record and its 4-byte checksum"),
    (header(7) + bytes(10), "it declares 7 bytes, but the file has 10 after its header, fewer than the record and "
                            "its 4-byte checksum"),
    (header(0) + bytes(3), "it declares 0 bytes, but the file has 3 after its header, fewer than the record and its "
                           "4-byte checksum"),
    (header(7, checksum=0) + bytes(11), "the checksum of its length does not match"),
    (header(7)[:5], "the file ends inside its 12-byte header (5 bytes)"),
])
def test_every_frame_is_checked_before_tensorflow_reads(tmp_path: Path, tail: bytes, reason: str) -> None:
    shard = shard_with(tmp_path, tail)
    with pytest.raises(FramingError) as caught:
        walk(shard)
    assert str(caught.value) == f"cannot read record 32 (at byte 9,664): {reason}"
    assert (caught.value.index, caught.value.offset) == (RECORDS, RECORDS * FRAME)


def test_the_files_tensorflow_writes_frame_exactly(tmp_path: Path) -> None:
    """Frames are counted as TensorFlow writes them (an empty record, an empty file included)."""
    import tensorflow as tf

    assert walk(shard_with(tmp_path, b"")) == Frames(RECORDS, 286)
    with tf.io.TFRecordWriter(str(tmp_path / "e.tfrecord")) as writer:
        for record in (b"", b"x" * 5000, b"y"):
            writer.write(record)
    assert walk(tmp_path / "e.tfrecord") == Frames(3, 5000)
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    assert walk(tmp_path / "empty.tfrecord") == Frames(0, 0)


def test_a_record_checksum_is_tensorflows_one_line(tmp_path: Path) -> None:
    """A flipped byte inside a record passes the framing (its length is right) and is caught by TensorFlow's
    reader in the same pass, by the record's checksum: one line, before the first step."""
    shard = shard_with(tmp_path, b"")
    damaged = bytearray(shard.read_bytes())
    damaged[5 * FRAME + 12 + 100] ^= 1  # record 5's bytes
    shard.write_bytes(bytes(damaged))
    loaded = load_spec(tmp_path / "spec.yaml")
    with pytest.raises(SpecError) as caught:
        data.read_stage(loaded, build_ir(loaded), "train")
    # TensorFlow's reason names the byte where record 5's bytes start, after its 12-byte header.
    assert str(caught.value).endswith(f": data.train ({tmp_path / 'shards/*.tfrecord'}): shard shards/train-00000."
                                      "tfrecord, cannot read record 5 (at byte 1,510): corrupted record at 1522; the "
                                      "file is damaged or not a TFRecord file"), str(caught.value)


@pytest.mark.parametrize(("largest", "batch"), [(0, 1024), (286, 1024), (40_000, 419), (4_000_000, 4),
                                                (16 << 20, 1), (2**40, 1)])
def test_the_checking_pass_reads_back_by_bytes(largest: int, batch: int) -> None:
    """Records read back together: as many as fit in SCAN_BYTES (16 MiB), at most 1,024, at least one."""
    assert tfrecord.scan_batch(largest) == batch


def test_the_scan_holds_batches_of_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the reader: with the bound at 3 records' bytes, 32 records come back as 10 batches of 3 and one
    of 2, every record checked and counted once."""
    shard_with(tmp_path, b"")
    monkeypatch.setattr(tfrecord, "SCAN_BYTES", 3 * 286 + 285)
    chunk, sizes = tfrecord.Scan._chunk, []

    def seen(self: Any, shard: Path, records: Any, start: int, where: str) -> None:
        sizes.append(int(records.shape[0]))
        chunk(self, shard, records, start, where)

    monkeypatch.setattr(tfrecord.Scan, "_chunk", seen)
    loaded = load_spec(tmp_path / "spec.yaml")
    source = data.read_stage(loaded, build_ir(loaded), "train")
    assert source is not None and source.examples == RECORDS
    assert sizes == [3] * 10 + [2]
    assert np.sum(sizes) == RECORDS
