"""How long `specgen import keras` takes on a model of N chained layers (issue 17: it was quadratic).

Writes a `.keras` file holding only config.json (tests/keras_configs.py's `chain`: an input, then N
ReLU layers each reading the previous one) and times `import_keras` on it in this process, the
same work as `specgen import keras chain.keras -o chain.yaml` after Python's start-up. Above the
spec's 10,000-layer limit the import is refused, and the time shown is how long the refusal took.

    python bench/import_size.py                 # 10,000 and 20,000 layers
    python bench/import_size.py 2000 5000 10000  # other sizes
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the config builders the tests use

from keras_configs import chain, write_keras

from specgen.diagnostics import SpecError
from specgen.importers.keras import import_keras


def main(sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        for n in sizes:
            source = write_keras(Path(folder) / f"chain{n}.keras", chain(n))
            start = time.perf_counter()
            try:
                result = import_keras(str(source), Path(folder) / f"chain{n}.yaml")
                outcome = f"wrote {result.layers} layers"
            except SpecError as exc:
                outcome = "refused: " + str(exc.diagnostics[0].message)[:120]
            seconds = time.perf_counter() - start
            print(f"{n:>6} layers, {source.stat().st_size / 1024:6.0f} KiB file: {seconds:7.2f} s  {outcome}",
                  flush=True)


def arguments(argv: list[str] | None) -> list[int]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs="*", default=[10_000, 20_000], metavar="N",
                        help="layers in the chain, one import each (default 10000 20000)")
    sizes: list[int] = parser.parse_args(argv).sizes
    if any(n < 1 for n in sizes):
        parser.error("each N must be at least 1")
    return sizes


if __name__ == "__main__":
    main(arguments(None))
