"""A run's artifacts read straight from this machine's filesystem when its store keeps them there.

An SQLite store's runs keep their artifacts under ``<database folder>/artifacts/`` (artifact URI
``file:///...``). MLflow's ``MlflowClient.download_artifacts`` resolves such a file through the run
(one ``get_run``), looks for a logged model of the same name (a search of the experiment's models)
and copies the file to a temporary folder: about 0.05-0.25 s per table, and ``attnsim report`` of
two runs asks for about ten. A local artifact URI is read in place instead, as MLflow's own
``LocalArtifactRepository`` would read it (``file:`` URI to path, as ``mlflow.utils.file_utils.local_file_uri_to_path``
does); any other URI (``mlflow-artifacts:`` of a tracking server, ``s3://``, ``http(s)://``, ...) gives None,
and the reader downloads through MLflow as before.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Optional
from urllib.parse import urlparse
from urllib.request import url2pathname


def local_artifact_root(artifact_uri: Optional[str]) -> Optional[Path]:
    """The folder of a run's artifacts when ``artifact_uri`` is on this machine's filesystem, else None.

    Args:
        artifact_uri: a run's ``info.artifact_uri``, e.g. ``file:///data/mlruns/artifacts/csm/<run id>/artifacts``
            (percent-escapes decoded), a plain path, or a remote URI.

    Returns:
        The folder for a ``file:`` URI without a host (or with ``localhost``) and for a plain path (no scheme,
        or a one-letter Windows drive); None for any other URI, and for None or an empty string. The folder
        is not checked to exist.
    """
    if not artifact_uri:
        return None
    parsed = urlparse(artifact_uri)
    if parsed.scheme == "file":
        return Path(url2pathname(parsed.path)) if parsed.netloc in ("", "localhost") else None
    if parsed.scheme == "" or len(parsed.scheme) == 1:  # a plain path, or C:\... on Windows
        return Path(artifact_uri)
    return None


def local_artifact(artifact_uri: Optional[str], path: str) -> Optional[Path]:
    """Where artifact ``path`` of a run (e.g. ``tables/csm_heads.csv``) lies on this machine, None when the run's
    artifacts are not on its filesystem (:func:`local_artifact_root`).

    Args:
        artifact_uri: the run's ``info.artifact_uri``.
        path: the artifact's path relative to the run's artifact root, ``/``-separated.

    Returns:
        The file's path (which may not exist: the run did not log it), or None.

    Raises:
        ValueError: ``path`` is absolute or climbs out of the artifact root (``..``).
    """
    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or ".." in parts:
        raise ValueError(f"artifact path {path!r} must be relative to the run's artifact root, without '..'")
    root = local_artifact_root(artifact_uri)
    return root.joinpath(*parts) if root is not None else None
