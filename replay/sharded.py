"""ShardedReplay: every collector's shard, in the process where the learner trains.

Bytes cross processes once, when a collector's chunk is inserted; sampling is an index draw here
and a gather where the columns live (the learner's host memory, or its GPU: replay/columns.py).
Each field is one column allocated for all shards at once, shard i owning rows
[i * rows, (i + 1) * rows), so a drawn batch is one gather per field whichever shards its
transitions come from.

Draws are exact across shards, transition by transition: uniform replay draws each transition
uniformly from all the transitions of every shard (a shard is hit in proportion to its size);
prioritized replay draws each in proportion to its mass among the masses of every shard, with
the importance weights of one buffer holding them all (replay/priorities.py). New |TD errors|
land here, in the same process, with no round trip.

Prior data (replay.prior, a dataset's one-step transitions) lives in one more block of the
columns, after the shards': filled once when the replay is built, never overwritten, counted apart
from the shards (it is nobody's insert), and `prior_fraction` of every uniform draw comes from it
(`prior_count`), the rest from the shards as above.

One samples-per-insert limiter (replay/rate_limit.py) holds the replay ratio for the whole
replay: a collector may insert while its share of the insert room is positive, the learner may
draw while the limiter allows the samples. Inserts (a Ray thread of the learner's actor) and draws
(the update loop) take `lock`; both hold it for bookkeeping and the issuing of copies, never for
an update.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from raypex.replay.columns import ColumnBackend, HostColumns
from raypex.replay.contracts import Chunk, FrameChunk, ShardStats
from raypex.replay.frames import frame_bookkeeping, stack_index
from raypex.replay.group_draw import GroupFigures, OtherLearners, ReplayShare
from raypex.replay.priorities import BetaSchedule, PrioritySettings, importance_weights
from raypex.replay.rate_limit import SamplesPerInsertLimiter
from raypex.replay.ring import RingStorage
from raypex.replay.shard import ReplayShard, StorageSpec, build_storage
from raypex.replay.sum_tree import SumTree


def prior_count(batch: int, fraction: float) -> int:
    """How many of a draw of `batch` transitions come from the prior data: at least one, and at
    least one from the shards."""
    return min(batch - 1, max(1, round(batch * fraction)))


@dataclass(frozen=True)
class SampledKeys:
    """Which shard, slot and stamp each drawn transition came from: what its priority update names."""

    shard: np.ndarray  # [G, B] int64
    row: np.ndarray  # [G, B] int64, the shard's own slot
    stamp: np.ndarray  # [G, B] int64


@dataclass(frozen=True)
class Draw:
    """One update's sample: the indices its fields are gathered by (GATHER's keys, rows of the
    whole replay's columns, [G, B, ...]), importance weights [G, B] and keys (prioritized only)."""

    index: dict[str, np.ndarray]
    weight: np.ndarray | None = None
    keys: SampledKeys | None = None


class ShardedReplay:
    """The replay of a run: one shard per collector, one limiter, exact draws across shards."""

    def __init__(self, num_shards: int, spec: StorageSpec, limiter: SamplesPerInsertLimiter, seed: int,
                 priorities: PrioritySettings | None = None, beta: BetaSchedule | None = None,
                 backend: ColumnBackend | None = None, prior: dict[str, np.ndarray] | None = None,
                 prior_fraction: float = 0.5):
        if (priorities is None) != (beta is None):
            raise ValueError("prioritized replay needs both priority settings and a beta schedule")
        if prior is not None and (priorities is not None or spec.frame_stack or spec.sequence_length):
            raise ValueError("prior data is drawn uniformly beside whole transitions: not with priorities, frames or "
                             "sequences")
        self.backend = backend or HostColumns()
        self.spec = spec
        self.limiter = limiter
        self.beta_schedule = beta
        self.rng = np.random.default_rng(seed)
        self.lock = threading.RLock()
        self._insert_seen = threading.Condition(self.lock)
        rows = spec.rows
        self.rows_per_shard = rows  # the slots a shard draws from
        self.column_rows = spec.column_rows()  # each column's rows per shard
        blocks = num_shards + (prior is not None)
        self.columns = {name: self.backend.allocate((blocks * self.column_rows[name], *shape), dtype)
                        for name, (shape, dtype) in spec.layout().items()}
        # Prioritized: one sum tree and one stamp array over every shard's slots (shard i's are
        # leaves i * rows ...), so a draw is one descent and a learner update one tree update.
        self.tree = SumTree(num_shards * rows) if priorities is not None else None
        self.stamps = np.full(num_shards * rows, -1, np.int64) if priorities is not None else None
        # Frames: every shard's envs' bookkeeping in one [shards x envs, slots] array each, so a
        # draw's stack indices are computed in one pass whichever shards it hits.
        envs = spec.num_envs
        self.bookkeeping = frame_bookkeeping(num_shards * envs, rows // envs) if spec.frame_stack else None
        self.shards = [ReplayShard(i, build_storage(spec, self.backend, self._columns_of(i), self._bookkeeping_of(i)),
                                   priorities, self._priorities_of(i))
                       for i in range(num_shards)]
        # a learner of a group: the others' counts as last gathered (learner/group_feed.py), for the insert room
        self.others: OtherLearners | None = None
        self._changes = 0  # inserts and restores so far: the uniform draw's row list is rebuilt after one
        self._sampleable: tuple[int, np.ndarray] | None = None
        self.gather_plan = self.shards[0].storage.GATHER  # training field -> (column, index key)
        self.prior: RingStorage | None = None  # the prior data's block, after the shards'
        self.prior_fraction = prior_fraction
        if prior is not None:
            if len(prior["return"]) > rows:
                raise ValueError(f"prior data of {len(prior['return'])} transitions does not fit a block of {rows}")
            self.prior = RingStorage(rows, spec.layout(), self.backend, self._columns_of(num_shards))
            self.prior.add(prior)

    def _columns_of(self, shard: int) -> dict:
        """Shard `shard`'s rows of every column."""
        return {name: column[shard * self.column_rows[name]:(shard + 1) * self.column_rows[name]]
                for name, column in self.columns.items()}

    def _priorities_of(self, shard: int) -> tuple | None:
        """Shard `shard`'s window of the shared sum tree and stamps (None: uniform replay)."""
        if self.tree is None:
            return None
        rows = self.rows_per_shard
        return self.tree, shard * rows, self.stamps[shard * rows:(shard + 1) * rows]

    def _bookkeeping_of(self, shard: int) -> dict | None:
        if self.bookkeeping is None:
            return None
        envs = self.spec.num_envs
        return {name: array[shard * envs:(shard + 1) * envs] for name, array in self.bookkeeping.items()}

    @property
    def prioritized(self) -> bool:
        """Whether draws follow priorities."""
        return self.beta_schedule is not None

    def count_lost_writes(self) -> None:
        """This process replaces a learner that died with the replay: every shard reports the
        transitions its collector sent that died with it (ReplayShard.lost_writes)."""
        with self.lock:
            for shard in self.shards:
                shard.counts_lost_writes = True

    def writer_left(self, shard: int, env_steps: int) -> None:
        """`shard`'s collector left with its node after counting `env_steps` (ReplayShard.writer_left)."""
        with self.lock:
            self.shards[shard].writer_left(env_steps)

    # -- inserts ------------------------------------------------------------------------------
    def attach_writer(self, shard: int) -> int:
        """A collector process starts writing to `shard`; the env steps to count on from."""
        with self.lock:
            return self.shards[shard].attach_writer()

    def add(self, shard: int, chunk: Chunk | FrameChunk, writer_env_steps: int | None = None) -> float:
        """Store a chunk in `shard`; returns that collector's insert room now."""
        with self.lock:
            self.backend.before_writes()
            self.shards[shard].add(chunk, writer_env_steps)
            self._changes += 1
            self.backend.after_writes()
            self._insert_seen.notify_all()
            return self._insert_room()

    def wait_for_insert(self, count: int, timeout_s: float) -> bool:
        """Whether `count` transitions may be drawn, waiting up to `timeout_s` for an insert
        that allows it (the learner's wait for data)."""
        with self._insert_seen:
            if not self.can_sample(count):
                self._insert_seen.wait(timeout_s)
            return self.can_sample(count)

    def insert_room(self) -> float:
        """How many more transitions one collector may insert now: an equal share of the
        limiter's room, so that all collectors together never insert more than the room. In a
        group of learners (`others` set), the room and the collectors are the group's."""
        with self.lock:
            return self._insert_room()

    def _insert_room(self) -> float:
        others = self.others or OtherLearners(0, 0, 0, 0)
        room = self.limiter.insert_room(self.inserted + others.inserted, self.sampled + others.sampled,
                                        self.steps_held + others.held)
        return room / (len(self.shards) + others.shards)

    # -- counters -----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Transitions that can be drawn now, in all shards."""
        return sum(shard.size for shard in self.shards)

    @property
    def steps_held(self) -> int:
        """Env steps held now, in all shards (what replay.min_size counts)."""
        return sum(shard.steps_held for shard in self.shards)

    @property
    def inserted(self) -> int:
        """Env steps inserted into every shard (restored ones included)."""
        return sum(shard.inserted for shard in self.shards)

    @property
    def sampled(self) -> int:
        """Transitions drawn from every shard (restored counts included)."""
        return sum(shard.sampled for shard in self.shards)

    @property
    def beta(self) -> float | None:
        """The importance exponent now (None for uniform replay)."""
        return None if self.beta_schedule is None else self.beta_schedule.at(self.sampled)

    def can_sample(self, count: int) -> bool:
        """Whether `count` more slots (transitions or sequences) may be drawn under the limiter,
        which counts env steps: a sequence is its length's worth of samples."""
        with self.lock:
            return self.size > 0 and self.limiter.can_sample(self.steps_held, self.inserted, self.sampled,
                                                             count * self.spec.samples_per_draw)

    # -- draws --------------------------------------------------------------------------------
    def share(self) -> ReplayShare:
        """What this replay can be drawn from now, for a group of learners' split of a batch
        (replay/group_draw.py)."""
        with self.lock:
            if self.prioritized:
                return ReplayShare(self.tree.total, self.size, self.tree.min_positive, self.sampled)
            return ReplayShare(float(self.size), self.size, float("inf"), self.sampled)

    def draw(self, groups: int, count: int, group: GroupFigures | None = None) -> Draw:
        """`groups` micro-batches of `count` transitions each (callers check `can_sample` first).
        With `group`, this replay is one learner's part of a group's (replay/group_draw.py):
        importance weights and beta are those of one replay holding every learner's shards."""
        with self.lock:
            n = groups * count
            drawn_before = self.sampled if group is None else group.sampled  # what beta is at for this draw
            from_prior = prior_count(n, self.prior_fraction) if self.prior is not None else 0
            if self.prioritized:
                shard, row, mass = self._draw_by_priority(n)
            else:
                shard, row = self._draw_uniform(n - from_prior)
            for i, hits in enumerate(np.bincount(shard, minlength=len(self.shards))):
                self.shards[i].sampled += int(hits) * self.spec.samples_per_draw
            if from_prior:  # the prior block's rows, mixed in at random places of the draw
                shard = np.concatenate([shard, np.full(from_prior, len(self.shards))])
                row = np.concatenate([row, self.rng.integers(0, self.prior.size, from_prior)])
                mixed = self.rng.permutation(n)
                shard, row = shard[mixed], row[mixed]
            index = {key: value.reshape(groups, count, *value.shape[1:])
                     for key, value in self._index(shard, row).items()}
            if not self.prioritized:
                return Draw(index)
            total, smallest, size = ((self.tree.total, self.tree.min_positive, self.size) if group is None
                                     else (group.mass, group.min_positive, group.size))
            beta = self.beta_schedule.at(drawn_before)
            weight = importance_weights(mass / total, smallest / total, size, beta).astype(np.float32)
            stamps = self.stamps[shard * self.rows_per_shard + row]
            for i in np.unique(shard):
                self.shards[i].weight_min = min(self.shards[i].weight_min, float(weight[shard == i].min()))
            keys = SampledKeys(shard.reshape(groups, count), row.reshape(groups, count), stamps.reshape(groups, count))
            return Draw(index, weight.reshape(groups, count), keys)

    def _index(self, shard: np.ndarray, row: np.ndarray) -> dict[str, np.ndarray]:
        """Gather indices of the drawn slots, rows of the whole replay's columns."""
        if self.spec.sequence_length:
            return self._sequence_index(shard, row)
        rows = shard * self.rows_per_shard + row
        if self.bookkeeping is None:
            return {"row": rows}
        return stack_index(rows, self.bookkeeping["frame_step"], self.bookkeeping["next_offset"], self.spec.frame_stack,
                           bool(self.spec.obs_parts))

    def _sequence_index(self, shard: np.ndarray, row: np.ndarray) -> dict[str, np.ndarray]:
        """Each drawn sequence's state row and its steps' rows [N, length], in the whole replay's columns."""
        index = {"row": shard * self.rows_per_shard + row,
                 "steps": np.empty((len(row), self.spec.sequence_length), np.int64)}
        step_rows = self.column_rows["action"]  # a step column's rows per shard
        for i in np.unique(shard):
            hit = shard == i
            index["steps"][hit] = self.shards[i].storage.index(row[hit])["steps"] + i * step_rows
        return index

    def _draw_uniform(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if self.bookkeeping is None and not self.spec.sequence_length:  # a ring's sampleable rows are 0 .. size-1 of each shard
            sizes = np.array([shard.size for shard in self.shards], np.int64)
            ends = np.cumsum(sizes)
            position = self.rng.integers(0, ends[-1], size=n)
            shard = np.searchsorted(ends, position, side="right")
            return shard, position - (ends[shard] - sizes[shard])
        if self._sampleable is None or self._sampleable[0] != self._changes:
            self._sampleable = (self._changes, np.concatenate(
                [i * self.rows_per_shard + s.storage.sampleable_rows() for i, s in enumerate(self.shards)]))
        rows = self._sampleable[1][self.rng.integers(0, len(self._sampleable[1]), size=n)]
        return np.divmod(rows, self.rows_per_shard)

    def _draw_by_priority(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shard, row, mass) of `n` slots drawn in proportion to their masses."""
        total = self.tree.total
        slot = self.tree.find(np.minimum(self.rng.random(n) * total, np.nextafter(total, 0.0)))
        shard, row = np.divmod(slot, self.rows_per_shard)
        return shard, row, self.tree.get(slot)

    def gather(self, draw: Draw) -> dict[str, np.ndarray]:
        """The training fields of `draw`, read from the columns to host arrays [G, B, ...]
        (the CPU learner's batch; `weight` added under prioritized replay)."""
        with self.lock:
            batch = {field: self.backend.read(self.columns[column], (draw.index[key],))
                     for field, (column, key) in self.gather_plan.items()}
        if draw.weight is not None:
            batch["weight"] = draw.weight
        return batch

    def random_index(self, groups: int, count: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Indices shaped like a Draw's, anywhere in the columns (warm-up, capture, the bench's
        reference that draws nothing)."""
        rows = self.rows_per_shard * len(self.shards)
        index = {"row": rng.integers(0, rows, (groups, count))}
        if self.spec.sequence_length:
            steps = self.column_rows["action"] * len(self.shards)
            index["steps"] = rng.integers(0, steps, (groups, count, self.spec.sequence_length))
        if self.spec.obs_parts:
            for key in ("obs_frame", "next_frame"):
                index[key] = rng.integers(0, rows, (groups, count))
        elif self.spec.frame_stack:
            for key in ("obs_frames", "next_frames"):
                index[key] = rng.integers(0, rows, (groups, count, self.spec.frame_stack))
        return index

    # -- priorities ---------------------------------------------------------------------------
    def update_priorities(self, keys: SampledKeys, td_abs: np.ndarray) -> int:
        """New |TD errors| of drawn transitions; those whose slot holds another transition since
        are dropped. Returns how many were applied."""
        shard = keys.shard.reshape(-1)
        slot = shard * self.rows_per_shard + keys.row.reshape(-1)
        td_abs = np.asarray(td_abs).reshape(-1)
        with self.lock:
            current = self.stamps[slot] == keys.stamp.reshape(-1)
            masses = self.shards[0].priorities.mass(td_abs[current])
            if len(masses):
                self.tree.update(slot[current], masses)
            applied = np.bincount(shard[current], minlength=len(self.shards))
            drawn = np.bincount(shard, minlength=len(self.shards))
            largest = np.zeros(len(self.shards))
            np.maximum.at(largest, shard[current], masses)
            for i in np.flatnonzero(drawn):
                index = self.shards[i].priorities
                index.updates_applied += int(applied[i])
                index.updates_dropped += int(drawn[i] - applied[i])
                index.max_mass = max(index.max_mass, float(largest[i]))
        return int(applied.sum())

    # -- the driver's view, checkpoints -------------------------------------------------------
    def stats(self) -> list[ShardStats]:
        """Every shard's counters and memory figures."""
        with self.lock:
            return [shard.stats() for shard in self.shards]

    def get_state(self, shard: int) -> dict:
        """One shard's replay checkpoint (inserts and draws wait while it is read)."""
        with self.lock:
            return self.shards[shard].get_state()

    def set_state(self, shard: int, state: dict) -> None:
        """Restore one shard from `get_state` output."""
        with self.lock:
            self.backend.before_writes()
            self.shards[shard].set_state(state)
            self._changes += 1
            self.backend.after_writes()
