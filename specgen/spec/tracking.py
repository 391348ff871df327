"""`train.tracking`: where a run is logged besides TensorBoard (docs/tracking.md). One tracker so far: MLflow.

Only the form of the URI is checked here (validate and build import no MLflow): a scheme MLflow's client knows,
so that a typo is one positioned line before any training rather than a tracker that is "down" at run time.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import parse_qs, unquote

from pydantic import Field, StringConstraints, field_validator

from specgen.diagnostics import did_you_mean
from specgen.fields.base import SpecModel

# The tracking stores MLflow's client opens by URI scheme (a database scheme may name its driver: postgresql+psycopg).
SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "file", "databricks", "databricks-uc")
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
URI_FORMS = "http(s)://HOST:PORT (an `mlflow server`), sqlite:///PATH, postgresql://..., mysql://..., file:PATH or databricks"
# MLflow's own limit on experiment names; no control characters (they end up in the tracker's UI and in logs).
ExperimentName = Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=r"^[^\x00-\x1f\x7f]+$")]
Uri = Annotated[str, StringConstraints(min_length=1, max_length=2048, pattern=r"^[^\x00-\x20\x7f]+$")]


def uri_problem(uri: str) -> str | None:
    """Why `uri` is not a tracking URI MLflow's client opens (the scheme), or None."""
    if uri in ("databricks", "databricks-uc"):
        return None
    found = re.match(r"^([A-Za-z][A-Za-z0-9.-]*)(\+[A-Za-z0-9_]+)?:", uri)
    if found is None:
        return f"got {uri!r}, which has no scheme; expected {URI_FORMS}"
    scheme = found.group(1).lower()
    if scheme not in SCHEMES or (found.group(2) and scheme not in DATABASES):
        return f"unknown scheme {found.group(0)!r}{did_you_mean(scheme, SCHEMES)}; expected {URI_FORMS}"
    if scheme in ("http", "https") and not re.match(r"^https?://[^/]", uri, re.IGNORECASE):
        return f"got {uri!r}; expected {scheme}://HOST:PORT"
    if scheme == "sqlite":
        return _sqlite_problem(uri, found.end())
    return None


SQLITE_FORM = "sqlite:///PATH, three slashes then the database file's path (sqlite:///mlruns.db, sqlite:////abs/ml.db)"


def _sqlite_problem(uri: str, after_scheme: int) -> str | None:
    """SQLAlchemy reads `sqlite://` and `sqlite:///` (and `:memory:`, `file::memory:`, `mode=memory`) as an in-memory
    database: MLflow's client logs into it, and the run, its params and metrics are gone when specgen exits (its
    artifacts land beside an empty path, in the parent folder). `sqlite://NAME` (two slashes) reads NAME as a host,
    which SQLite has not."""
    rest = uri[after_scheme:]
    if not rest.startswith("//"):
        return f"got {uri!r}; expected {SQLITE_FORM}"
    host, _, path = rest[2:].partition("/")
    if host.split("?", 1)[0]:
        return f"got {uri!r}, which names a host (SQLite has none); expected {SQLITE_FORM}"
    database, _, query = path.partition("?")
    database = unquote(database)  # SQLAlchemy decodes it: sqlite:///%3Amemory%3A is :memory:
    if database in ("", ":memory:") or database.startswith("file::memory:") or \
            parse_qs(query).get("mode") == ["memory"]:  # the forms sweep/storage.py in_memory reads with SQLAlchemy
        return (f"got {uri!r}, an in-memory database, which is lost when specgen exits (the run and its metrics "
                f"with it); expected {SQLITE_FORM}")
    return None


class Mlflow(SpecModel):
    uri: Uri = Field(description="The tracking URI: http(s)://HOST:PORT of an `mlflow server`, sqlite:///PATH, a "
                     "database URL or databricks; `specgen train --track mlflow:URI` replaces it.")
    experiment: ExperimentName | None = Field(None, description="The MLflow experiment; the spec's name by default.")

    @field_validator("uri")
    @classmethod
    def _scheme(cls, uri: str) -> str:
        problem = uri_problem(uri)
        if problem is not None:
            raise ValueError(problem)
        return uri


class Tracking(SpecModel):
    mlflow: Mlflow | None = Field(None, description="Log params, metrics and exports to MLflow (the tracking extra).")
