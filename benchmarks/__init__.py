"""Measuring tools run from a checkout (`python -m benchmarks.NAME`), not installed with raypex:
probes `raypex bench` does not run. They may import any part of the product."""
