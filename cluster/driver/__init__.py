"""The driver of a run: connecting to Ray, placing and starting every actor (wiring), the run loop
and its collaborators, checkpoints, metrics, TensorBoard and the progress line. Never on the data's
hot path."""
