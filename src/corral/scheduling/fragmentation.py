"""How much a placement fragments a worker's GPUs, measured against the requests a pool sees.

A worker's fragmentation for one kind of request is the GPU capacity it has free that this
kind could not use: all of it when the kind cannot run there at all (a constraint the worker
does not meet, too few cores, too little memory, too few whole devices); for a share, the free
parts of devices too small for it; for whole devices, the partly used ones. Weighted by how
often each kind is asked for, it says how much of the free capacity the pool's likely next
requests could not use. The fragmentation-aware strategy places each task where this grows
least (the rule of Weng et al., "Beware of Fragmentation", USENIX ATC 2023), and breaks ties
toward best fit.

One refinement measured better on Alibaba's trace (see docs/scheduling.md): a kind's usable
capacity is what as many copies of it as the worker holds would take, so the cores and memory
left bound it too (two free GPUs beside cores for one task are half lost), and a share's copies
leave the remainder of each device (0.3 fits three times in a device, leaving 0.1).

The measure works on worker states (free cores, memory, custom slots, and each device's free
hundredths and device memory), so identical workers are scored once, and each state's score is
remembered for the pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from operator import floordiv, mul

from corral.core.constraints import AnyConstraint
from corral.scheduling.rooms import EPS, SHARES, Request, WorkerRoom

GIB = 2**30
TINY = 1e-12
Kind = tuple[Request, tuple[AnyConstraint, ...]]  # a request and the constraints of its job
# (which constraint sets admit it, free cores, free memory, free custom slots, sorted (free hundredths, device memory))
State = tuple[tuple[bool, ...], float, int, tuple[tuple[str, float], ...], tuple[tuple[int, int], ...]]


class RequestMix:
    """How often each kind of GPU request was seen lately: counts that decay, so recent requests weigh most.

    A request seen `half_life` requests ago counts half as much as the latest. At most `max_kinds` kinds
    are kept: past that the lightest goes, so memory stays bounded however long the pool runs.
    """

    def __init__(self, half_life: float = 2_000, max_kinds: int = 512) -> None:
        self.growth = 2 ** (1 / half_life)
        self.max_kinds = max_kinds
        self.counts: dict[Kind, float] = {}
        self.scale = 1.0  # the weight of the next request; older ones keep theirs, so they shrink in proportion

    @classmethod
    def of(cls, kinds: Iterable[Kind], **options: float) -> RequestMix:
        mix = cls(**options)
        for request, constraints in kinds:
            mix.add(request, constraints)
        return mix

    def add(self, request: Request, constraints: tuple[AnyConstraint, ...] = (), times: int = 1) -> None:
        """Count a request of a job with these constraints; one asking for no GPU fragments nothing."""
        if request.gpu <= 0:
            return
        kind = (request, constraints)
        self.counts[kind] = self.counts.get(kind, 0.0) + self.scale * times
        self.scale *= self.growth
        if self.scale > 1e100:  # keep the numbers finite: the proportions are what counts
            self.counts = {k: count / self.scale for k, count in self.counts.items()}
            self.scale = 1.0
        if len(self.counts) > self.max_kinds:
            del self.counts[min(self.counts, key=self.counts.__getitem__)]

    def weights(self) -> dict[Kind, float]:
        """Each kind's share of the requests seen, adding up to 1 (empty when none was seen)."""
        total = sum(self.counts.values())
        return {kind: count / total for kind, count in self.counts.items()} if total else {}


class Fragmentation:
    """The weighted fragmentation of worker states, and the placement that adds least of it.

    States are interned as small integers; a state's score and each request's choice on it are
    computed once. A score is split in two remembered halves: how many copies of each kind the
    state's free cores and memory hold, and how many each group of kinds' devices hold.
    """

    def __init__(self, weights: Mapping[Kind, float], rooms: Sequence[WorkerRoom] = ()) -> None:
        """`rooms`: the pool's workers; a kind only few of them could ever hold weighs more, in proportion, so
        that the few workers that could hold it are kept for it (an 8-GPU task with 120 cores has 39 of 1,213)."""
        if rooms:
            weights = {kind: weight * _scarcity(kind, rooms) for kind, weight in weights.items()}
        self.constraint_sets = list(dict.fromkeys(constraints for _, constraints in weights))
        position = {constraints: n for n, constraints in enumerate(self.constraint_sets)}
        # Kinds grouped by what they ask of the GPUs: (constraint set, share, whole, gpu memory) -> their
        # (cores, memory, custom, weight).
        parts: dict[tuple[int, int, int, int], list[tuple[float, int, tuple, float]]] = {}
        for (request, constraints), weight in weights.items():
            key = (position[constraints], request.share, request.whole, request.gpu_memory)
            parts.setdefault(key, []).append((request.cpu, request.memory, request.custom, weight))
        self.parts = list(parts)
        self.cpus = [tuple(kind[0] or TINY for kind in kinds) for kinds in parts.values()]
        self.memories = [tuple(kind[1] / GIB or TINY for kind in kinds) for kinds in parts.values()]
        self.customs = [tuple(kind[2] for kind in kinds) for kinds in parts.values()]
        self.weights = [tuple(kind[3] for kind in kinds) for kinds in parts.values()]
        self.units = [share or whole * SHARES for _, share, whole, _ in self.parts]
        self.weight = sum(weights.values())
        self.states: list[State] = []
        self.ids: dict[State, int] = {}
        self._scores: dict[int, float] = {}
        self._hosts: dict[tuple, list[tuple]] = {}
        self._copies: dict[tuple, list[tuple[float, ...]]] = {}
        self._devices: dict[tuple[tuple[int, int], ...], tuple[int, ...]] = {}
        self._choices: dict[Request, dict[int, tuple | None]] = {}

    def state(self, room: WorkerRoom) -> int:
        """The id of the room's state: equal for workers that fragment alike."""
        admitted = tuple(all(c.admits(room) for c in constraints) for constraints in self.constraint_sets)
        devices = tuple(sorted(
            (SHARES - room.gpu_shared.get(d, 0) if d not in room.free_gpu_ids else SHARES,
             room.device_memory(d) - room.gpu_memory_shared.get(d, 0))
            for d in range(room.gpu) if d in room.free_gpu_ids or d in room.gpu_shared))
        return self._intern((admitted, room.free_cpu, room.free_memory, tuple(sorted(room.free_custom.items())),
                             tuple(device for device in devices if device[0] > 0)))

    def _intern(self, state: State) -> int:
        if state not in self.ids:
            self.ids[state] = len(self.states)
            self.states.append(state)
        return self.ids[state]

    def score(self, state_id: int) -> float:
        """The free GPU capacity (in hundredths) the mix could not use here, weighted by popularity."""
        if state_id in self._scores:
            return self._scores[state_id]
        admitted, cpu, memory, custom, devices = self.states[state_id]
        free = sum(share for share, _ in devices)
        usable = 0.0
        if free:
            for copies, weights, unit, held in zip(self._host_copies(admitted, cpu, memory, custom), self.weights,
                                                   self.units, self._device_copies(devices), strict=True):
                if held and copies:  # each kind packs as many copies as both its host room and the devices hold
                    usable += unit * sum(map(mul, weights, map(min, copies, repeat(held))))
        self._scores[state_id] = total = free * self.weight - usable
        return total

    def _host_copies(self, admitted: tuple[bool, ...], cpu: float, memory: int, custom: tuple) -> list[tuple]:
        """Per group of kinds, the copies of each kind these free cores, memory and slots hold."""
        memory //= GIB  # whole GiB: close enough to count copies, and far fewer states to count them for
        key = (admitted, cpu, memory, custom)
        if key not in self._hosts:
            self._hosts[key] = [
                tuple(map(min, by_cpu, by_memory, by_slots)) if admitted[part[0]] else ()
                for part, by_cpu, by_memory, by_slots in zip(
                    self.parts, self._bounds("cpu", cpu), self._bounds("memory", memory),
                    self._bounds("custom", custom), strict=True)]
        return self._hosts[key]

    def _bounds(self, resource: str, free: float | tuple) -> list[tuple[float, ...]]:
        """Per group of kinds, the copies of each kind one free resource alone holds (unbounded if none asked)."""
        key = (resource, free)
        if key not in self._copies:
            if resource == "custom":
                slots = dict(free)
                self._copies[key] = [tuple(min(((slots.get(name, 0.0) + EPS) // amount for name, amount in custom),
                                               default=math.inf) for custom in group)
                                     for group in self.customs]
            else:  # an ask of none is a tiny one here: its copies are past any device's count
                asks = self.cpus if resource == "cpu" else self.memories
                room = free + EPS if resource == "cpu" else free
                self._copies[key] = [tuple(map(floordiv, repeat(room), group)) for group in asks]
        return self._copies[key]

    def _device_copies(self, devices: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
        """Per group of kinds, how many copies these devices hold."""
        if devices not in self._devices:
            self._devices[devices] = tuple(
                sum(free // share for free, memory in devices if free >= share and memory >= gpu_memory) if share
                else sum(1 for free, memory in devices if free == SHARES and memory >= gpu_memory) // whole
                for _, share, whole, gpu_memory in self.parts)
        return self._devices[devices]

    def choice(self, state_id: int, request: Request) -> tuple | None:
        """How placing `request` on a worker in this state ranks, or None when it does not fit there:
        (growth of fragmentation, free GPU capacity after, free cores after, the device a share takes)."""
        choices = self._choices.setdefault(request, {})
        if state_id not in choices:
            choices[state_id] = self._choose(state_id, request)
        return choices[state_id]

    def _choose(self, state_id: int, request: Request) -> tuple | None:
        admitted, cpu, memory, custom, devices = self.states[state_id]
        slots = dict(custom)
        if request.cpu > cpu + EPS or request.memory > memory or any(
                amount > slots.get(name, 0.0) + EPS for name, amount in request.custom):
            return None
        for name, amount in request.custom:
            slots[name] -= amount
        rest = (admitted, cpu - request.cpu, memory - request.memory, tuple(sorted(slots.items())))
        before = self.score(state_id)
        if request.share:  # one option per distinct device it fits on; ties go to the fullest device
            options = []
            for n, device in enumerate(devices):
                if (device[0] >= request.share and device[1] >= request.gpu_memory
                        and (n == 0 or device != devices[n - 1])):
                    taken = (device[0] - request.share, device[1] - request.gpu_memory)
                    after = self._intern((*rest, _replace(devices, n, taken)))
                    options.append((round(self.score(after) - before, 6), _free(self.states[after]), rest[1],
                                    device[0], device))
            if not options:
                return None
            growth, free, cores, _, device = min(options)
            return growth, free, cores, device
        whole = [n for n, device in enumerate(devices) if device[0] == SHARES and device[1] >= request.gpu_memory]
        if len(whole) < request.whole:
            return None
        taken = set(whole[: request.whole])  # the smallest devices that suffice, as WorkerRoom.take hands out
        after = self._intern((*rest, tuple(device for n, device in enumerate(devices) if n not in taken)))
        return round(self.score(after) - before, 6), _free(self.states[after]), rest[1], None


def _scarcity(kind: Kind, rooms: Sequence[WorkerRoom]) -> float:
    """How much rarer than any worker are those that could ever hold this kind."""
    request, constraints = kind
    able = sum(1 for room in rooms if room.could_ever_fit(request) and all(c.admits(room) for c in constraints))
    return len(rooms) / max(able, 1)


def _replace(devices: tuple[tuple[int, int], ...], n: int, device: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    rest = devices[:n] + devices[n + 1:]
    return tuple(sorted(rest + (device,))) if device[0] > 0 else rest


def _free(state: State) -> int:
    return sum(share for share, _ in state[4])
