"""The pytest layer: options (parsed once, typed), collection over the inventory, the outcome of each check, the
session (plan and measure before collection; the verdict and reports at its end) and JUnit. `plugin` is the
pytest11 entry point and holds the hooks only. Suites reach gpucert through it and the package's public names."""
