"""The pytest layer: options, plan and measure before collection, parametrization, outcomes, reports. Suites reach
gpucert through it and the package's public names."""
