"""A run's plan: the settings each component is built from and the topology that connects them,
derived from the config (which knows nothing of the components' packages)."""
