"""Small builders shared by the scheduler tests."""

from shipyard.scheduler import ClusterState, Job, Node, TeamQuota


def nodes(count: int, gpus: int = 8, per_leaf: int = 2, pool: str = "default") -> list[Node]:
    return [
        Node(
            f"n{i}",
            gpus,
            leaf=f"leaf{i // per_leaf}",
            block=f"block{i // (2 * per_leaf)}",
            pool=pool,
        )
        for i in range(count)
    ]


def job(job_id: str, team: str = "a", gpus: int = 1, limit: float = 100.0, **kw: object) -> Job:
    return Job(job_id, team, gpus, limit, **kw)  # type: ignore[arg-type]


def single_team(count: int, gpus: int = 8) -> ClusterState:
    return ClusterState(nodes(count, gpus), [TeamQuota("a", {"gpu": count * gpus})])
