"""Priority preemption: which running tasks to evict so that a pending job fits, as a pure choice.

Only tasks of strictly lower priority are candidates, and a gang's tasks are one
candidate (a gang drains whole). For each task of the pending job in turn, the choice is
the cheapest set on one worker that makes it fit: the fewest tasks evicted, then the
lowest priority, then the youngest attempts (the least work lost). A gang victim frees
its room on every worker it holds, which later tasks of the pending job may use. If some
task cannot be made to fit, nothing is evicted: no job is preempted for one that then
would not fit. A move (defragmentation) is a plan of single tasks that all fit again in the
room left once the pending job took its place: they restart elsewhere rather than wait.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from corral.scheduling.policy import DEFAULT_PROJECT
from corral.scheduling.rooms import Request, WorkerRoom

EXACT_UP_TO = 3  # sets of up to this many candidates are tried exhaustively on a worker; larger ones greedily


@dataclass(frozen=True)
class RunningTask:
    """A task that holds room on a worker now."""

    task_id: int
    job_id: int
    worker_id: str
    request: Request
    gpu_ids: tuple[int, ...]
    priority: int
    project: str = DEFAULT_PROJECT
    since: float = 0.0  # when this attempt was placed: a younger one has lost less work
    gang: bool = False
    stopping: bool = False  # PREEMPTING or TERMINATING already: its room is on its way back


@dataclass(frozen=True)
class VictimPlan:
    victims: tuple[RunningTask, ...]
    placements: tuple[tuple[int, str], ...]  # (index of the pending task, worker it would go to)


Candidate = tuple[RunningTask, ...]  # one task, or every task of a gang


def choose_victims(request: Request, tasks: int, priority: int, rooms: Sequence[WorkerRoom],
                   running: Sequence[RunningTask], *, spread: bool = False,
                   move_to: Sequence[WorkerRoom] | None = None) -> VictimPlan | None:
    """The cheapest set of lower-priority tasks whose eviction lets all `tasks` fit, or None. With `move_to`, a
    move: single tasks only, and only a plan whose victims all fit again in what is left of `rooms` and `move_to`."""
    scratch = {room.id: room.copy() for room in rooms}
    candidates = _candidates(running, priority, scratch)
    if move_to is not None:
        candidates = [c for c in candidates if not c[0].gang]
    on_room: dict[str, list[int]] = defaultdict(list)
    for c, members in enumerate(candidates):
        for worker_id in {t.worker_id for t in members}:
            on_room[worker_id].append(c)
    chosen: list[int] = []
    placements: list[tuple[int, str]] = []
    used: set[str] = set()
    for index in range(tasks):
        open_rooms = [room for room in scratch.values() if not (spread and room.id in used)]
        room = next((r for r in open_rooms if r.fits(request)), None)
        if room is None:
            best: tuple[tuple, WorkerRoom, tuple[int, ...]] | None = None
            for r in open_rooms:
                if not r.could_ever_fit(request):
                    continue
                options = [c for c in on_room[r.id] if c not in chosen]
                found = _cheapest_on(r, request, options, candidates)
                if found is not None and (best is None or _cost(found, candidates) < best[0]):
                    best = (_cost(found, candidates), r, found)
            if best is None:
                return None
            _, room, found = best
            for c in found:
                for task in candidates[c]:
                    if task.worker_id in scratch:  # a gang victim may also hold room outside this group
                        scratch[task.worker_id].give(task.request, task.gpu_ids)
            chosen.extend(found)
        room.take(request)
        used.add(room.id)
        placements.append((index, room.id))
    victims = tuple(task for c in chosen for task in candidates[c])
    if move_to is not None and not _fit_again(victims, [*scratch.values(), *(room.copy() for room in move_to)]):
        return None
    return VictimPlan(victims, tuple(placements))


def _fit_again(victims: Sequence[RunningTask], rooms: Sequence[WorkerRoom]) -> bool:
    """Whether every victim fits in the room left, the largest first (books them there)."""
    for task in sorted(victims, key=lambda t: -t.request.gpu):
        room = next((r for r in rooms if r.fits(task.request)), None)
        if room is None:
            return False
        room.take(task.request)
    return True


def _candidates(running: Sequence[RunningTask], priority: int, rooms: dict[str, WorkerRoom]) -> list[Candidate]:
    """Lower-priority tasks not already stopping, a gang's tasks grouped; a gang that outranks is none."""
    singles: list[Candidate] = []
    gangs: dict[int, list[RunningTask]] = defaultdict(list)
    for task in running:
        if task.gang:
            gangs[task.job_id].append(task)
        elif task.priority < priority and not task.stopping and task.worker_id in rooms:
            singles.append((task,))
    whole = [tuple(members) for members in gangs.values()
             if members[0].priority < priority and not any(t.stopping for t in members)
             and any(t.worker_id in rooms for t in members)]
    return singles + whole


def _cost(chosen: tuple[int, ...], candidates: list[Candidate]) -> tuple[int, int, float]:
    tasks = [task for c in chosen for task in candidates[c]]
    return (len(tasks), max(t.priority for t in tasks), -min(t.since for t in tasks))


def _fits_without(room: WorkerRoom, request: Request, chosen: Sequence[int], candidates: list[Candidate]) -> bool:
    trial = room.copy()
    for c in chosen:
        for task in candidates[c]:
            if task.worker_id == room.id:
                trial.give(task.request, task.gpu_ids)
    return trial.fits(request)


def _cheapest_on(room: WorkerRoom, request: Request, options: list[int],
                 candidates: list[Candidate]) -> tuple[int, ...] | None:
    if not options or not _fits_without(room, request, options, candidates):
        return None
    for size in range(1, min(EXACT_UP_TO, len(options)) + 1):
        fitting = [combo for combo in combinations(options, size) if _fits_without(room, request, combo, candidates)]
        if fitting:
            return min(fitting, key=lambda combo: _cost(combo, candidates))
    # Many small tasks: evict the cheapest first until it fits, then spare any not needed after all.
    order = sorted(options, key=lambda c: _cost((c,), candidates))
    chosen: list[int] = []
    for c in order:
        chosen.append(c)
        if _fits_without(room, request, chosen, candidates):
            break
    for c in reversed(list(chosen)):
        rest = [x for x in chosen if x != c]
        if _fits_without(room, request, rest, candidates):
            chosen = rest
    return tuple(chosen)
