"""How much a placement fragments a worker's GPUs, measured against the requests a pool sees.

A worker's fragmentation for one kind of request is the GPU capacity it has free that this
kind could not use: all of it when the kind cannot run there at all (a constraint the worker
does not meet, too few cores, too little memory, too few whole devices); for a share, the free
parts of devices too small for it; for whole devices, the partly used ones. Weighted by how
often each kind is asked for, it says how much of the free capacity the pool's likely next
requests could not use. The fragmentation-aware strategy places each task where this grows
least (the rule of Weng et al., "Beware of Fragmentation", USENIX ATC 2023), and breaks ties
toward best fit.

Refinements measured better on Alibaba's trace (see docs/scheduling.md): a kind's usable
capacity is what as many copies of it as the worker holds would take, so the cores and memory
left bound it too (two free GPUs beside cores for one task are half lost), and a share's copies
leave the remainder of each device (0.3 fits three times in a device, leaving 0.1); a share
weighs four times and a multi-GPU request twice what a single whole GPU does, per request seen;
a kind few workers could ever hold weighs more.

The measure works on worker states (free cores, memory, custom slots, and each device's free
hundredths and device memory), so identical workers are scored once, and each state's score is
remembered for as long as the measure is kept (see scheduling.capacity).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from operator import floordiv, mul

from corral.core.constraints import AnyConstraint
from corral.scheduling.rooms import EPS, SHARES, Request, WorkerRoom

GIB = 2**30
TINY = 1e-12
# How much more than a whole single GPU a share and a multi-GPU request weigh, per request seen (measured on the
# trace replay): at saturation nearly all free capacity is left in the remainders of shared devices, so the devices
# shares can still use count most; multi-GPU requests weigh more too, so whole workers stay kept for them.
SHARE_WEIGHT = 4.0
MULTI_GPU_WEIGHT = 2.0
Kind = tuple[Request, tuple[AnyConstraint, ...]]  # a request and the constraints of its job
# (the constraint sets that admit it, free cores, free memory, free custom slots, sorted (free hundredths, device
# memory))
State = tuple[tuple[int, ...], float, int, tuple[tuple[str, float], ...], tuple[tuple[int, int], ...]]


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

    def add_all(self, runs: Iterable[tuple[Request, tuple[AnyConstraint, ...], int, int]]) -> None:
        """For each (request, constraints, times, repeats) in turn, `add` (request, constraints, times) `repeats` times
        in a row, with the same counts to the last bit. A kind equal to the one before (a job's tasks, a row of alike
        tasks) is counted in a local, compared by its fields, and written once its run ends: no request hashed or
        compared through its Python `__hash__` and `__eq__` per task; a run the caller counted (`repeats`) is added up
        in a loop of its own, with nothing compared (a forecast counts every pending unit and running task, some 18k,
        most of them in runs)."""
        counts, growth, add = self.counts, self.growth, self.add
        last: Request | None = None  # the run's first request; its kind is in `counts`, its count in `count`
        last_fields: tuple = ()
        last_constraints: tuple[AnyConstraint, ...] = ()
        count = 0.0
        for request, constraints, times, repeats in runs:
            if request.gpu <= 0:
                continue
            if not (last is not None and (request is last or request._fields == last_fields) and (
                    constraints is last_constraints or constraints == last_constraints)):
                if last is not None:
                    counts[last, last_constraints] = count
                last = None
                while repeats and last is None:  # a kind pruned at once, as `add` may, is added again by the next
                    add(request, constraints, times)
                    repeats -= 1
                    counts = self.counts
                    count = counts.get((request, constraints))
                    last = None if count is None else request
                last_fields, last_constraints = request._fields, constraints
            scale = self.scale
            for _ in range(repeats):  # as `add`: counts.get(kind) + scale * times, then the scale grows
                count += scale * times
                scale *= growth
                if scale > 1e100:  # as `add`
                    counts[last, last_constraints] = count
                    counts = self.counts = {k: c / scale for k, c in counts.items()}
                    scale = 1.0
                    count = counts[last, last_constraints]
            self.scale = scale
        if last is not None:
            counts[last, last_constraints] = count

    def weights(self) -> dict[Kind, float]:
        """Each kind's share of the requests seen, adding up to 1 (empty when none was seen)."""
        total = sum(self.counts.values())
        return {kind: count / total for kind, count in self.counts.items()} if total else {}


class Fragmentation:
    """The weighted fragmentation of worker states, and the placement that adds least of it.

    States are interned as small integers; a state's score and each request's choice on it are
    computed once. A score draws on remembered counts: how many copies of each kind a free amount
    of cores or memory holds, and how many each group of kinds' devices hold; only the groups
    whose constraints the worker meets are counted.
    """

    def __init__(self, weights: Mapping[Kind, float], rooms: Sequence[WorkerRoom] = ()) -> None:
        """`rooms`: the pool's workers; a kind only few of them could ever hold weighs more, in proportion, so
        that the few workers that could hold it are kept for it (an 8-GPU task with 120 cores has 39 of 1,213)."""
        self.constraint_sets = list(dict.fromkeys(constraints for _, constraints in weights))
        position = {constraints: n for n, constraints in enumerate(self.constraint_sets)}
        self.admitted_of: dict[str, tuple[int, ...]] = {}  # worker id -> the constraint sets it meets (`admitted`)
        weights = {kind: weight * (SHARE_WEIGHT if kind[0].share else MULTI_GPU_WEIGHT if kind[0].whole > 1 else 1)
                   for kind, weight in weights.items()}
        if rooms:
            weights = self._scarce_weighed(weights, rooms, position)
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
        self.largest_cpus = [max(asks) for asks in self.cpus]
        self.largest_memories = [max(asks) for asks in self.memories]
        self.asks_custom = any(custom for group in self.customs for custom in group)
        self.weights = [tuple(kind[3] for kind in kinds) for kinds in parts.values()]
        self.part_weights = [sum(weights) for weights in self.weights]
        self.units = [share or whole * SHARES for _, share, whole, _ in self.parts]
        self.weight = sum(weights.values())
        self.states: list[State] = []
        self.ids: dict[State, int] = {}
        self._scores: dict[int, float] = {}
        self._parts_of: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._copies: dict[tuple, tuple[float, ...]] = {}
        self._devices: dict[tuple[tuple[int, int], ...], tuple[int, ...]] = {}
        self._choices: dict[Request, dict[int, tuple | None]] = {}

    def _scarce_weighed(self, weights: Mapping[Kind, float], rooms: Sequence[WorkerRoom],
                        position: Mapping[tuple[AnyConstraint, ...], int]) -> dict[Kind, float]:
        """Each weight times how much rarer than any worker are those that could ever hold its kind (workers of one
        shape are asked once)."""
        shapes: Counter[tuple] = Counter()
        examples: dict[tuple, WorkerRoom] = {}
        for room in rooms:
            shape = (self.admitted(room), room.cpu, room.memory, room.gpu, tuple(room.gpu_memory),
                     tuple(sorted(room.custom.items())))
            shapes[shape] += 1
            examples.setdefault(shape, room)
        scaled = {}
        for (request, constraints), weight in weights.items():
            able = sum(count for shape, count in shapes.items()
                       if position[constraints] in shape[0] and examples[shape].could_ever_fit(request))
            scaled[request, constraints] = weight * len(rooms) / max(able, 1)
        return scaled

    def admitted(self, room: WorkerRoom) -> tuple[int, ...]:
        """The constraint sets the room meets (its labels do not change within a pass)."""
        admitted = self.admitted_of.get(room.id)
        if admitted is None:
            admitted = self.admitted_of[room.id] = tuple(s for s, constraints in enumerate(self.constraint_sets)
                                                       if all(c.admits(room) for c in constraints))
        return admitted

    def state(self, room: WorkerRoom) -> int:
        """The id of the room's state: equal for workers that fragment alike."""
        admitted = self.admitted(room)
        free, shared, reserved = set(room.free_gpu_ids), room.gpu_shared, room.gpu_memory_shared
        # Only the devices with room are visited (not every device asking whether it is free): a pass states
        # the room of every worker it takes from.
        devices = [(SHARES, room.device_memory(d) - reserved.get(d, 0)) for d in free if d < room.gpu]
        devices += [(SHARES - used, room.device_memory(d) - reserved.get(d, 0)) for d, used in shared.items()
                    if d < room.gpu and d not in free and used < SHARES]
        return self._intern((admitted, room.free_cpu, room.free_memory, tuple(sorted(room.free_custom.items())),
                             tuple(sorted(devices))))

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
            held_by_part = self._device_copies(devices)
            memory //= GIB  # whole GiB: close enough to count copies, and far fewer values to count them for
            by_cpu, by_memory = self._fewest("cpu", cpu), self._fewest("memory", memory)
            by_custom = self._fewest("custom", custom) if self.asks_custom else None
            for n in self._admitted_parts(admitted):  # each kind packs as many copies as its host room and devices hold
                if not (held := held_by_part[n]):
                    continue
                fewest = min(by_cpu[n], by_memory[n], by_custom[n]) if by_custom else min(by_cpu[n], by_memory[n])
                if held <= fewest:  # the devices bound every kind of the group
                    usable += self.units[n] * held * self.part_weights[n]
                else:
                    bounds = [self._copies_of("cpu", cpu, n), self._copies_of("memory", memory, n)]
                    if by_custom:
                        bounds.append(self._copies_of("custom", custom, n))
                    usable += self.units[n] * sum(map(mul, self.weights[n], map(min, *bounds, repeat(held))))
        self._scores[state_id] = total = free * self.weight - usable
        return total

    def _admitted_parts(self, admitted: tuple[int, ...]) -> tuple[int, ...]:
        """The groups of kinds whose constraint set is among these."""
        if admitted not in self._parts_of:
            sets = set(admitted)
            self._parts_of[admitted] = tuple(n for n, part in enumerate(self.parts) if part[0] in sets)
        return self._parts_of[admitted]

    def _fewest(self, resource: str, free: float | tuple) -> tuple[float, ...]:
        """Per group of kinds, the fewest copies of any of its kinds that one free resource alone holds."""
        key = (resource, free)
        if key not in self._copies:
            if resource == "custom":
                self._copies[key] = tuple(min(self._copies_of(resource, free, n)) for n in range(len(self.parts)))
            else:  # the largest ask fits fewest times
                largest = self.largest_cpus if resource == "cpu" else self.largest_memories
                room = free + EPS if resource == "cpu" else free
                self._copies[key] = tuple(map(floordiv, repeat(room), largest))
        return self._copies[key]

    def _copies_of(self, resource: str, free: float | tuple, n: int) -> tuple[float, ...]:
        """The copies of each kind of group `n` that one free resource alone holds (unbounded if none asked)."""
        if resource == "custom":
            slots = dict(free)
            return tuple(min(((slots.get(name, 0.0) + EPS) // amount for name, amount in custom), default=math.inf)
                         for custom in self.customs[n])
        # an ask of none is a tiny one here: its copies are past any device's count
        asks = self.cpus if resource == "cpu" else self.memories
        return tuple(map(floordiv, repeat(free + EPS if resource == "cpu" else free), asks[n]))

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


def _replace(devices: tuple[tuple[int, int], ...], n: int, device: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    rest = devices[:n] + devices[n + 1:]
    return tuple(sorted(rest + (device,))) if device[0] > 0 else rest


def _free(state: State) -> int:
    return sum(share for share, _ in state[4])
