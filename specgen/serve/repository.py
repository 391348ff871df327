"""A Triton-layout model repository: `REPO/<model>/config.pbtxt` and `REPO/<model>/<version>/model.onnx`.

Each model's config.pbtxt is read here and parsed by model_config.py. The versions served are the version folders
holding the model file that the config's `version_policy` selects: `latest { num_versions: N }` (the default, with
N = 1, as Triton), `all { }`, or `specific { versions: [..] }`. A request without a version gets the highest.

Nothing is read through a link that leads out of the repository (`confine`): the model folder and its
config.pbtxt before the config is read, each version folder and every link in one before any version loads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from specgen.paths import shown
from specgen.runtime.sources.base import MISSING, REGULAR, DataError, file_kind, open_regular
from specgen.serve.model_config import ModelConfig, RepositoryError, parse_config, quoted
from specgen.text import printable

# config.pbtxt is read whole before parsing: a real one is a few kilobytes (one per model input and output, a
# hundred bytes each); 1 MiB holds thousands, and a config.pbtxt that is /dev/zero or a log file stops there.
MAX_CONFIG_BYTES = 1 << 20
LINK_CHARS = 256  # a link's target in a message (a path may take 4,096 bytes): the line keeps its advice
MAX_VERSION = 2**63 - 1  # Triton's model versions are int64


@dataclass(frozen=True)
class ModelEntry:
    """One model of the repository: its config and the versions its version_policy serves (ascending)."""

    name: str
    config: ModelConfig
    versions: dict[int, Path]  # version -> its model file
    folder: Path = Path()

    @property
    def version(self) -> int:
        """The highest served version: the one a request without a version gets."""
        return max(self.versions)

    @property
    def path(self) -> Path:
        return self.versions[self.version]


def version_number(text: str) -> int | None:
    """The version a folder name or a request's version string names, or None: a positive decimal number in ASCII
    digits without a leading zero, within int64. Triton ignores version folders named otherwise ('0', '01', 'v2');
    '²' and '١' are digits to str.isdigit() but name no version (int() refuses '²')."""
    if not (text.isascii() and text.isdigit()) or text.startswith("0") or len(text) > len(str(MAX_VERSION)):
        return None
    number = int(text)
    return number if number <= MAX_VERSION else None


def version_folders(folder: Path) -> dict[int, Path]:
    """A model folder's version folders by number (sub-folders named by version_number); a RepositoryError if the
    folder cannot be listed."""
    found: dict[int, Path] = {}
    try:
        for path in folder.iterdir():
            number = version_number(path.name)
            if number is not None and path.is_dir():
                found[number] = path
    except OSError as exc:
        raise RepositoryError(f"{shown(folder)}: cannot be listed: {exc.strerror or exc}") from None
    return dict(sorted(found.items()))


def available_versions(folder: Path, filename: str) -> list[int]:
    """The version folders holding something named `filename`: a FIFO, a loop of links or a link out of the repository
    there is a version its load refuses, saying what it is (models.py `load_version`, `confine_version`), not a
    folder that holds no model, and not a problem of the whole model: the other versions load as they would."""
    versions = version_folders(folder)
    return [number for number, path in versions.items() if file_kind(path / filename) != MISSING]


def confine_version(model_file: Path) -> None:
    """A RepositoryError for a version folder, or a link in it (the model, a precision variant's files), that leads out
    of the repository: checked as each version loads, so one bad version is refused alone (`model_refused` with its
    number, an index row) and the model's other versions are served."""
    version = model_file.parent
    repo = version.parent.parent
    confine(version, repo)
    try:
        with os.scandir(version) as entries:
            links = sorted(Path(e.path) for e in entries if e.is_symlink())
    except OSError as exc:
        raise RepositoryError(f"{shown(version)}: cannot be listed: {exc.strerror or exc}") from None
    for link in links:
        confine(link, repo)


def confine(path: Path, repo: Path) -> None:
    """A RepositoryError for a symbolic link at `path` whose target, every link on the way followed, lies outside
    the repository `repo` (itself resolved: a link on the way to it is the user's). What the server reads is named
    by the repository, and what it reads can reach a client (a load's answer); so, as `extends` and an `images`
    source, it reads nothing outside. Links that stay inside are followed. Callers check a folder before what is in
    it, so a path that is no link itself lies where its folder does."""
    if not os.path.islink(path):
        return
    root, target = os.path.realpath(repo), os.path.realpath(path)
    if os.path.commonpath([root, target]) == root:
        return
    try:
        text = printable(os.readlink(path))
    except OSError as exc:  # replaced since islink
        text = f"a target that cannot be read ({exc.strerror})"
    text = text if len(text) <= LINK_CHARS else text[:LINK_CHARS - 3] + "..."
    raise RepositoryError(f"{shown(path)}: is a symbolic link to {text}, outside the model repository {shown(repo)}; "
                          "the server reads only what lies inside its repository: copy what the link points to into "
                          "the repository (or serve the repository that holds it), or remove the link")


def not_regular(path: Path, expected: str) -> RepositoryError | None:
    """The error for a `path` that is there but is no regular file (a folder, a FIFO, a loop of links), else None.
    Checked without opening it: opening a FIFO would block the server's loader until something writes to it."""
    what = file_kind(path)
    if what in (REGULAR, MISSING):
        return None
    return RepositoryError(f"{shown(path)}: is {what}, not a regular file; expected {expected}")


def read_config(folder: Path) -> ModelConfig:
    """The config of the model in `folder`, its name checked against the folder's (Triton requires them equal)."""
    source = folder / "config.pbtxt"
    confine(folder, folder.parent)  # before anything in it is read, or its config quoted in an error
    confine(source, folder.parent)
    if file_kind(source) == MISSING:
        raise RepositoryError(f"{shown(folder)}: no config.pbtxt (a Triton model folder holds config.pbtxt "
                              "and numbered version folders)")
    if (problem := not_regular(source, "the model's Triton configuration (text protobuf)")) is not None:
        raise problem
    try:
        with open_regular(source) as handle:  # a FIFO put there since the check is refused, never waited on
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except (OSError, DataError) as exc:
        raise RepositoryError(f"{shown(source)}: cannot be read: {exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise RepositoryError(f"{shown(source)}: is larger than {MAX_CONFIG_BYTES:,} bytes; expected a Triton model "
                              "configuration (text protobuf, a few kilobytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RepositoryError(f"{shown(source)}: is not UTF-8 text (byte {exc.start:,} is not UTF-8); expected a "
                              "Triton model configuration (text protobuf)") from None
    config = parse_config(text, shown(source))
    if config.name and config.name != folder.name:
        raise RepositoryError(f"{shown(source)}: name {quoted(config.name)} differs from the folder name {quoted(folder.name)}; "
                              "Triton requires them to be equal")
    if not config.name:
        config = ModelConfig(**{**config.__dict__, "name": folder.name})
    return config


def read_model(folder: Path) -> ModelEntry:
    """The model in `folder`: its config and the version folders its version_policy serves."""
    config = read_config(folder)
    available = available_versions(folder, config.model_filename)
    if not available:
        raise RepositoryError(f"{shown(folder)}: no version folder holds {config.model_filename} "
                              f"(expected {shown(folder / '1' / config.model_filename)})")
    selected = config.version_policy.select(available)
    if not selected:
        raise RepositoryError(f"{shown(folder / 'config.pbtxt')}: version_policy {config.version_policy.describe()} "
                              f"selects none of the versions present {available}")
    return ModelEntry(name=folder.name, config=config, versions={v: folder / str(v) / config.model_filename
                                                                 for v in selected}, folder=folder)


def model_folders(repo: Path) -> list[Path]:
    """The model folders of a repository: its sub-folders not starting with `.`, by name."""
    return sorted(p for p in Path(repo).iterdir() if p.is_dir() and not p.name.startswith("."))


def check_repository(repo: Path) -> Path:
    repo = Path(repo)
    if not repo.is_dir():
        raise RepositoryError(f"{shown(repo)}: not a folder; expected a model repository REPO/<model>/config.pbtxt "
                              "(what `specgen export --triton` writes)")
    return repo


def read_repository(repo: Path) -> list[ModelEntry]:
    """Every model of the repository, by name; a RepositoryError lists every folder that cannot be served."""
    entries, problems = scan_repository(repo)
    if problems:
        raise RepositoryError("\n".join(problems))
    return entries


def scan_repository(repo: Path) -> tuple[list[ModelEntry], list[str]]:
    """The models whose folder reads, and a line for each folder that does not (so that a caller can go on to
    check the good ones' versions and list every problem at once); RepositoryError for no model folder at all."""
    repo = check_repository(repo)
    entries, problems = [], []
    for folder in model_folders(repo):
        try:
            entries.append(read_model(folder))
        except RepositoryError as exc:
            problems.append(str(exc))
    if not entries and not problems:
        raise RepositoryError(f"{shown(repo)}: no models; expected REPO/<model>/config.pbtxt and "
                              "REPO/<model>/<version>/model.onnx (what `specgen export --triton` writes)")
    return entries, problems


def file_stamp(path: Path) -> tuple[int, int, int, int] | None:
    """What says a file changed: (inode, size, mtime, ctime in ns), None when it is gone; see stamps.py (the
    ctime moves on every write, and no user tool can set it, unlike the mtime)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns
