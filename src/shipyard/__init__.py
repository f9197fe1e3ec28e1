"""Shipyard: the machinery behind machine-learning models."""

__version__ = "0.1.0"
