"""`raypex configs` (the shipped configs, one line each) and `raypex config show [CONFIG] [key=value ...]`
(every key of the resolved config with its value, its default where it differs, and its meaning)."""

from __future__ import annotations

import argparse

from raypex.cluster.config.arguments import UsageError, split_positional
from raypex.cluster.config.loading import ConfigError, load_config
from raypex.cluster.config.shipped import shipped_configs, summary_line


def run_configs(args: argparse.Namespace) -> int:
    """Print each shipped config: its name (what `raypex train NAME` takes), env id and purpose."""
    configs = shipped_configs()
    if not configs:
        raise UsageError("no shipped configs are installed (the raypex.configs package is missing)")
    width = max(map(len, configs))
    for name, path in configs.items():
        try:
            env_id = load_config(path, []).env.id
        except ConfigError as err:
            raise UsageError(str(err)) from None
        print(f"{name:<{width}}  {env_id:<20}  {summary_line(path)}")
    print(f"\n(in {next(iter(configs.values())).parent}; `raypex config show NAME` prints every key)")
    return 0


def run_config_show(args: argparse.Namespace) -> int:
    """Print the resolved config of CONFIG (default: the schema's defaults, the CartPole config)
    with overrides applied, key by key."""
    from raypex.cluster.config.reference import config_listing

    path, overrides = split_positional(args.args)
    try:
        config = load_config(path, overrides)
    except ConfigError as err:
        raise UsageError(str(err)) from None
    print(f"# {path or 'defaults (the CartPole config)'}{' with ' + ' '.join(overrides) if overrides else ''}; "
          "* = differs from the default")
    print("\n".join(config_listing(config)))
    return 0
