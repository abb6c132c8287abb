"""Sweeps: many runs as Ray Tune trials, searched at random, stopped early by ASHA, or grown by
population based training with the donor's replay carried into each exploit (`raypex tune`)."""
