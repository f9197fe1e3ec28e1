"""The web console and its JSON API over the catalog, runs, scheduler, queues, data and peers.

`create_app(console)` builds the FastAPI app; `serve_console(...)` runs it on uvicorn
(`shipyard ui`). Pages and /api are read-only without the console's token; changes pass
`shipyard.httpguard`'s rules (see `shipyard.httpguard.asgi`).
"""

from shipyard.web.app import create_app
from shipyard.web.context import Console
from shipyard.web.serve import serve_console

__all__ = ["Console", "create_app", "serve_console"]
