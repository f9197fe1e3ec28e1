"""Shipyard: the machinery behind machine-learning models."""


def __getattr__(name: str) -> str:
    """`shipyard.__version__`, read from the installed package's metadata (pyproject.toml is its
    one source) on first use: importing `importlib.metadata` costs every command tens of ms."""
    if name != "__version__":
        raise AttributeError(f"module 'shipyard' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shipyard")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"
