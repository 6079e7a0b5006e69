"""Worker room and task requests, and the book a placement pass keeps of them.

A request takes whole GPUs (an integer count) or a share of one device (0.01-0.99, kept in
hundredths so that shares add up exactly). A device holding shares is never handed out
whole, and a share never spans two devices.

The book holds scratch copies of the rooms and, per group of workers a job may use (one
pool, one set of label constraints), an index sorted by free room, so that choosing a
worker costs a binary search rather than a scan of the cluster. Three strategies
read the same index: concentrated takes the fullest worker that fits (best fit),
dispersed the emptiest (worst fit), round-robin the next in turn. The fourth,
fragmentation-aware, scores the group's workers by state (see scheduling.fragmentation):
the group keeps its workers bucketed by state, so identical workers are scored once.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Protocol
from weakref import WeakKeyDictionary

from corral.core.config import Strategy
from corral.core.constraints import AnyConstraint
from corral.scheduling.policy import DEFAULT_POOL

if TYPE_CHECKING:
    from corral.scheduling.fragmentation import Fragmentation

# Read from the enum once: a member read from its class costs some ten times a plain attribute (Python 3.11's enum
# metaclass has a `__getattr__`), and a placing asks at each run of alike tasks.
FRAGMENTATION_AWARE, ROUND_ROBIN, DISPERSED = Strategy.FRAGMENTATION_AWARE, Strategy.ROUND_ROBIN, Strategy.DISPERSED
EPS = 1e-9  # fractional cores add up with rounding errors
SHARES = 100  # a device is shared in hundredths
RANKED = ("gpu", "cpu", "memory")  # whole GPUs, cores, memory: kept ranked by how much each worker has free


def gpu_share(gpu: float) -> int:
    """The hundredths of one device that a request for `gpu` GPUs takes when it is a share (0 < gpu < 1); else 0."""
    return round(gpu * SHARES) if 0 < gpu < 1 else 0


def custom_slots(custom: Mapping[str, float] | None) -> tuple[tuple[str, float], ...]:
    """A spec's custom slots as a request holds them: sorted (name, amount) pairs, none of zero."""
    return tuple(sorted((name, float(amount)) for name, amount in (custom or {}).items() if amount))


@dataclass(frozen=True)
class Request:
    """What one task reserves."""

    cpu: float
    memory: int
    gpu: float  # whole devices (a whole number), or a share of one device (0.01-0.99)
    custom: tuple[tuple[str, float], ...] = ()  # sorted (name, amount) pairs, hashable
    gpu_memory: int = 0  # whole devices: bytes each must have; a share: bytes of its device it reserves; 0: any

    def __post_init__(self) -> None:
        """Its fields as one tuple, its hash and its GPU parts, worked out once as plain attributes: a pass reads them
        for every task it offers room and every worker it tries (a cached property answers each read some ten times
        slower), and compares requests in every look-up keyed by one. Not fields: a request is sent as its fields."""
        share = gpu_share(self.gpu)
        object.__setattr__(self, "share", share)  # hundredths of one device, for a share; 0 for whole devices
        object.__setattr__(self, "whole", 0 if share else int(self.gpu))  # whole devices, 0 for a share
        fields = (self.cpu, self.memory, self.gpu, self.custom, self.gpu_memory)
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_hash", hash(fields))
        object.__setattr__(self, "per_task", self.amounts())  # what one task holds, kept: never changed

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        """As the dataclass compares, from the fields kept as one tuple (equal requests are seldom the same object:
        each task row reads its own)."""
        if other.__class__ is not Request:
            return NotImplemented
        return self is other or self._fields == other._fields

    def amounts(self, tasks: int = 1) -> dict[str, float]:
        """Per resource, in the order a reason names them: the scarcest kinds first."""
        amounts = {"gpu": float(self.gpu * tasks)}
        amounts.update((name, amount * tasks) for name, amount in self.custom)
        amounts.update(cpu=self.cpu * tasks, memory=float(self.memory * tasks))
        return amounts


@dataclass
class WorkerRoom:
    """What one alive worker has, and has free, in this snapshot.

    With device memory known, free GPUs are kept smallest first, so that `take` hands out the
    smallest devices that suffice and keeps the big ones for the requests that need them.
    `free_gpu_ids` are the devices nothing uses; a device holding shares is in `gpu_shared`
    (hundredths in use) and, where shares reserve device memory, `gpu_memory_shared` (bytes).
    """

    id: str
    name: str
    cpu: float
    memory: int
    gpu: int
    free_cpu: float
    free_memory: int
    free_gpu_ids: list[int] = field(default_factory=list)
    pool: str = DEFAULT_POOL
    labels: dict[str, str] = field(default_factory=dict)
    custom: dict[str, float] = field(default_factory=dict)
    free_custom: dict[str, float] = field(default_factory=dict)
    gpu_memory: Sequence[int] = ()  # bytes per device index, 0 where unknown; empty when none is known
    filesystem: str | None = None  # the id of the file system its tasks see
    shared_fs: tuple[str, ...] = ()  # directories it shares with submitters elsewhere
    pythons: tuple[str, ...] = ()  # the Python versions it builds environments with
    gpu_shared: dict[int, int] = field(default_factory=dict)  # device -> hundredths its shares use
    gpu_memory_shared: dict[int, int] = field(default_factory=dict)  # device -> bytes its shares reserve

    def __post_init__(self) -> None:
        if self.gpu_memory:
            self.free_gpu_ids.sort(key=self._device_order)

    def fits(self, request: Request) -> bool:
        if request.cpu > self.free_cpu + EPS or request.memory > self.free_memory:
            return False
        if request.share:
            if not self.share_devices(request):
                return False
        elif request.gpu > len(self.free_gpu_ids) or (
                request.gpu_memory and request.gpu > len(self.gpus_with(request.gpu_memory, self.free_gpu_ids))):
            return False
        return not request.custom or all(amount <= self.free_custom.get(name, 0.0) + EPS
                                         for name, amount in request.custom)

    def could_ever_fit(self, request: Request) -> bool:
        return (
            request.cpu <= self.cpu + EPS
            and request.memory <= self.memory
            and request.gpu <= self.capacity("gpu", request.gpu_memory)
            and all(amount <= self.custom.get(name, 0.0) + EPS for name, amount in request.custom)
        )

    def share_devices(self, request: Request) -> list[int]:
        """The devices a share fits on now: those already shared with room for it, fullest first, then the unused
        ones (smallest first where memory is known). Best fit is the first; a strategy may choose another."""
        shared = [d for d, used in self.gpu_shared.items() if used + request.share <= SHARES
                  and (not request.gpu_memory
                       or self.device_memory(d) - self.gpu_memory_shared.get(d, 0) >= request.gpu_memory)]
        shared.sort(key=lambda d: (-self.gpu_shared[d], d))
        unused = self.gpus_with(request.gpu_memory, self.free_gpu_ids) if request.gpu_memory else self.free_gpu_ids
        return shared + unused

    def take(self, request: Request, device: int | None = None) -> list[int]:
        """Reserve a request's room; a share goes to `device` if given (one of `share_devices`), else best fit."""
        self.free_cpu -= request.cpu
        self.free_memory -= request.memory
        for name, amount in request.custom:
            self.free_custom[name] = self.free_custom.get(name, 0.0) - amount
        if request.share:
            if device is None:
                device = self.share_devices(request)[0]
            if device in self.free_gpu_ids:
                self.free_gpu_ids.remove(device)
            self.gpu_shared[device] = self.gpu_shared.get(device, 0) + request.share
            if request.gpu_memory:
                self.gpu_memory_shared[device] = self.gpu_memory_shared.get(device, 0) + request.gpu_memory
            return [device]
        if request.gpu_memory:
            gpu_ids = self.gpus_with(request.gpu_memory, self.free_gpu_ids)[: request.whole]
            self.free_gpu_ids = [i for i in self.free_gpu_ids if i not in gpu_ids]
        else:
            gpu_ids, self.free_gpu_ids = self.free_gpu_ids[: request.whole], self.free_gpu_ids[request.whole :]
        gpu_ids.sort()  # chosen smallest first, handed to the task in index order (a list of its own: sorted in place)
        return gpu_ids

    def hold(self, request: Request, gpu_ids: Sequence[int]) -> None:
        """Reserve a request's room on the devices it was given (a task on record here)."""
        self.free_cpu -= request.cpu
        self.free_memory -= request.memory
        for name, amount in request.custom:
            self.free_custom[name] = self.free_custom.get(name, 0.0) - amount
        for device in gpu_ids:
            if device in self.free_gpu_ids:
                self.free_gpu_ids.remove(device)
            if request.share:
                self.gpu_shared[device] = self.gpu_shared.get(device, 0) + request.share
                if request.gpu_memory:
                    self.gpu_memory_shared[device] = self.gpu_memory_shared.get(device, 0) + request.gpu_memory

    def give(self, request: Request, gpu_ids: Sequence[int]) -> None:
        """Undo a `take` (a gang that did not fit whole), or release a victim's reservation."""
        self.free_cpu += request.cpu
        self.free_memory += request.memory
        for name, amount in request.custom:
            self.free_custom[name] = self.free_custom.get(name, 0.0) + amount
        if request.share:
            gpu_ids = [d for d in gpu_ids if self._unshare(d, request)]
        if self.gpu_memory:
            self.free_gpu_ids = sorted({*self.free_gpu_ids, *gpu_ids}, key=self._device_order)
        else:  # no key to pass: a forecast gives back some twenty thousand tasks' devices
            self.free_gpu_ids = sorted({*self.free_gpu_ids, *gpu_ids})

    def _unshare(self, device: int, request: Request) -> bool:
        """Give a share back; True when the device is then unused."""
        used = self.gpu_shared.get(device, 0) - request.share
        if request.gpu_memory and device in self.gpu_memory_shared:
            self.gpu_memory_shared[device] -= request.gpu_memory
            if self.gpu_memory_shared[device] <= 0:
                del self.gpu_memory_shared[device]
        if used > 0:
            self.gpu_shared[device] = used
            return False
        self.gpu_shared.pop(device, None)
        return True

    def free_share(self, gpu_memory: int = 0) -> float:
        """The largest share one device has free now (1.0 for an unused one), among those with `gpu_memory` bytes
        left: what a reason says a share request could have had."""
        if self.gpus_with(gpu_memory, self.free_gpu_ids) if gpu_memory else self.free_gpu_ids:
            return 1.0
        room = [SHARES - used for d, used in self.gpu_shared.items()
                if not gpu_memory or self.device_memory(d) - self.gpu_memory_shared.get(d, 0) >= gpu_memory]
        return max(room, default=0) / SHARES

    def device_memory(self, gpu_id: int) -> int:
        return self.gpu_memory[gpu_id] if gpu_id < len(self.gpu_memory) else 0

    def memories(self, gpu_ids: Iterable[int]) -> tuple[int, ...]:
        """The memory of these devices, smallest first: what a reason says they offer."""
        return tuple(sorted(map(self.device_memory, gpu_ids)))

    def gpus_with(self, memory: int, gpu_ids: Sequence[int]) -> list[int]:
        """Those of `gpu_ids` with at least `memory` bytes (a device of unknown memory only for 0), in order."""
        return [i for i in gpu_ids if self.device_memory(i) >= memory]

    def free(self, resource: str, gpu_memory: int = 0) -> float:
        """Free room of a resource; GPUs counted among those with at least `gpu_memory` bytes."""
        if resource == "gpu":
            return len(self.gpus_with(gpu_memory, self.free_gpu_ids)) if gpu_memory else len(self.free_gpu_ids)
        return {"cpu": self.free_cpu, "memory": self.free_memory}.get(resource, self.free_custom.get(resource, 0.0))

    def capacity(self, resource: str, gpu_memory: int = 0) -> float:
        if resource == "gpu":
            return len(self.gpus_with(gpu_memory, range(self.gpu))) if gpu_memory else self.gpu
        return {"cpu": self.cpu, "memory": self.memory}.get(resource, self.custom.get(resource, 0.0))

    def copy(self) -> WorkerRoom:
        """Its own free room, the rest shared: a pass copies every room it takes from, and `replace` costs several
        times this. The copy's fields are set as a dictionary of its own keys (`dict()`), not a `.copy()` of the
        original's, which shares the class's keys: Python 3.11 specialises no field read of an instance holding such
        a shared-keys dictionary, and a pass reads some twenty fields of a copied room per task it places (0.89x the
        instructions of placing 10,000 pending tasks)."""
        room = object.__new__(WorkerRoom)
        own = room.__dict__ = dict(self.__dict__)
        own["free_gpu_ids"], own["free_custom"] = self.free_gpu_ids[:], self.free_custom.copy()
        own["gpu_shared"], own["gpu_memory_shared"] = self.gpu_shared.copy(), self.gpu_memory_shared.copy()
        if room.gpu_memory:  # its devices in order, as the constructor puts them (only these have an order to keep)
            room.__post_init__()
        return room

    def _device_order(self, gpu_id: int) -> tuple[int, int]:
        return (self.device_memory(gpu_id), gpu_id)


def overbooking(room: WorkerRoom, held: Iterable[tuple[Request, Sequence[int]]]) -> str | None:
    """What of a worker the tasks on record (each a request and the devices it was given) hold more of than it has,
    in words, or None. `room` is the worker's whole room. The capacity fence of a placing transaction reads it from
    the rows as committed: two controllers' passes that each saw the same free room cannot both book it."""
    cpu = memory = 0.0
    custom: dict[str, float] = {}
    whole: dict[int, int] = {}  # device -> tasks holding it whole
    shares: dict[int, int] = {}  # device -> hundredths held as shares
    share_memory: dict[int, int] = {}  # device -> bytes its shares reserve
    for request, gpu_ids in held:
        cpu += request.cpu
        memory += request.memory
        for name, amount in request.custom:
            custom[name] = custom.get(name, 0.0) + amount
        for device in gpu_ids:
            if not 0 <= device < room.gpu:
                return f"gpu {device} is not one of its {room.gpu}"
            if request.share:
                shares[device] = shares.get(device, 0) + request.share
                share_memory[device] = share_memory.get(device, 0) + request.gpu_memory
            else:
                whole[device] = whole.get(device, 0) + 1
    if cpu > room.cpu + EPS:
        return f"cpu: {cpu:g} of {room.cpu:g} booked"
    if memory > room.memory:
        return f"memory: {memory:g} of {room.memory} bytes booked"
    for name, amount in sorted(custom.items()):
        if amount > room.custom.get(name, 0.0) + EPS:
            return f"{name}: {amount:g} of {room.custom.get(name, 0.0):g} booked"
    for device in sorted(whole.keys() | shares.keys()):
        if whole.get(device, 0) + (device in shares) > 1:
            return f"gpu {device} is held by more than one task"
        if shares.get(device, 0) > SHARES:
            return f"gpu {device}: {shares[device]}% of it booked as shares"
        known = room.device_memory(device)
        if known and share_memory.get(device, 0) > known:
            return f"gpu {device}: {share_memory[device]} of its {known} bytes booked by shares"
    return None


class _Ranked:
    """One request's view of a group's states: a heap of (choice, the state, its id) holding each state once, how
    many revived states it took in, and per state id its choice (None: it does not fit there). A state revived while
    still in the heap is not pushed again: the heap stays as small as the states in view, not as the revivals."""

    __slots__ = ("heap", "seen", "choices", "queued")

    def __init__(self) -> None:
        self.heap: list[tuple[tuple, tuple, int]] = []
        self.seen = 0
        self.choices: dict[int, tuple | None] = {}
        self.queued: set[int] = set()


class Group:
    """The workers one kind of job may use, indexed by free room: (free GPUs, free cores, free memory, room).

    Free GPUs count whatever their memory, so a search only narrows the candidates: each one's
    `fits` has the last word.
    """

    def __init__(self, pool: str, constraints: tuple[AnyConstraint, ...], found: Members) -> None:
        self.pool, self.constraints = pool, constraints
        self.found = found  # as the index keeps them (or as the book found them)
        self.members = found.members  # in registration order, for round-robin and reasons
        self.member_set = found.member_set
        self.sorted: list[tuple] | None = None  # the members' room_key, sorted, once a strategy asked for it
        self.cursor = 0
        # The fragmentation-aware strategy's view: members by state id; the order in which states gained
        # members; per request, a heap of (choice, state), how much of that order it has taken in, and the measure's
        # choice per state as far as asked (a state revived again is not looked up by the request's hash once more).
        self.by_state: dict[int, set[int]] | None = None
        self.revived: list[int] = []
        self.ranked: dict[Request, _Ranked] = {}
        # Per state, a heap of positions holding every member (and some that left): its first member is the first
        # registered, found without a scan of a state that a thousand alike workers share.
        self.firsts: dict[int, list[int]] = {}


def room_key(room: WorkerRoom, i: int) -> tuple[int, float, int, int]:
    return (len(room.free_gpu_ids), room.free_cpu, room.free_memory, i)


def rank_key(room: WorkerRoom, i: int, resource: str) -> tuple[float, int]:
    """Orders rooms by how much of a RANKED resource they have free, the most first, then by registration."""
    free = len(room.free_gpu_ids) if resource == "gpu" else room.free_cpu if resource == "cpu" else room.free_memory
    return (-free, i)


def room_keys(rooms: Sequence[WorkerRoom], positions: Iterable[int]) -> list[tuple[int, float, int, int]]:
    """The room_key of each room at `positions`, in one pass."""
    return [(len(rooms[i].free_gpu_ids), rooms[i].free_cpu, rooms[i].free_memory, i) for i in positions]


def rank_keys(rooms: Sequence[WorkerRoom], positions: Iterable[int], resource: str) -> list[tuple[float, int]]:
    """The rank_key of each room at `positions`, in one pass: views of a thousand workers are sorted afresh often."""
    if resource == "gpu":
        return [(-len(rooms[i].free_gpu_ids), i) for i in positions]
    if resource == "cpu":
        return [(-rooms[i].free_cpu, i) for i in positions]
    return [(-rooms[i].free_memory, i) for i in positions]


class Members:
    """The rooms of a pool that match some constraints: positions in registration order, and sorted by room_key.

    The sorted keys may go stale (`unsort`) while many rooms change, and are sorted again when next read: a
    forecast moves hundreds of rooms between passes whose strategy never reads them."""

    def __init__(self, rooms: Sequence[WorkerRoom], members: list[int]) -> None:
        self.rooms, self.members, self.member_set = rooms, members, set(members)
        self._keys = sorted(room_keys(rooms, members))
        self.stale = False
        # How many members have no GPU free; an index keeps it as their rooms change (`CapacityIndex._settle`), so a
        # reason for want of GPUs knows, without a walk of the group, when none has any (and which it names then).
        self.gpuless = bisect_left(self._keys, (1,))

    @classmethod
    def of(cls, rooms: Sequence[WorkerRoom], pool: str, constraints: tuple[AnyConstraint, ...]) -> Members:
        return cls(rooms, [i for i, room in enumerate(rooms)
                           if room.pool == pool and all(c.admits(room) for c in constraints)])

    @property
    def keys(self) -> list[tuple]:
        if self.stale:
            self._keys[:] = sorted(room_keys(self.rooms, self.members))
            self.stale = False
        return self._keys

    def unsort(self) -> None:
        self.stale = True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Members) and (self.members, self.keys, self.gpuless) == (
            other.members, other.keys, other.gpuless)


class KeptGroups(Protocol):
    """Groups kept sorted across passes (scheduling.capacity)."""

    position: Mapping[str, int]
    sharing: Collection[int]  # the rooms with a device held as shares

    def group(self, pool: str, constraints: tuple[AnyConstraint, ...]) -> Members: ...

    def ranked(self, pool: str, constraints: tuple[AnyConstraint, ...], resource: str) -> list[tuple]: ...

    def buckets(self, pool: str, constraints: tuple[AnyConstraint, ...]) -> Mapping[int, set[int]]: ...

    def states(self) -> Mapping[int, int]: ...


# Per fragmentation measure, the state ids of plain rooms by what decides them: kept as long as the measure.
_PLAIN_STATES: WeakKeyDictionary[Fragmentation, dict[tuple, int]] = WeakKeyDictionary()


def plain_states(measure: Fragmentation) -> dict[tuple, int]:
    """The state ids of plain rooms the measure has given, by what decides them (see `stated`)."""
    memo = _PLAIN_STATES.get(measure)
    if memo is None:
        memo = _PLAIN_STATES[measure] = {}
    return memo


def stated(measure: Fragmentation, room: WorkerRoom, memo: dict[tuple, int]) -> int:
    """The room's state id under the measure. A plain room's (no device memory known, no shares, no custom slots)
    follows from its labels and its room_key, so it is looked up in `memo` (the measure's `plain_states`) rather
    than worked out: a forecast states thousands of rooms, most of them alike."""
    if room.gpu_memory or room.gpu_shared or room.gpu_memory_shared or room.free_custom:
        return measure.state(room)
    admitted = measure.admitted_of.get(room.id)  # `admitted`'s own memo, read here: a call less per room
    if admitted is None:
        admitted = measure.admitted(room)
    key = (admitted, len(room.free_gpu_ids), room.free_cpu, room.free_memory)
    state = memo.get(key)
    if state is None:
        state = memo[key] = measure.state(room)
    return state


def _unbucket(by_state: dict[int, set[int]], state: int, i: int) -> None:
    members = by_state[state]
    members.discard(i)
    if not members:
        del by_state[state]


def _share_device(room: WorkerRoom, request: Request, choice: tuple) -> int | None:
    """The first device a share fits on in the state the choice named (None: best fit)."""
    return next((d for d in room.share_devices(request) if _device_state(room, d) == choice[3]), None)


def _device_state(room: WorkerRoom, device: int) -> tuple[int, int]:
    """A device as a fragmentation state names it: (free hundredths, device memory not reserved)."""
    return (SHARES - room.gpu_shared.get(device, 0), room.device_memory(device) - room.gpu_memory_shared.get(device, 0))


class RoomBook:
    def __init__(self, rooms: Sequence[WorkerRoom], measures: Mapping[str, Fragmentation] | None = None,
                 kept: KeptGroups | None = None) -> None:
        """`rooms` are never changed: a room is copied the first time the book takes from it or gives to it.
        `measures`: per pool, the fragmentation the fragmentation-aware strategy minimises there.
        `kept`: the groups of these rooms, sorted, as an index keeps them across passes; else sorted here."""
        self.originals = rooms
        self.rooms = list(rooms)
        self.position = {room.id: i for i, room in enumerate(self.rooms)} if kept is None else kept.position
        self._kept = kept
        self._copied: set[int] = set()
        self._given: set[int] = set()  # rooms given room back (a gang that did not fit whole)
        self._shared: set[int] = set()  # rooms this pass took a share on (giving one back never adds a shared device)
        self.held: dict[int, int] = {}  # room -> the job it is held for (reservation, preemption)
        self.measures = dict(measures or {})
        self._groups: dict[tuple[str, tuple[AnyConstraint, ...]], Group] = {}
        self._groups_of_room: dict[int, list[Group]] = {}  # found when a room first changes, until a group is added
        self._keyed = False  # whether a strategy asked for a group's sorted keys: only then are they kept in order
        self._states: dict[int, int] = {}  # room -> its state id, for rooms stated in this pass
        self._kept_states: Mapping[int, int] = {} if kept is None else kept.states()  # as the index states them
        self._device_for: tuple[int, Request, int] | None = None  # the device the last choice picked for a share
        self._plain: dict[str, dict[tuple, int]] = {}  # per pool, its measure's plain_states

    def group(self, pool: str, constraints: tuple[AnyConstraint, ...], start_after: str | None = None) -> Group:
        """The workers of a pool that match the constraints; round-robin turns start after `start_after`."""
        key = (pool, constraints)
        if key not in self._groups:
            found = Members.of(self.rooms, pool, constraints) if self._kept is None else \
                self._kept.group(pool, constraints)
            members = found.members
            group = self._groups[key] = Group(pool, constraints, found)
            self._groups_of_room.clear()
            last = self.position.get(start_after) if start_after else None
            if last in group.member_set:
                group.cursor = (members.index(last) + 1) % len(members)
        return self._groups[key]

    def sorted_keys(self, group: Group) -> list[tuple]:
        """The group's room keys (none held), sorted: built when a strategy first asks (the fragmentation-aware one
        never does), from the kept order with the rooms this pass changed moved in it; then kept in order as rooms
        change."""
        if group.sorted is None:
            self._keyed = True
            found = group.found
            if self._kept is None:
                index = sorted(room_keys(self.rooms, found.members))
            else:
                index = list(found.keys)
                for i in self._copied.intersection(found.member_set):  # changed in this pass: moved in the order
                    index.pop(bisect_left(index, room_key(self.originals[i], i)))
                    insort(index, room_key(self.rooms[i], i))
            group.sorted = [entry for entry in index if entry[3] not in self.held] if self.held else index
        return group.sorted

    def most_free(self, group: Group, resource: str) -> int:
        """The member with the most of a RANKED resource free now, the first registered among equals."""
        if self._kept is None:
            return min(group.members, key=lambda i: rank_key(self.rooms[i], i, resource))
        if resource == "gpu":
            changed = self._copied.intersection(group.member_set)
            rooms, originals = self.rooms, self.originals
            if not any([rooms[i].free_gpu_ids for i in changed]) and group.found.gpuless + len(
                    [i for i in changed if originals[i].free_gpu_ids]) == len(group.members):
                # None has a GPU free (those this pass changed, as it left them; the others, as the index counts
                # them): all are equal, and the first registered is the one the ranked view would give.
                return group.members[0]
        unchanged = next((entry for entry in self._kept.ranked(group.pool, group.constraints, resource)
                          if entry[1] not in self._copied), None)
        changed = rank_keys(self.rooms, self._copied.intersection(group.member_set), resource)
        return min([*changed, unchanged] if unchanged else changed)[1]

    def shared_devices(self, group: Group) -> int:
        """How many of the members' devices hold shares now: looked for only on the rooms that have any, as the index
        keeps them, and those this pass took a share on: of the few hundred rooms a pass copies, only these may
        have come to hold shares."""
        if self._kept is None:
            sharing = group.members
        else:
            sharing = group.member_set.intersection(self._kept.sharing) | group.member_set.intersection(self._shared)
        return sum([len(self.rooms[i].gpu_shared) for i in sharing])

    def place(self, group: Group, request: Request, strategy: Strategy,
              exclude: Collection[int] = ()) -> tuple[int, list[int]] | None:
        """One task placed: the room the strategy gives it and the devices taken there (`placing`'s step)."""
        return next(self.placing(group, request, strategy, exclude))

    def placing(self, group: Group, request: Request, strategy: Strategy,
                exclude: Collection[int] = ()) -> Iterator[tuple[int, list[int]] | None]:
        """Tasks of one request placed one at a time in a group: each step chooses the room the strategy gives the
        task, takes its room there and answers (the room, the devices taken), or None when none fits now (taking
        nothing). What a choice looks up is found once for a run of alike tasks (some thousand in a pass)."""
        if strategy is not FRAGMENTATION_AWARE or group.pool not in self.measures or exclude:
            choose, take = self._chooser(group, strategy), self.take
            while True:
                i = choose(group, request, exclude)
                yield None if i is None else (i, take(i, request))
        # The least fragmenting: each request keeps a heap of the group's states by its choice there, taking in the
        # states that gained members since it last looked; states that lost all their members drop off its top.
        measure = self.measures[group.pool]
        by_state = self._by_state(group, measure)
        ranked = group.ranked.get(request)
        if ranked is None:
            ranked = group.ranked[request] = _Ranked()
        heap, queued, choices, revived = ranked.heap, ranked.queued, ranked.choices, group.revived
        rooms, share, take, firsts_of = self.rooms, request.share, self._take, group.firsts
        while True:
            if ranked.seen < len(revived):
                for state in revived[ranked.seen:]:
                    if state in queued or state not in by_state:
                        continue
                    if state not in choices:
                        choices[state] = measure.choice(state, request)
                    choice = choices[state]
                    if choice is not None:
                        # Equal choices go to the smaller state (fewer admitted constraint sets, cores, memory, ...):
                        # a rule of the states alone, so a measure kept across passes decides as a fresh one.
                        heappush(heap, (choice, measure.states[state], state))
                        queued.add(state)
                ranked.seen = len(revived)
            while heap:
                choice, _, state = heap[0]
                members = by_state.get(state)
                if members:  # its first registered member: a heap of positions holding every member (and some gone)
                    firsts = firsts_of.get(state)
                    if firsts is None:
                        firsts = firsts_of[state] = sorted(members)
                    while firsts[0] not in members:
                        heappop(firsts)
                    i = firsts[0]
                    if rooms[i].fits(request):
                        break
                heappop(heap)
                queued.discard(state)
            else:
                yield None
                continue
            yield i, take(i, request, _share_device(rooms[i], request, choice) if share else None)

    def _chooser(self, group: Group, strategy: Strategy) -> Callable[[Group, Request, Collection[int]], int | None]:
        """How the strategy chooses a room in the group (the fragmentation-aware one here only with rooms excluded)."""
        if strategy is FRAGMENTATION_AWARE and group.pool in self.measures:
            return self._least_fragmenting_but
        if strategy is ROUND_ROBIN:
            return self._next_in_turn
        if strategy is DISPERSED:
            return self._emptiest
        return self._fullest

    def take(self, i: int, request: Request) -> list[int]:
        """Reserve room on `i`; a share goes to the device the strategy chose for it, if it chose one."""
        device = self._device_for[2] if self._device_for and self._device_for[:2] == (i, request) else None
        self._device_for = None
        return self._take(i, request, device)

    def _take(self, i: int, request: Request, device: int | None) -> list[int]:
        """Reserve room on `i`; a share goes to `device` if given, else best fit."""
        old = room_key(self.rooms[i], i) if self._keyed else None
        if request.share:
            self._shared.add(i)
        gpu_ids = (self.rooms[i] if i in self._copied else self._own(i)).take(request, device)
        self._moved(i, old)
        return gpu_ids

    def give(self, i: int, request: Request, gpu_ids: Sequence[int]) -> None:
        old = room_key(self.rooms[i], i) if self._keyed else None
        self._given.add(i)
        self._own(i).give(request, gpu_ids)
        self._moved(i, old)

    def taken(self) -> dict[int, WorkerRoom]:
        """The book's own rooms that were only taken from, by position: each is its original with the takes made on
        it, in order, as holding those tasks there gives (those given room back keep a rollback's rounding)."""
        given = self._given
        return {i: self.rooms[i] for i in self._copied if i not in given}

    def _own(self, i: int) -> WorkerRoom:
        """The book's own copy of room `i`, made the first time it changes."""
        if i not in self._copied:
            if i in self._kept_states:  # its state until now, as the index has it
                self._states.setdefault(i, self._kept_states[i])
            self.rooms[i] = self.rooms[i].copy()
            self._copied.add(i)
        return self.rooms[i]

    def hold(self, i: int, job_id: int) -> None:
        """Keep everyone else off this room for the rest of the pass."""
        if i in self.held:
            return
        key = room_key(self.rooms[i], i) if self._keyed else None
        for group in self._groups_of(i):
            if group.sorted is not None:
                group.sorted.pop(bisect_left(group.sorted, key))
            if group.by_state is not None:
                _unbucket(group.by_state, self._state(i), i)
        self.held[i] = job_id

    def _moved(self, i: int, old: tuple | None) -> None:
        """Room `i` changed: its state restated, and it moves in its groups' views (`old`: its sorted key before, kept
        only once a strategy sorts)."""
        if i in self.held:
            return
        room = self.rooms[i]
        new = room_key(room, i) if self._keyed else None
        old_state = new_state = self._states[i] if i in self._states else self._kept_states.get(i)
        measure = self.measures.get(room.pool) if old_state is not None else None
        if measure is not None:
            memo = self._plain.get(room.pool)
            if memo is None:
                memo = self._plain[room.pool] = plain_states(measure)
            new_state = self._states[i] = stated(measure, room, memo)
        groups = self._groups_of_room.get(i)
        for group in self._groups_of(i) if groups is None else groups:
            if group.sorted is not None:
                group.sorted.pop(bisect_left(group.sorted, old))
                insort(group.sorted, new)
            by_state = group.by_state
            if by_state is not None:  # out of its old state's bucket and into its new one's, written out: a pass
                # moves a room for each task it places (some ten thousand), two calls each where written apart
                members = by_state[old_state]
                members.discard(i)
                if not members:
                    del by_state[old_state]
                members = by_state.get(new_state)
                if members is None:
                    members = by_state[new_state] = set()
                if not members:  # a state that gains members again: each request's heap takes it in
                    group.revived.append(new_state)
                members.add(i)
                firsts = group.firsts.get(new_state)
                if firsts is not None:
                    heappush(firsts, i)

    def _state(self, i: int) -> int | None:
        """Room `i`'s state id now, or None when nothing stated it."""
        return self._states[i] if i in self._states else self._kept_states.get(i)

    def _by_state(self, group: Group, measure: Fragmentation) -> dict[int, set[int]]:
        """The group's members (none held) by state id, bucketed when a choice first asks."""
        if group.by_state is None:
            group.by_state = self._bucketed(group, measure)
            group.revived = list(group.by_state)
        return group.by_state

    def _bucketed(self, group: Group, measure: Fragmentation) -> dict[int, set[int]]:
        """The group's members (none held) by state id: the index's buckets, with the rooms this pass changed
        restated."""
        plain = plain_states(measure)
        if self._kept is None:
            by_state: dict[int, set[int]] = {}
            for *_, i in self.sorted_keys(group):
                if i not in self._states:
                    self._states[i] = stated(measure, self.rooms[i], plain)
                by_state.setdefault(self._states[i], set()).add(i)
            return by_state
        kept = self._kept.buckets(group.pool, group.constraints)
        by_state = {state: set(members) for state, members in kept.items()}
        for i in group.member_set.intersection(self._copied.union(self.held)):
            _unbucket(by_state, self._kept_states[i], i)
            if i not in self.held:
                if i not in self._states:
                    self._states[i] = stated(measure, self.rooms[i], plain)
                by_state.setdefault(self._states[i], set()).add(i)
        return by_state

    def _groups_of(self, i: int) -> list[Group]:
        groups = self._groups_of_room.get(i)
        if groups is None:
            groups = self._groups_of_room[i] = [group for group in self._groups.values() if i in group.member_set]
        return groups

    def _least_fragmenting_but(self, group: Group, request: Request, exclude: Collection[int]) -> int | None:
        """The worker (and, for a share, the device) whose fragmentation grows least, but for those excluded; ties
        toward best fit. Without any excluded, `placing` keeps each request's heap of the states instead."""
        measure = self.measures[group.pool]
        by_state = self._by_state(group, measure)
        ranked = sorted((choice, measure.states[state], state) for state in by_state
                        if (choice := measure.choice(state, request)) is not None)
        return next((i for _, _, state in ranked for i in sorted(by_state[state].difference(exclude))
                     if self._fits(i, request, measure.choice(state, request))), None)

    def _fits(self, i: int, request: Request, choice: tuple) -> bool:
        """Whether room `i` holds the request; for a share, remember the device the choice named."""
        room = self.rooms[i]
        if not room.fits(request):
            return False
        if request.share:
            device = _share_device(room, request, choice)
            self._device_for = (i, request, device) if device is not None else None
        return True

    def _fullest(self, group: Group, request: Request, exclude: Collection[int]) -> int | None:
        """Best fit: the fewest free GPUs that suffice, then the fewest free cores."""
        index, gpus = self.sorted_keys(group), request.whole
        while True:
            start = bisect_left(index, (gpus, request.cpu - EPS))
            if start == len(index):
                return None
            if index[start][0] != gpus:  # no room at this GPU level: go up to the next one present
                gpus = index[start][0]
                continue
            end = bisect_left(index, (gpus + 1,))
            for _, _, _, i in index[start:end]:
                if i not in exclude and self.rooms[i].fits(request):
                    return i
            if end == len(index):
                return None
            gpus = index[end][0]

    def _emptiest(self, group: Group, request: Request, exclude: Collection[int]) -> int | None:
        """Worst fit: the most free GPUs, then the most free cores."""
        index = self.sorted_keys(group)
        position = len(index) - 1
        while position >= 0:
            gpus = index[position][0]
            if gpus < request.whole:
                return None
            level_start = bisect_left(index, (gpus,))
            for p in range(position, level_start - 1, -1):
                free_cpu, i = index[p][1], index[p][3]
                if free_cpu < request.cpu - EPS:
                    break
                if i not in exclude and self.rooms[i].fits(request):
                    return i
            position = level_start - 1
        return None

    def _next_in_turn(self, group: Group, request: Request, exclude: Collection[int]) -> int | None:
        members = group.members
        for step in range(len(members)):
            i = members[(group.cursor + step) % len(members)]
            if i not in self.held and i not in exclude and self.rooms[i].fits(request):
                group.cursor = (group.cursor + step + 1) % len(members)
                return i
        return None
