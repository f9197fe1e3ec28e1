"""One rank of a training attempt: DDP over the loader, checkpoints, heartbeats, faults.

Started by the controller (fresh, or as a warm spare that already imported torch) with an
`Assignment`. Rank 0 hosts this attempt's own rendezvous store on a port the controller picked, so
no attempt ever reads another's leftovers. On start the rank restores the latest committed
checkpoint, from its peers' memory when the previous attempt's ranks still hold it, else from
storage: the newest committed checkpoint whose bytes verify (a corrupt one is marked, and the one
before it tried), and every rank must have restored the same step. Exit codes: 0 done,
`EXIT_ANOMALY` after a NaN or loss spike (the step is not applied). What the model is (Shipyard's
GPT, or a Hugging Face model fine-tuned whole or with LoRA) is its `family`'s business.
"""

import gc
import json
import math
import os
import statistics
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import GradBucket
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from shipyard.checkpoint import (
    CheckpointManager,
    CorruptCheckpoint,
    Loaded,
    Retention,
    latest_committed,
)
from shipyard.errors import IntegrityError, NotFound
from shipyard.loader import LoaderSpec, Sampler, Source
from shipyard.train.config import ModelConfig, TrainConfig
from shipyard.train.family import build_family
from shipyard.train.faults import FaultState
from shipyard.train.heartbeat import Sender
from shipyard.train.model import GPT, next_token_loss

EXIT_ANOMALY = 75
LINGER_S = 120.0
ANOMALY_SAVE_GRACE_S = 30.0  # how long a rank leaving after an anomaly lets a save finish
AUTO_FIRST_INTERVAL = 10  # steps before the first checkpoint when the interval is automatic


@dataclass(frozen=True)
class Assignment:
    run_dir: str
    config: dict[str, Any]
    data_path: str
    rank: int
    world_size: int
    attempt: int
    store_port: int
    heartbeat_port: int
    peers: list[str] = field(default_factory=list)  # the previous attempt's peer memories
    skips: list[list[int]] = field(default_factory=list)
    lr_scale: float = 1.0
    mtbf_s: float = 3600.0
    host: str = "127.0.0.1"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Assignment":
        return cls(**json.loads(text))


def checkpoint_root(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def loader_spec(cfg: TrainConfig, data_path: str, skips: list[list[int]]) -> LoaderSpec:
    return LoaderSpec(
        sources=(Source("train", data_path),),
        seq_len=cfg.model.seq_len + 1,
        global_batch=cfg.data.global_batch,
        seed=cfg.data.seed,
        skip=tuple((a, b) for a, b in skips),
    )


class Rank:
    def __init__(self, job: Assignment) -> None:
        self.job = job
        self.cfg = TrainConfig.from_dict(job.config)
        run_dir = Path(job.run_dir)
        stacks = run_dir / "stacks" / f"attempt-{job.attempt}-rank-{job.rank}.txt"
        self.faults = FaultState(
            job.rank,
            job.attempt,
            self.cfg.chaos.faults,
            stacks,
            checkpoint_root(job.run_dir),
            settle=lambda: self.manager.wait(),
        )
        self.beats = Sender(
            (job.host, job.heartbeat_port),
            job.rank,
            job.attempt,
            os.getpid(),
            self.cfg.controller.heartbeat_s,
        )
        self.phases: dict[str, float] = {}
        self._phase_start = time.perf_counter()
        self.step = 0
        self.collective = (-1, -1)
        self.stalls: deque[float] = deque(maxlen=8)
        self.losses: deque[float] = deque(maxlen=32)
        self._work_start = 0.0
        self._slept = 0.0
        # The forward pass's CPU time: local compute, no communication in it, and blind to
        # co-tenants' scheduling (on a shared CPU host, wall time measures the neighbours).
        self.work_time = 0.0
        self.compute_time = 0.0  # the same, less any injected slowdown

    def enter(self, index: int) -> None:
        """Called as this rank enters a collective: the controller learns who is waiting where."""
        self.collective = (self.step, index)
        self.beats.send("enter", collective=self.collective)

    def setup(self) -> None:
        job, cfg = self.job, self.cfg
        torch.manual_seed(cfg.train.seed)
        torch.set_num_threads(1)
        store = dist.TCPStore(  # type: ignore[attr-defined]
            job.host,
            job.store_port,
            job.world_size,
            is_master=job.rank == 0,
            timeout=timedelta(seconds=cfg.controller.startup_timeout_s),
            wait_for_workers=False,
        )
        dist.init_process_group("gloo", store=store, rank=job.rank, world_size=job.world_size)
        self.phase("process_group")
        self.family = build_family(cfg, Path(job.run_dir))
        self.model = self.family.model
        self.ddp = DistributedDataParallel(self.model)

        def hook(state: Any, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
            if self.collective != (self.step, 0):
                self.enter(0)
            return allreduce_hook(None, bucket)  # type: ignore[arg-type]

        self.ddp.register_comm_hook(None, hook)
        self.params = [p for p in self.model.parameters() if p.requires_grad]  # LoRA: adapters
        self.optim = torch.optim.AdamW(
            self.params, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay
        )
        self.phase("model_ddp")
        self.manager = CheckpointManager(
            checkpoint_root(job.run_dir),
            retention=Retention(keep_last=cfg.train.keep_checkpoints),
            config=cfg.to_dict(),
        )
        self.phase("checkpoint_manager")
        self.sampler = Sampler(loader_spec(cfg, job.data_path, job.skips))
        self.phase("sampler")
        loaded = self.restore()
        self.agree(loaded.step if loaded else 0)
        if loaded is not None:
            self.family.load(loaded.state)
            self.optim.load_state_dict(loaded.state["optim"])
            loaded.restore_rng(job.rank)
            self.step = loaded.step
        for group in self.optim.param_groups:
            group["lr"] = cfg.optim.lr * job.lr_scale
        if cfg.train.gc_every:
            # Collected below on every rank at the same step, never mid-collective; what exists
            # now (torch, the model) is frozen out of those collections, which stay short.
            gc.disable()
            gc.freeze()
        self.phase("restore")
        ready = {"restored_from": self.restored_from, "setup_s": self.phases}
        self.beats.send("ready", step=self.step, fields=ready)

    def phase(self, name: str) -> None:
        """Note how long set-up phase `name` took (reported in the ready beat)."""
        now = time.perf_counter()
        self.phases[name] = round(now - self._phase_start, 4)
        self._phase_start = now

    def restore(self) -> Loaded | None:
        """The newest committed state that verifies: from the peers' memory when they hold it
        (checked against the stored manifest's hashes), else from storage, falling back past
        corrupt checkpoints (each marked, for the controller to report)."""
        self.restored_from = "none"
        stored = latest_committed(checkpoint_root(self.job.run_dir), verify=False)
        if stored is None:
            return None
        if self.job.peers:
            try:
                loaded = self.manager.restore_from_peers(
                    manifest=stored.manifest, addresses=self.job.peers
                )
                self.restored_from = "peers"
                return loaded
            except Exception as exc:  # any peer trouble: storage has the same bits
                print(f"peer restore failed, loading from storage: {exc!r}", file=sys.stderr)
        self.restored_from = "storage"

        def corrupt(exc: CorruptCheckpoint) -> None:
            print(f"passing over a corrupt checkpoint: {exc}", file=sys.stderr)

        try:
            return self.manager.load(on_corrupt=corrupt)
        except NotFound:  # every committed checkpoint failed: start from scratch, loudly
            self.restored_from = "none (every checkpoint corrupt)"
            return None

    def agree(self, step: int) -> None:
        """Every rank must resume from the same step (a shard readable by one rank but not by
        another would split them): else this attempt fails, and the next one re-reads."""
        steps = torch.tensor([step, -step], dtype=torch.int64)
        dist.all_reduce(steps, op=dist.ReduceOp.MAX)
        if int(steps[0]) != -int(steps[1]):
            raise IntegrityError(
                f"ranks restored different steps ({-int(steps[1])}..{int(steps[0])})"
            )

    def interval(self, step_time: float, stall: float) -> int:
        every = self.cfg.train.checkpoint_every
        if every:
            return every
        if stall <= 0 or step_time <= 0:
            return AUTO_FIRST_INTERVAL
        tau = math.sqrt(2 * stall * self.job.mtbf_s)
        return max(1, min(self.cfg.train.steps, round(tau / step_time)))

    def train(self) -> int:
        cfg, job = self.cfg, self.job
        next_save = self.step + self.interval(0, 0)
        shared = torch.zeros(3, dtype=torch.float64)  # mean of (loss, stall, step time)
        last_step_time = last_stall = 0.0
        ended = time.perf_counter()
        while self.step < cfg.train.steps:
            started = time.perf_counter()
            data_step = self.sampler.spec.data_step(self.step)
            self.faults.before_step(self.step, data_step)
            batch = self.sampler.batch(self.step, job.rank, job.world_size)
            tokens = torch.from_numpy(batch.tokens)
            mask = None if batch.loss_mask is None else torch.from_numpy(batch.loss_mask)
            data_wait = time.perf_counter() - started
            self._work_start = time.thread_time()
            self._slept = self.faults.slow_down(self.compute_time)
            loss = self.family.loss(self.ddp, tokens, mask)
            self.work_time = time.thread_time() - self._work_start
            self.compute_time = self.work_time - self._slept
            if self.faults.take_poison():
                loss = loss * float("nan")
            loss.backward()  # type: ignore[no-untyped-call]
            norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.optim.grad_clip)
            grad_norm = float(norm)
            shared = torch.tensor([float(loss), last_stall, last_step_time], dtype=torch.float64)
            self.enter(1)
            dist.all_reduce(shared)
            shared /= job.world_size
            global_loss = float(shared[0])
            if self.anomalous(global_loss):
                self.report_anomaly(global_loss, data_step)
                return EXIT_ANOMALY
            self.optim.step()
            self.optim.zero_grad(set_to_none=True)
            self.losses.append(global_loss)
            self.step += 1
            stall = 0.0
            if self.step == next_save or self.step == cfg.train.steps:
                saving = time.perf_counter()
                self.manager.save(
                    self.step,
                    {**self.family.state(), "optim": self.optim.state_dict()},
                    loader=self.sampler.position(self.step),
                )
                stall = time.perf_counter() - saving
                next_save = self.step + self.interval(float(shared[2]), float(shared[1]))
            if cfg.train.gc_every and self.step % cfg.train.gc_every == 0:
                gc.collect()
            # From the previous step's end, so that step times tile the attempt's wall time.
            step_time = time.perf_counter() - ended
            ended = time.perf_counter()
            last_step_time, last_stall = step_time, stall or last_stall
            self.beats.send(
                "step",
                step=self.step,
                fields={
                    "step_time": step_time,
                    "work_time": self.work_time,
                    "data_wait": data_wait,
                    "stall": stall,
                    "loss": global_loss.hex(),
                    "grad_norm": grad_norm,
                    "data_step": data_step,
                    "committed": self.committed_step(),
                    "peer": self.manager.peer_addresses[job.rank] if self.manager.peer else "",
                },
            )
        self.finish()
        return 0

    def anomalous(self, loss: float) -> bool:
        if not math.isfinite(loss):
            return True
        factor = self.cfg.controller.spike_factor
        if factor and len(self.losses) >= 8:
            return loss > factor * statistics.median(self.losses)
        return False

    def report_anomaly(self, loss: float, data_step: int) -> None:
        anomaly = {"loss": repr(loss), "data_step": data_step, "at_step": self.step}
        self.beats.send("anomaly", fields=anomaly)
        if self.job.rank == 0:  # beats may be lost; the controller reads this file too
            path = Path(self.job.run_dir) / f"anomaly-attempt-{self.job.attempt}.json"
            path.write_text(json.dumps(anomaly))

    def committed_step(self) -> int:
        found = self.manager.latest_committed(verify=False)  # every step: no re-reading
        return found.manifest.step if found else 0

    def finish(self) -> None:
        self.manager.wait()
        if self.job.rank == 0:
            out = Path(self.job.run_dir) / "model"
            out.mkdir(parents=True, exist_ok=True)
            self.family.export(out)
        dist.barrier()
        self.beats.send("done", step=self.step, fields={"committed": self.committed_step()})

    def close(self) -> None:
        self.manager.close()
        dist.destroy_process_group()
        self.beats.close()


def run(job: Assignment) -> int:
    rank = Rank(job)
    rank.setup()
    try:
        code = rank.train()
    except RuntimeError as exc:  # a peer died under a collective (gloo raises DistBackendError)
        rank.beats.send("lost", fields={"error": repr(exc)[:500]})
        time.sleep(LINGER_S)  # keep serving our peer memory to the next attempt until killed
        return 1
    if code == EXIT_ANOMALY:
        # The state saved before the anomaly is sound: let a save in flight commit (every rank
        # saw the same all-reduced loss, so all are here to finish its collectives), within a
        # bound. Then leave at once: the peers are leaving too, so a collective shutdown could
        # wait forever.
        rank.manager.settle(ANOMALY_SAVE_GRACE_S)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    rank.close()
    return code


def warm_up() -> None:
    """Pay, before any assignment, what a rank's first seconds would: DDP imports dynamo
    lazily (over a second), and the first forward and backward initialize autograd and kernels."""
    import torch._dynamo

    torch.set_num_threads(1)
    model = GPT(ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, seq_len=16))
    next_token_loss(model, torch.randint(0, 64, (2, 17))).backward()  # type: ignore[no-untyped-call]


def warm_up_hf() -> None:
    """Import what loading a Hugging Face model with LoRA imports (seconds of CPU)."""
    import peft  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401


def main() -> None:
    """`python -m shipyard.train.worker`: the assignment comes as JSON on the first stdin line."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    warm_up()
    if os.environ.get("SHIPYARD_TRAIN_WARM_DIR"):  # tell the pool this spare is ready
        Path(os.environ["SHIPYARD_TRAIN_WARM_DIR"], f"warm-{os.getpid()}").touch()
    line = sys.stdin.readline()  # a warm spare waits here, torch already imported and warm
    if not line:
        sys.exit(0)  # the controller went away before using this spare
    sys.exit(run(Assignment.from_json(line)))


if __name__ == "__main__":
    main()
