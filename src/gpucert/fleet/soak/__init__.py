"""Burn-in (`gpucert soak`, issue 26): rounds of sustained load on every node, each judged by the soak's criteria,
appended to the run folder as they finish, resumable, one controller per run. Rooms: `folder` (the soak's files in
the run folder and the controller's lock), `controller` (the rounds, the restart policy, progress)."""

from gpucert.fleet.soak.controller import SoakController, SoakResult, resume_soak, start_soak
from gpucert.fleet.soak.folder import SoakBusyError, SoakFolder

__all__ = ["SoakBusyError", "SoakController", "SoakFolder", "SoakResult", "resume_soak", "start_soak"]
