"""The samples-per-insert rate limiter (Reverb's SampleToInsertRatio), as plain arithmetic.

The replay ratio is samples trained per transition inserted. Holding it is what keeps learning
per env step the same whether the collectors or the learner happen to be faster. The limiter
tracks `diff = inserts * samples_per_insert - samples` and keeps it inside
`[min_size * spi - error_buffer * spi, min_size * spi + error_buffer * spi]`: inserts stop when
collectors run ahead, samples stop when the learner runs ahead, and nothing is sampled before
`min_size` transitions exist (nor are inserts ever stopped while fewer do).
`samples_per_insert == 0` turns the limiter off (only `min_size` still gates sampling).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplesPerInsertLimiter:
    """Decides how many inserts or samples the counters allow right now."""

    samples_per_insert: float
    min_size: int
    error_buffer: int

    @property
    def enabled(self) -> bool:
        """False when the ratio is not limited at all."""
        return self.samples_per_insert > 0

    def _diff(self, inserted: int, sampled: int) -> float:
        return inserted * self.samples_per_insert - sampled

    def insert_room(self, inserted: int, sampled: int, size: int) -> float:
        """How many more transitions may be inserted now (infinite when disabled), given that
        replay holds `size`: never less than what it lacks of `min_size`. Below its minimum
        nothing may be sampled, so a limit on inserts there could only hang the run; and replay
        can be below it with the room used up, when inserts overwrote a full shard while another
        was still filling, or when a restarted shard came back empty."""
        if not self.enabled:
            return float("inf")
        max_diff = (self.min_size + self.error_buffer) * self.samples_per_insert
        room = (max_diff - self._diff(inserted, sampled)) / self.samples_per_insert
        return max(room, float(self.min_size - size))

    def can_sample(self, size: int, inserted: int, sampled: int, count: int) -> bool:
        """Whether `count` more samples may be drawn now."""
        if size < self.min_size:
            return False
        if not self.enabled:
            return True
        min_diff = (self.min_size - self.error_buffer) * self.samples_per_insert
        return self._diff(inserted, sampled) - count >= min_diff
