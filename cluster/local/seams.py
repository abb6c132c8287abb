"""In-process implementations of the seams of replay/contracts.py, beside the Ray ones in
cluster/hosts/ray_seams.py: the same collectors, replay and learner connected by plain calls."""

from __future__ import annotations

from replay.contracts import PollWeights, Weights


class WeightBoard:
    """PublishWeights for collectors in this process: keeps the newest version and hands it to
    each reader once (what WeightPublisher and each collector's WeightInbox do across Ray)."""

    def __init__(self):
        self.latest: Weights | None = None

    def publish(self, weights: Weights) -> None:
        """Make `weights` the newest version."""
        self.latest = weights

    def reader(self) -> PollWeights:
        """A PollWeights for one collector: the newest version it has not seen, else None."""
        seen = -1

        def poll() -> Weights | None:
            nonlocal seen
            weights = self.latest
            if weights is None or weights.version <= seen:
                return None
            seen = weights.version
            return weights

        return poll
