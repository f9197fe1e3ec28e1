"""The content-addressed piece store: backends, manifests, put, get, verify and gc."""

from shipyard.store.backend import Backend, ObjectInfo
from shipyard.store.gc import GcReport, collect_garbage
from shipyard.store.get import Problem, materialize, verify
from shipyard.store.local import LocalBackend
from shipyard.store.manifest import FileEntry, Manifest, PieceRef
from shipyard.store.pieces import PieceStore
from shipyard.store.put import DEFAULT_PIECE_SIZE, put_tree
from shipyard.store.s3 import S3Backend
from shipyard.store.uri import open_backend

__all__ = [
    "DEFAULT_PIECE_SIZE",
    "Backend",
    "FileEntry",
    "GcReport",
    "LocalBackend",
    "Manifest",
    "ObjectInfo",
    "PieceRef",
    "PieceStore",
    "Problem",
    "S3Backend",
    "collect_garbage",
    "materialize",
    "open_backend",
    "put_tree",
    "verify",
]
