"""raypex's Ray side: commands, config, driver, actor hosts, benches. The package version lives
here (pyproject reads it), so every node can report which raypex it runs."""

__version__ = "0.1.0"
