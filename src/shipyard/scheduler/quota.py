"""Team quotas with Kueue's semantics: nominal quota, cohorts, borrowing and lending limits.

Per GPU type, a team's nominal quota splits into a guaranteed part (`nominal - lending_limit`,
never lent) and a lendable part that joins its cohort's shared pool. A team may use its guaranteed
part freely; everything it uses beyond that is drawn from the pool, which holds the lendable parts
of every team in the cohort. A team never uses more than `nominal + borrowing_limit`
(`borrowing_limit=None`: the whole pool). A team without a cohort cannot borrow.
"""

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from shipyard.errors import InvalidInput


class Fit(enum.Enum):
    NOMINAL = "nominal"  # fits within the team's nominal quota
    RECLAIM = "reclaim"  # within nominal, but lent out: admissible only by reclaiming it
    BORROW = "borrow"  # fits only by borrowing from the cohort
    NONE = "none"  # does not fit now


@dataclass(frozen=True)
class TeamQuota:
    team: str
    nominal: dict[str, int]
    cohort: str | None = None
    borrowing_limit: dict[str, int] = field(default_factory=dict)
    lending_limit: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, table in (
            ("nominal", self.nominal),
            ("borrowing_limit", self.borrowing_limit),
            ("lending_limit", self.lending_limit),
        ):
            for gpu_type, value in table.items():
                if not isinstance(value, int) or value < 0:
                    raise InvalidInput(f"team {self.team!r}: {name}[{gpu_type}] must be an int ≥ 0")
        for gpu_type, value in self.lending_limit.items():
            if value > self.nominal.get(gpu_type, 0):
                raise InvalidInput(
                    f"team {self.team!r}: lending_limit[{gpu_type}] {value} exceeds nominal"
                )


class QuotaBook:
    """Usage per (team, GPU type) against the teams' quotas; O(1) checks and updates."""

    def __init__(self, teams: Iterable[TeamQuota]) -> None:
        self.teams = {t.team: t for t in teams}
        self.usage: dict[tuple[str, str], int] = {}
        self._pool: dict[tuple[str, str], int] = {}  # lendable capacity per (cohort, type)
        self._pool_used: dict[tuple[str, str], int] = {}
        for quota in self.teams.values():
            if quota.cohort is None:
                continue
            for gpu_type in quota.nominal:
                key = (quota.cohort, gpu_type)
                self._pool[key] = self._pool.get(key, 0) + self._lendable(quota, gpu_type)
                self._pool_used.setdefault(key, 0)

    def quota(self, team: str) -> TeamQuota:
        try:
            return self.teams[team]
        except KeyError:
            known = ", ".join(sorted(self.teams)) or "none"
            raise InvalidInput(f"team {team!r} has no quota (known teams: {known})") from None

    def nominal(self, team: str, gpu_type: str) -> int:
        return self.quota(team).nominal.get(gpu_type, 0)

    def used(self, team: str, gpu_type: str) -> int:
        return self.usage.get((team, gpu_type), 0)

    def check(self, team: str, gpu_type: str, gpus: int) -> Fit:
        quota = self.quota(team)
        after = self.used(team, gpu_type) + gpus
        nominal = quota.nominal.get(gpu_type, 0)
        if quota.cohort is None:
            return Fit.NOMINAL if after <= nominal else Fit.NONE
        limit = quota.borrowing_limit.get(gpu_type)
        if limit is not None and after > nominal + limit:
            return Fit.NONE
        key = (quota.cohort, gpu_type)
        guaranteed = nominal - self._lendable(quota, gpu_type)
        extra = max(0, after - guaranteed) - max(0, self.used(team, gpu_type) - guaranteed)
        if self._pool_used.get(key, 0) + extra > self._pool.get(key, 0):
            return Fit.RECLAIM if after <= nominal else Fit.NONE
        return Fit.NOMINAL if after <= nominal else Fit.BORROW

    def ceiling(self, team: str, gpu_type: str) -> int:
        """The most GPUs the team could ever hold at once (borrowing all the cohort lends)."""
        quota = self.quota(team)
        nominal = quota.nominal.get(gpu_type, 0)
        if quota.cohort is None:
            return nominal
        guaranteed = nominal - self._lendable(quota, gpu_type)
        most = guaranteed + self._pool.get((quota.cohort, gpu_type), 0)
        limit = quota.borrowing_limit.get(gpu_type)
        return most if limit is None else min(most, nominal + limit)

    def borrowing(self, team: str, gpu_type: str) -> int:
        """GPUs the team uses beyond its nominal quota (what reclaim may take back)."""
        return max(0, self.used(team, gpu_type) - self.nominal(team, gpu_type))

    def add(self, team: str, gpu_type: str, gpus: int) -> None:
        self._move(team, gpu_type, gpus)

    def remove(self, team: str, gpu_type: str, gpus: int) -> None:
        self._move(team, gpu_type, -gpus)

    def _move(self, team: str, gpu_type: str, delta: int) -> None:
        quota = self.quota(team)
        before = self.used(team, gpu_type)
        self.usage[(team, gpu_type)] = before + delta
        if quota.cohort is not None:
            guaranteed = quota.nominal.get(gpu_type, 0) - self._lendable(quota, gpu_type)
            key = (quota.cohort, gpu_type)
            change = max(0, before + delta - guaranteed) - max(0, before - guaranteed)
            self._pool_used[key] = self._pool_used.get(key, 0) + change

    @staticmethod
    def _lendable(quota: TeamQuota, gpu_type: str) -> int:
        nominal = quota.nominal.get(gpu_type, 0)
        limit = quota.lending_limit.get(gpu_type)
        return nominal if limit is None else min(nominal, limit)
