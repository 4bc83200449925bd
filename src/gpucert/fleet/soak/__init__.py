"""Burn-in (`gpucert soak`, issue 26): rounds of sustained load on every node, each judged by the soak's criteria,
appended to the run folder as they finish, resumable, one controller per run. Rooms: `folder` (the soak's files in
the run folder and the controller's lock), `controller` (the rounds, the restart policy, progress), `start` (a new
or resumed soak's run folder, its target and inputs), `inputs` (what a soak is judged by)."""

from gpucert.fleet.soak.controller import SoakController, SoakResult
from gpucert.fleet.soak.folder import SoakBusyError, SoakFolder
from gpucert.fleet.soak.start import resume_soak, start_soak

__all__ = ["SoakBusyError", "SoakController", "SoakFolder", "SoakResult", "resume_soak", "start_soak"]
