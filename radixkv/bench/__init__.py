"""Prefix-sharing benchmark: workloads, Belady's optimum, the runner, plots, and the SGLang peer."""
