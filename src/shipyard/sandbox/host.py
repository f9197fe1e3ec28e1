"""This host's sandbox machinery: confinement, cgroups, images, records and cold starts.

One `Host` per process that starts sandboxes. It checks up front what confines them and refuses
to start sandboxes it cannot confine: without bubblewrap or user namespaces there is no sandbox;
without cgroups, memory, pids and CPU fall back to rlimits (said so, and refused outright under
`require_cgroups`).
"""

import contextlib
import hashlib
import os
import secrets
import select
import shutil
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from shipyard.errors import StorageError
from shipyard.sandbox import agent, bwrap, leaks
from shipyard.sandbox.box import Sandbox
from shipyard.sandbox.cgroups import Confinement, GroupPool, sweep
from shipyard.sandbox.image import HOST, Image, ImageCache
from shipyard.sandbox.leaks import Leaks
from shipyard.sandbox.limits import Limits
from shipyard.sandbox.state import StateDir, alive, start_time


class Host:
    def __init__(
        self,
        home: Path,
        *,
        tag: str = "",
        require_cgroups: bool = False,
        cgroup_root: Path | None = None,
    ) -> None:
        if shutil.which("bwrap") is None:
            raise StorageError(
                "bubblewrap (`bwrap`) is not installed: no sandbox can start "
                "(Debian: apt-get install bubblewrap)"
            )
        self.home = home
        digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:10]
        self.tag = f"shipyard-sandbox-{digest}{tag}"
        self.tag_suffix = tag
        self.confinement = Confinement.detect(self.tag, cgroup_root)
        lacking = [c for c in ("memory", "pids") if c in self.confinement.missing]
        if require_cgroups and lacking:
            raise StorageError(
                "refusing to start without cgroup caps: "
                + "; ".join(self.confinement.missing[c] for c in lacking)
            )
        self.groups = GroupPool(self.confinement)
        self.images = ImageCache(home)
        self.agent = agent.binary(self.images.root)
        self.state = StateDir(home / "sandbox" / f"state{tag}")
        # PR_SET_PDEATHSIG (--die-with-parent) fires when the *thread* that forked bubblewrap
        # ends, so every start happens on this one long-lived thread.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawn")
        self._lock = threading.Lock()
        self.live: dict[str, Sandbox] = {}
        self._starting: list[Sandbox] = []
        self._closed = False
        self._watching = threading.Condition(self._lock)
        threading.Thread(target=self._watch_starts, name="sandbox-starts", daemon=True).start()

    def reap_orphans(self) -> int:
        """Kill and clean every sandbox a previous run left behind; how many there were."""
        recorded = self.state.reap()
        for sibling in self.state.path.parent.glob(f"{self.state.path.name}-p*"):
            if not self.tag_suffix and not alive(sibling.name.rpartition("-p")[2]):
                recorded += StateDir(sibling).reap()  # a dead in-process host's records
                with contextlib.suppress(OSError):
                    sibling.rmdir()
        self.groups.drain()
        swept = sweep(self.confinement, dead_siblings=not self.tag_suffix)
        return max(len(recorded), swept)

    def leaks(self) -> Leaks:
        """What sandboxes of this home left on the host (processes, mounts, groups, records)."""
        return leaks.count(self.tag, self.confinement, self.state.path, self.images.root)

    def check(self) -> None:
        """Start one sandbox and run `true` in it; a host that cannot gets the reason."""
        box = self.start(self.images.resolve(HOST), Limits())
        try:
            box.wait_ready()
            result = box.exec(["true"], timeout=30)
            if not result.ok:
                raise StorageError(f"sandbox self-check: `true` ended {result.outcome.value}")
        except StorageError as exc:
            hint = ""
            if "namespace" in str(exc).lower() or "permission" in str(exc).lower():
                hint = (
                    " (user namespaces may be disabled: see sysctl user.max_user_namespaces and "
                    "kernel.unprivileged_userns_clone)"
                )
            raise StorageError(f"{exc}{hint}") from None
        finally:
            self.finish(box, "self-check done")

    def start(self, image: Image, limits: Limits) -> Sandbox:
        """Start a sandbox; it is ready once `wait_ready()` returns."""
        sandbox_id = secrets.token_hex(8)
        groups = self.groups.acquire(limits)
        record = {"id": sandbox_id, "groups": [str(g.path) for g in groups]}
        self.state.write(sandbox_id, record)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        errors_r, errors_w = os.pipe()
        try:
            process = self._spawner.submit(
                bwrap.start,
                image,
                limits,
                groups,
                self.agent,
                theirs.fileno(),
                errors_w,
                self.tag,
            ).result()
        except OSError as exc:
            ours.close()
            os.close(errors_r)
            self.groups.release(groups)
            self.state.forget(sandbox_id)
            raise StorageError(f"cannot start bubblewrap: {exc}") from None
        finally:
            theirs.close()
            os.close(errors_w)
        self.state.write(
            sandbox_id, {**record, "pid": process.pid, "start_time": start_time(process.pid)}
        )
        box = Sandbox(
            sandbox_id, image.id, limits, self.confinement, groups, process, ours, errors_r
        )
        box.closer = lambda done: self.finish(done, "closed by its driver")
        box.busy, box.starting = self.groups.busy, True
        self.groups.busy(+1)
        with self._lock:
            self.live[sandbox_id] = box
            self._starting.append(box)
            self._watching.notify()
        return box

    def _watch_starts(self) -> None:
        """Count a start out of the CPU weight as soon as its agent is up, even if nobody has
        taken the sandbox yet (a pooled one): select, never read, so its taker still reads the
        ready message."""
        while True:
            with self._lock:
                self._starting = [b for b in self._starting if b.starting and not b.dead]
                while not self._starting and not self._closed:
                    self._watching.wait()
                if self._closed:
                    return
                boxes = list(self._starting)
            try:
                readable, _, _ = select.select([b.sock for b in boxes], [], [], 0.05)
            except (OSError, ValueError):  # a socket closed meanwhile: filter and retry
                continue
            for box in boxes:
                if box.sock in readable:
                    box.started_up()

    def finish(self, box: Sandbox, reason: str) -> None:
        """Destroy `box` and release everything it held (idempotent)."""
        box.destroy(reason)
        with self._lock:
            if self.live.pop(box.id, None) is None:
                return
        box.release()
        self.groups.release(box.groups)
        self.state.forget(box.id)

    def close(self) -> None:
        with self._lock:
            boxes = list(self.live.values())
            self._closed = True
            self._watching.notify()
        for box in boxes:
            self.finish(box, "the host closed")
        self._spawner.shutdown()
        with contextlib.suppress(OSError):
            self.groups.drain()
        for hierarchy in self.confinement.hierarchies.values():
            with contextlib.suppress(OSError):  # still in use by a sibling: leave it
                hierarchy.parent.rmdir()
