"""The `gpucert` command, one module per command group: a thin layer over plan, measure, the pytest suites and the
run folder. May import any room; nothing imports it but `__main__`."""
