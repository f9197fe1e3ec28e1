"""Serving: model artifacts, the engine and its replica process, the router, deployments.

Import submodules directly (`shipyard.serve.engine`, `shipyard.serve.router.ring`, ...): each
pulls in torch or an HTTP stack only when used.
"""
