"""The policy's view of the cluster: nodes, free GPUs, node health, running jobs and quota usage."""

from collections.abc import Iterable, Sequence

from shipyard.errors import InvalidInput, NotFound
from shipyard.scheduler.model import NODE_STATES, Allocation, Job, Node, Running
from shipyard.scheduler.placement import place
from shipyard.scheduler.quota import QuotaBook, TeamQuota


class ClusterState:
    def __init__(
        self,
        nodes: Sequence[Node],
        teams: Iterable[TeamQuota],
        large_pool: str = "large",
        large_job_min_gpus: int = 8,
    ) -> None:
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise InvalidInput("cluster: node names must be unique")
        self.nodes = list(nodes)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.free = [n.gpus for n in self.nodes]
        self.node_state = ["up"] * len(self.nodes)
        self.running: dict[str, Running] = {}
        self.quota = QuotaBook(teams)
        self.large_pool = large_pool
        self.large_job_min_gpus = large_job_min_gpus
        self.groups: dict[str, dict[str, list[int]]] = {"leaf": {}, "block": {}}
        for i, node in enumerate(self.nodes):
            self.groups["leaf"].setdefault(node.leaf, []).append(i)
            self.groups["block"].setdefault(node.block, []).append(i)
        self._cand_cache: dict[tuple[str, bool], list[int]] = {}
        self._group_cache: dict[tuple[str, bool, str], list[list[int]]] = {}
        self._possible: dict[tuple[object, ...], bool] = {}  # shape → fits the idle cluster
        self._capacity: dict[str, int] = {}
        for node in self.nodes:
            self._capacity[node.gpu_type] = max(self._capacity.get(node.gpu_type, 0), node.gpus)
        self.gpu_types = sorted({n.gpu_type for n in self.nodes})

    def set_node_state(self, name: str, state: str) -> None:
        """Drain or quarantine a node: running jobs stay, nothing new is placed there."""
        if state not in NODE_STATES:
            raise InvalidInput(f"node state {state!r} unknown (allowed: {', '.join(NODE_STATES)})")
        if name not in self.index:
            raise NotFound(f"node {name!r} is not in the cluster")
        self.node_state[self.index[name]] = state
        self._cand_cache.clear()
        self._group_cache.clear()
        self._possible.clear()

    def candidates(self, job: Job) -> list[int]:
        """Healthy nodes of the job's GPU type; small jobs stay out of the large-job pool."""
        small = job.gpus < self.large_job_min_gpus
        key = (job.gpu_type, small)
        cand = self._cand_cache.get(key)
        if cand is None:
            cand = [
                i
                for i, n in enumerate(self.nodes)
                if self.node_state[i] == "up"
                and n.gpu_type == job.gpu_type
                and not (small and n.pool == self.large_pool)
            ]
            self._cand_cache[key] = cand
        return cand

    def place(
        self, job: Job, free: Sequence[int] | None = None, exclude: set[int] | None = None
    ) -> Allocation | None:
        cand = self.candidates(job)
        groups: list[list[int]] = []
        if job.topology != "any":
            level = job.topology.split("-")[1]
            groups = self._grouped(job, level)
        if exclude:
            cand = [i for i in cand if i not in exclude]
            groups = [[i for i in g if i not in exclude] for g in groups]
        capacity = self._capacity.get(job.gpu_type, 0)
        return place(job, self.nodes, self.free if free is None else free, cand, groups, capacity)

    def fits_idle(self, job: Job) -> bool:
        """Whether the healthy nodes could hold `job` if nothing else ran (cached per shape)."""
        shape = (job.gpus, job.gpus_per_node, job.gpu_type, job.topology)
        known = self._possible.get(shape)
        if known is None:
            known = self.place(job, free=[n.gpus for n in self.nodes]) is not None
            self._possible[shape] = known
        return known

    def largest_gang(self, per_node: int, gpu_type: str) -> int:
        """The most GPUs a gang with `per_node` GPUs on every node could be placed on now.

        Asked of the placement code itself, largest first: a small gang may be kept off nodes
        a larger one may use (the large-job pool), so feasibility is not monotone in size.
        """
        nodes = sum(
            1
            for i, n in enumerate(self.nodes)
            if self.node_state[i] == "up" and n.gpu_type == gpu_type and self.free[i] >= per_node
        )
        for count in range(nodes, 0, -1):
            gpus = count * per_node
            probe = Job("probe", "", gpus, 1.0, gpus_per_node=per_node, gpu_type=gpu_type)
            if self.place(probe) is not None:
                return gpus
        return 0

    def _grouped(self, job: Job, level: str) -> list[list[int]]:
        key = (job.gpu_type, job.gpus < self.large_job_min_gpus, level)
        found = self._group_cache.get(key)
        if found is None:
            allowed = set(self.candidates(job))
            found = [
                [i for i in members if i in allowed] for members in self.groups[level].values()
            ]
            found = [g for g in found if g]
            self._group_cache[key] = found
        return found

    def capacity(self, gpu_type: str) -> int:
        return sum(n.gpus for n in self.nodes if n.gpu_type == gpu_type)

    def free_gpus(self, gpu_type: str) -> int:
        return sum(f for f, n in zip(self.free, self.nodes, strict=True) if n.gpu_type == gpu_type)

    def admit(self, run: Running) -> None:
        for i, gpus in run.alloc.items():
            if self.free[i] < gpus:
                raise InvalidInput(f"node {self.nodes[i].name}: {gpus} GPUs asked, fewer free")
        for i, gpus in run.alloc.items():
            self.free[i] -= gpus
        self.quota.add(run.job.team, run.job.gpu_type, run.job.gpus)
        self.running[run.job.id] = run

    def release(self, job_id: str) -> Running:
        run = self.running.pop(job_id)
        for i, gpus in run.alloc.items():
            self.free[i] += gpus
        self.quota.remove(run.job.team, run.job.gpu_type, run.job.gpus)
        return run
