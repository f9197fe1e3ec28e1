"""Signing keys, artifact signatures, the trust policy and the access audit.

Above the store, catalog and database, below distribution, checkpoints, serving and the CLI:
`gate.admit` is the one call a reader of an artifact makes (verify, then audit).
"""
