"""Repository conftest: loads the fixture modules in fixtures/, nothing else."""

pytest_plugins = ["fixtures.run"]
