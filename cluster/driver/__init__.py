"""The driver of a run, whatever runtime hosts its parts: the run loop and its collaborators
(evaluations, checkpoints, revival, the run's end), metrics, TensorBoard, the progress line and
signals. It imports no Ray: cluster/ray_runtime/ and cluster/local/ host the parts."""
