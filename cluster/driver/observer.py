"""What watches a run from the driver: the bench's recorders and the Python API's callbacks
(hooks that TrainingRun calls; each does nothing unless overridden)."""

from __future__ import annotations


class RunObserver:
    """Watches a run from the driver (bench recorders, the Python API); hooks do nothing by default.
    Each hook gets the TrainingRun (cluster/driver/run.py, which imports this module)."""

    def after_poll(self, run) -> None:
        """Called after every poll of the actors' counters (a few times a second)."""

    def before_finish(self, run) -> None:
        """Called once learning has ended, before the collectors stop and the final files."""

    def after_epoch(self, run, epoch: int, scalars: dict[str, float]) -> None:
        """Called after each epoch's metrics were recorded (`scalars`: its TensorBoard scalars)."""

    def after_evaluation(self, run, result: dict) -> None:
        """Called after each finished evaluation was recorded (the run's final one too; `result`:
        the evaluator's, its `mean`, `min` and weights `version`)."""
