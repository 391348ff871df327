"""A running trial's scalars, read as its `specgen train` writes them: new records only, each poll.

The records are TFRecord frames (specgen/framing.py: length, its CRC, data, its CRC); each file is read
from where the last poll stopped, and only whole records are taken: a record still being written (its length or
data not all there yet) is left for the next poll. A record whose CRC fails is stepped over, as
pictures/events.py does; a length that fails its CRC ends that file for good. Values come from
`events.scalar`, the rule `specgen curves` reads them by.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from specgen import framing
from specgen.framing import FOOTER, HEADER
from specgen.pictures.events import MAX_RECORD, scalar


@dataclass
class _File:
    offset: int = 0
    broken: bool = False


@dataclass
class Follower:
    """The points of one tag in one stage folder of a run (`run/tensorboard/eval`, `accuracy`)."""

    folder: Path
    tag: str
    points: dict[int, float] = field(default_factory=dict)  # step -> value (a later value of a step wins)
    _files: dict[str, _File] = field(default_factory=dict)

    def poll(self) -> list[tuple[int, float]]:
        """The (step, value) points written since the last poll, in the order they were written."""
        try:
            names = sorted(n for n in os.listdir(self.folder) if n.startswith("events.out.tfevents."))
        except OSError:  # not made yet: the run has not started writing
            return []
        new: list[tuple[int, float]] = []
        for name in names:
            state = self._files.setdefault(name, _File())
            if not state.broken:
                new += self._read(self.folder / name, state)
        for step, value in new:
            self.points[step] = value
        return new

    def _read(self, path: Path, state: _File) -> list[tuple[int, float]]:
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto.event_pb2 import Event

        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return []
        found = []
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                state.broken = True
                return []
            file.seek(state.offset)
            while info.st_size - state.offset >= HEADER + FOOTER:
                header = framing.header(file.read(HEADER))
                if header is None:  # the file shrank while it was read
                    break
                if not header.intact:
                    state.broken = True  # the framing is lost: nothing after it can be found
                    break
                length = header.length
                if length > info.st_size - state.offset - HEADER - FOOTER:
                    break  # not all written yet
                if length > MAX_RECORD:
                    file.seek(length + FOOTER, os.SEEK_CUR)
                    state.offset += framing.size(length)
                    continue
                data, footer = file.read(length), file.read(FOOTER)
                state.offset += framing.size(length)
                if not framing.data_intact(data, footer):
                    continue
                try:
                    event = Event.FromString(data)
                except DecodeError:
                    continue
                for value in event.summary.value:
                    number = scalar(value) if value.tag == self.tag else None
                    if isinstance(number, float):
                        found.append((int(event.step), number))
        return found
