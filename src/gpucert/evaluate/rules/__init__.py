"""Pure rules, one module per check family: a figure or reading in, a Finding out. No I/O, no cluster, no GPU,
and never an import of evaluation, run, pytest or cli."""
