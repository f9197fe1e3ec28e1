"""Builds the loader's C copy loop (needs a C compiler); the rest is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "shipyard.loader._gather",
            ["src/shipyard/loader/_gather.c"],
            extra_compile_args=["-O3"],
        )
    ]
)
