"""The run's parts in one process, without Ray: the lockstep replica (`python -m
cluster.local.lockstep`)."""
