"""`python -m shipyard.evals.worker MODEL_ID`: one eval worker process (what `eval run
--workers N` starts N of). Prints one JSON line with its counts when the queue is empty."""

import argparse
import json
import os
import sys

from shipyard.errors import ShipyardError


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(prog="python -m shipyard.evals.worker")
    parser.add_argument("model_id")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lease", type=float, default=120.0)
    parser.add_argument("--max-items", type=int)
    args = parser.parse_args(argv)
    from shipyard.evals.runner import work
    from shipyard.queue import open_queue
    from shipyard.workspace import Workspace

    try:
        workspace, queue = Workspace.open(), open_queue()
        try:
            stats = work(queue, workspace, args.model_id, args.batch, args.lease, args.max_items)
        finally:
            queue.close()
            workspace.close()
    except ShipyardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps(stats.__dict__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
