"""The run configuration: the schema (typed, validated sections), loading YAML with key=value
overrides, the arguments every entry point reads, and the README's reference table. What each
component is built from is cluster/plan/'s."""
