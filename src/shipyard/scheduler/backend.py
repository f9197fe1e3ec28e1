"""What the service needs from a backend: launch a gang, tell if it runs, stop it, reap it."""

from typing import Protocol

from shipyard.scheduler.model import Running


class Backend(Protocol):
    def launch(self, run: Running, command: list[str]) -> dict[str, list[int]]:
        """Start the gang on its allocated nodes; returns node name → GPU ids (or slots)."""
        ...

    def running(self, job_id: str) -> bool: ...

    def stop(self, job_id: str, grace: float, now: float) -> None:
        """SIGTERM now; SIGKILL once `grace` seconds have passed (checked in `poll`)."""
        ...

    def poll(self, now: float) -> list[tuple[str, int]]:
        """Jobs that have ended since the last call, with their exit codes."""
        ...

    def shutdown(self) -> None: ...
