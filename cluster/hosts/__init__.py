"""The Ray actor shells that host the plain components (collector, shard, learner, evaluator) and
the Ray side of the three messages between them (ray_seams)."""
