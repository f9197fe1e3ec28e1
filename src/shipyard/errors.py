"""Errors shared by every subsystem, each with the CLI exit code it maps to.

A caller that catches `ShipyardError` gets a message that names what was wrong and where; the CLI
prints it and exits with `exit_code`, so scripts can tell a conflict from a corruption.
"""


class ShipyardError(Exception):
    """Base class: a failure Shipyard explains in its message."""

    exit_code = 1


class InvalidInput(ShipyardError):
    """Input that Shipyard refuses: a bad path, config value, manifest or argument."""

    exit_code = 2


class Conflict(ShipyardError):
    """A compare-and-swap lost to a concurrent writer."""

    exit_code = 3


class NotFound(ShipyardError):
    """A reference, artifact, piece or alias that does not exist."""

    exit_code = 4


class IntegrityError(ShipyardError):
    """Stored bytes that do not match their hash, or a piece that a manifest needs but is gone."""

    exit_code = 5


class StorageError(ShipyardError):
    """The backend could not complete an operation (disk full, permission, network)."""

    exit_code = 6


class KeyUnavailable(ShipyardError):
    """A confidential artifact whose encryption key this process was not given."""

    exit_code = 7


class Untrusted(ShipyardError):
    """An artifact the trust policy refuses: unsigned where signatures are required, signed by a
    key not allowed to sign it, or with a signature that does not verify."""

    exit_code = 8
