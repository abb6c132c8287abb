"""The shipped run configs, installed as the package `raypex.configs`: `raypex configs` lists them and
`raypex train NAME` finds NAME.yaml here from any directory (cluster/config/loading.py)."""
