"""The `raypex` command: the CLI that dispatches, one module per subcommand (train, evaluate,
bench) and the helpers they share (usage)."""
