"""How much a placement fragments a worker's GPUs, measured against the requests a pool sees.

A worker's fragmentation for one kind of request is the GPU capacity it has free that this
kind could not use: all of it when the kind cannot run there at all (too few cores, too little
memory, a constraint the worker does not meet, too few whole devices); for a share, the free
parts of devices too small for it; for whole devices, the partly used ones. Weighted by how
often each kind is asked for, it says how much of the free capacity the pool's likely next
requests could not use. The fragmentation-aware strategy places each task where this grows
least (the rule of Weng et al., "Beware of Fragmentation", USENIX ATC 2023), and breaks ties
toward best fit.

The measure works on worker states (free cores, memory, custom slots, and each device's free
hundredths and device memory), so identical workers are scored once, and each state's score is
remembered for the pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from corral.core.constraints import AnyConstraint
from corral.scheduling.rooms import EPS, SHARES, Request, WorkerRoom

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
    computed once. A score is split in two remembered halves: which kinds fit the state's free
    cores and memory, and what each group of kinds could not use of its devices.
    """

    def __init__(self, weights: Mapping[Kind, float]) -> None:
        self.constraint_sets = list(dict.fromkeys(constraints for _, constraints in weights))
        position = {constraints: n for n, constraints in enumerate(self.constraint_sets)}
        # Kinds grouped by what they ask of the GPUs: (constraint set, share, whole, gpu memory) -> their
        # (cores, memory, custom, weight).
        parts: dict[tuple[int, int, int, int], list[tuple[float, int, tuple, float]]] = {}
        for (request, constraints), weight in weights.items():
            key = (position[constraints], request.share, request.whole, request.gpu_memory)
            parts.setdefault(key, []).append((request.cpu, request.memory, request.custom, weight))
        self.parts = list(parts)
        self.kinds = list(parts.values())
        self.weight = sum(weights.values())
        self.states: list[State] = []
        self.ids: dict[State, int] = {}
        self._scores: dict[int, float] = {}
        self._fitting: dict[tuple, tuple[float, ...]] = {}
        self._unusable: dict[tuple[tuple[int, int], ...], tuple[int, ...]] = {}
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
        total = 0.0
        if free:
            fitting = self._fitting_weights(admitted, cpu, memory, custom)
            unusable = self._unusable_parts(devices, free)
            total = free * self.weight + sum(w * (lost - free) for w, lost in zip(fitting, unusable) if w)
        self._scores[state_id] = total
        return total

    def _fitting_weights(self, admitted: tuple[bool, ...], cpu: float, memory: int, custom: tuple) -> tuple:
        """Per group of kinds, the weight of those that fit these free cores, memory and slots."""
        key = (admitted, cpu, memory, custom)
        if key not in self._fitting:
            slots = dict(custom)
            self._fitting[key] = tuple(
                sum(w for kind_cpu, kind_memory, kind_custom, w in kinds
                    if kind_cpu <= cpu + EPS and kind_memory <= memory
                    and all(amount <= slots.get(name, 0.0) + EPS for name, amount in kind_custom))
                if admitted[part[0]] else 0.0
                for part, kinds in zip(self.parts, self.kinds))
        return self._fitting[key]

    def _unusable_parts(self, devices: tuple[tuple[int, int], ...], free: int) -> tuple[int, ...]:
        if devices not in self._unusable:
            self._unusable[devices] = tuple(_unusable(devices, free, share, whole, gpu_memory)
                                            for _, share, whole, gpu_memory in self.parts)
        return self._unusable[devices]

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


def _unusable(devices: Sequence[tuple[int, int]], free: int, share: int, whole: int, gpu_memory: int) -> int:
    """The free hundredths a kind that may run here still could not use."""
    if share:
        usable = sum(d_share for d_share, d_memory in devices if d_share >= share and d_memory >= gpu_memory)
        return free - usable if usable else free
    unused = sum(1 for d_share, d_memory in devices if d_share == SHARES and d_memory >= gpu_memory)
    return free - unused * SHARES if unused >= whole else free


def _replace(devices: tuple[tuple[int, int], ...], n: int, device: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    rest = devices[:n] + devices[n + 1:]
    return tuple(sorted(rest + (device,))) if device[0] > 0 else rest


def _free(state: State) -> int:
    return sum(share for share, _ in state[4])
