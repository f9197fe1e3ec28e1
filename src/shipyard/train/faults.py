"""Faults a rank can suffer, from a signal sent by the controller's chaos or from the config.

Signals: SIGUSR1 dumps every thread's Python stack (faulthandler, which works even while the main
thread is blocked inside a collective), SIGUSR2 makes the rank stop progressing (a hang),
SIGRTMIN+1 slows it 1.5× (a straggler), SIGRTMIN+2 poisons its next loss with NaN. Kills need no
help from the rank: the controller sends SIGKILL. A scripted `corrupt` fault flips one bit in the
middle of this rank's shard of the newest committed checkpoint (bit rot, for verified recovery);
`corrupt-manifest` flips the lowest bit of its manifest's step (20 reads 21: a manifest that lies).
"""

import faulthandler
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import IO

from shipyard.train.config import Fault

STACK_SIGNAL = signal.SIGUSR1
HANG_SIGNAL = signal.SIGUSR2
SLOW_SIGNAL = signal.SIGRTMIN + 1
NAN_SIGNAL = signal.SIGRTMIN + 2
SIGNALS = {"hang": HANG_SIGNAL, "straggler": SLOW_SIGNAL, "nan": NAN_SIGNAL}
SLOWDOWN = 1.5


class FaultState:
    """What has been done to this rank; the training loop consults it every step."""

    def __init__(
        self,
        rank: int,
        attempt: int,
        faults: tuple[Fault, ...],
        stack_file: Path,
        checkpoints: Path,
        settle: Callable[[], object],
    ) -> None:
        self.rank = rank
        self.attempt = attempt
        self.checkpoints = checkpoints
        self.settle = settle  # waits for the save in flight, so "newest" means committed
        self.faults = [f for f in faults if f.rank == rank]
        self.hung = False
        self.slow = False
        self.poison = False
        stack_file.parent.mkdir(parents=True, exist_ok=True)
        self._stacks: IO[str] = open(stack_file, "w")  # noqa: SIM115 - lives as long as the rank
        faulthandler.register(STACK_SIGNAL, file=self._stacks, all_threads=True)
        for kind, sig in SIGNALS.items():
            signal.signal(sig, self._handler(kind))

    def _handler(self, kind: str) -> "signal._HANDLER":
        def handle(signum: int, frame: FrameType | None) -> None:
            self.trigger(kind)

        return handle

    def trigger(self, kind: str) -> None:
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "hang":
            self.hung = True
        elif kind == "straggler":
            self.slow = True
        elif kind == "nan":
            self.poison = True
        elif kind == "corrupt":
            self.settle()
            flip_a_bit(self.checkpoints, self.rank)
        elif kind == "corrupt-manifest":
            self.settle()
            flip_the_step(self.checkpoints)

    def before_step(self, step: int, data_step: int) -> None:
        """Fire the scripted faults due at this step, then stall here if hung."""
        for fault in self.faults:
            if fault.kind == "nan" and fault.data_step >= 0:
                if fault.data_step == data_step:
                    self.poison = True
            elif fault.step == step and fault.attempt == self.attempt:
                self.trigger(fault.kind)
        if self.hung:
            stop_progressing()

    def slow_down(self, work_seconds: float) -> float:
        """A straggler does SLOWDOWN × its peers' work (CPU seconds); returns the extra."""
        if not self.slow:
            return 0.0
        pause = (SLOWDOWN - 1.0) * work_seconds
        end = time.thread_time() + pause
        while time.thread_time() < end:  # busy: a slower device computes longer, it does not nap
            pass
        return pause

    def take_poison(self) -> bool:
        poisoned, self.poison = self.poison, False
        return poisoned


def stop_progressing() -> None:
    """A hung rank: alive, beating, but never reaching the next collective."""
    while True:
        time.sleep(3600)


def flip_a_bit(checkpoints: Path, rank: int) -> None:
    """Flip one bit in the middle of `rank`'s shard of the newest committed checkpoint."""
    from shipyard.checkpoint import latest_committed  # torch: only for a rank that needs it

    found = latest_committed(checkpoints, verify=False)
    if found is None:
        return
    shard = next(s for s in found.manifest.shards if s.rank == rank)
    with open(found.path / shard.file, "r+b") as file:
        file.seek(shard.digest.size // 2)
        byte = file.read(1)[0]
        file.seek(shard.digest.size // 2)
        file.write(bytes([byte ^ 0x04]))


def flip_the_step(checkpoints: Path) -> None:
    """Flip the lowest bit of the last digit of the newest committed manifest's top-level step
    (canonical JSON sorts it last but `tensors` and `world_size`, which hold no `"step":`)."""
    from shipyard.checkpoint import latest_committed  # torch: only for a rank that needs it
    from shipyard.checkpoint.manifest import MANIFEST

    found = latest_committed(checkpoints, verify=False)
    if found is None:
        return
    path = found.path / MANIFEST
    raw = bytearray(path.read_bytes())
    at = raw.rindex(b'"step":') + len(b'"step":') + len(str(found.step)) - 1
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))
