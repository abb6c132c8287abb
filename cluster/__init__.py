"""raypex's Ray side: commands, config, driver, actor hosts, benches (raypex.cluster)."""
