"""Where evidence comes from: the targets (simulated, kubernetes, local) and the probes that run on a node.
The evidence contract lives here; nothing here judges a figure."""
