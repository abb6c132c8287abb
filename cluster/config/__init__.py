"""The run configuration: the schema (typed, validated sections), loading YAML with key=value
overrides, the README's reference table, and the settings each component is built from."""
