"""The algorithm registry and its plug-ins (learner/algorithms/registry.py)."""
