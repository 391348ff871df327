"""Keep TensorFlow's C++ start-up chatter off the user's terminal, and nothing else.

TensorFlow's native libraries write to file descriptor 2 before Python sees them: the oneDNN notice,
`cpu_feature_guard`, "Could not find cuda drivers", and `failed call to cuInit` on a machine with CUDA
libraries but no GPU. The lines printed before absl's logging is initialised ignore
`TF_CPP_MIN_LOG_LEVEL` entirely, so an environment variable alone cannot hide them (it is how
`.ci/demo` used to do it, with a grep). While a command runs, `quiet()` therefore points descriptor 2
at a pipe and copies every line to the real stderr except those that match `NOISE`, a list of exactly
the start-up lines, so a real error from TensorFlow (or anything else) still reaches the user, in order.

The user keeps control: `specgen --verbose ...`, or their own `TF_CPP_MIN_LOG_LEVEL`, turns all of it
off and TensorFlow logs as it always does. Everything else is left alone: Python's own stderr goes
through the same pipe unchanged, and the pipe is drained and descriptor 2 restored when the command
ends (also on an exception), so a caller of `cli.main` in the same process sees no difference after.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator

# One alternative per kind of start-up line; the `[IWE]0000 ...  file.cc:N]` prefix is absl's.
NOISE = re.compile(
    rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|[IWE]\d{4} [\d:. ]+\s+\d+ (port|cudart_stub|cpu_feature_guard|cuda_platform|cuda_driver|cuda_executor)\.cc:\d+\] "
    # libjpeg's complaint about a JPEG that TensorFlow then refuses to decode: specgen's own line names the file
    # and the image (runtime/sources/images.py, or the mid-run data error), this one names neither
    rb"|E\d{4} [\d:. ]+\s+\d+ jpeg_mem\.cc:\d+\] "
    # oneDNN's notice on a machine without AVX-512 (AVX2) the first time a graph holds a bool tensor (every masked
    # model): logged as an error, but TensorFlow then runs its own Eigen kernel, which computes the same values.
    # util.cc logs other things too: only this message, whole.
    rb"|E\d{4} [\d:. ]+\s+\d+ util\.cc:\d+\] oneDNN supports DT_BOOL only on platforms with AVX-512\. "
    rb"Falling back to the default Eigen-based implementation if present\.$"
    rb"|To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler flags\.$)"
)
# Below warnings: TensorFlow's INFO and WARNING lines after absl starts (device placement, XLA notes).
DEFAULT_LEVEL = "2"


@contextlib.contextmanager
def quiet(verbose: bool = False) -> Iterator[None]:
    """Filter descriptor 2 for the duration of a command, unless the user asked for TensorFlow's logs."""
    if verbose or "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        yield
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = DEFAULT_LEVEL
    try:
        real = os.dup(2)
    except OSError:  # no descriptor 2 at all (a daemon started with it closed): nothing to filter
        yield
        return
    read, write = os.pipe()
    copier = threading.Thread(target=_copy, args=(read, real), name="specgen-native-logs", daemon=True)
    copier.start()
    os.dup2(write, 2)
    os.close(write)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()  # Python's buffered lines go through the pipe before it closes
        # Give descriptor 2 back first: the pipe's last writer closes, so the copier reads the rest, sees
        # the end and stops. A child process still holding the pipe keeps it open; the copier, a daemon,
        # then goes on copying its lines for as long as this process lives, which is what the user wants.
        os.dup2(real, 2)
        copier.join(timeout=5)
        if not copier.is_alive():
            os.close(real)


def _copy(read: int, real: int) -> None:
    """Copy the pipe to the real stderr as it arrives, dropping whole lines of start-up chatter.

    Only the start of a line that could still become chatter is held back until its newline: a
    progress bar's `\r` updates, which never end a line, and every other partial line pass at once.
    """
    held = b""  # the start of a line that may still turn out to be chatter
    passing = False  # the current line's start was copied already: copy the rest too
    with os.fdopen(read, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            data, held, out = held + chunk, b"", []
            while data:
                line, newline, data = data.partition(b"\n")
                if newline:
                    if passing or not NOISE.match(line):
                        out.append(line + newline)
                    passing = False
                elif passing or not _may_be_noise(line):
                    out.append(line)
                    passing = True
                else:
                    held = line
            _write(real, b"".join(out))
    if held and not NOISE.match(held):
        _write(real, held)


def _may_be_noise(start: bytes) -> bool:
    """Whether an unfinished line could still match NOISE (every alternative starts with I, W, E or T)."""
    return start[:1] in (b"I", b"W", b"E", b"T") and b"\r" not in start and len(start) < 4096


def _write(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except OSError:  # the terminal went away: nothing left to show the lines to
            return
