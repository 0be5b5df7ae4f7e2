"""The on-disk format of a saved index: one ``.npz`` file (a zip archive; each member carries a CRC-32), written
atomically (a temporary file in the same folder, fsync, rename, fsync of the folder, so that the rename survives a
power loss).

Members: ``format.json`` (format name, version), ``<name>.json`` documents (UTF-8 JSON as uint8 arrays) and plain
numeric arrays. Reading checks the format name and version, reads every member (which verifies every CRC) and turns
any failure into a ``SnapshotError`` naming the file and what is wrong.
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "assomem-index"
VERSION = 1


class SnapshotError(ValueError):
    """A file that is not a readable index snapshot of this version."""


def write(path: str | Path, documents: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    members = {"format.json": _json({"format": FORMAT, "version": VERSION})}
    members.update({f"{k}.json": _json(v) for k, v in documents.items()})
    members.update({k: np.ascontiguousarray(v) for k, v in arrays.items()})
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **members)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    """fsync ``folder``, so that the renames and deletions in it so far survive a power loss (where the file system
    syncs folders: POSIX ones)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # a file system that does not sync folders (some FUSE and network ones): the rename stands
        pass
    finally:
        os.close(fd)


def read(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(documents, arrays) of a snapshot; ``SnapshotError`` if it is missing, truncated, corrupted or of another
    format or version."""
    path = Path(path)
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # a lone .npy array
            raise ValueError(f"a single {type(loaded).__name__}, not an archive")
        with loaded as npz:
            members = {name: npz[name] for name in npz.files}  # reads every member: CRCs are checked here
    except FileNotFoundError as exc:
        raise SnapshotError(f"{path}: no such file") from exc
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as exc:
        raise SnapshotError(f"{path}: not an index snapshot, or truncated or corrupted ({exc})") from exc
    try:
        head = _unjson(members.pop("format.json"))
    except (KeyError, ValueError) as exc:
        raise SnapshotError(f"{path}: not an index snapshot (no readable format header)") from exc
    if not isinstance(head, dict):
        raise SnapshotError(f"{path}: not an index snapshot (a format header of {type(head).__name__})")
    if head.get("format") != FORMAT:
        raise SnapshotError(f"{path}: not an index snapshot (format {head.get('format')!r})")
    if head.get("version") != VERSION:
        raise SnapshotError(f"{path}: snapshot format version {head.get('version')!r}; this assomem_gpu reads "
                            f"version {VERSION} (rebuild the index from its sessions)")
    try:
        documents = {k[: -len(".json")]: _unjson(v) for k, v in members.items() if k.endswith(".json")}
    except ValueError as exc:  # (json's and UTF-8's errors are ValueErrors)
        raise SnapshotError(f"{path}: a document of the snapshot is not readable JSON ({exc})") from exc
    arrays = {k: v for k, v in members.items() if not k.endswith(".json")}
    return documents, arrays


def _json(obj: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(obj, ensure_ascii=False, allow_nan=True).encode("utf-8"), dtype=np.uint8)


def _unjson(arr: np.ndarray) -> Any:
    return json.loads(arr.tobytes().decode("utf-8"))
