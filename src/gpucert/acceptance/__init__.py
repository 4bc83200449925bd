"""Handover acceptance: what follows a first certification that did not pass.

`punchlist` (the failed GPUs, with what a repair ticket needs), `waivers` (deviations the parties accepted, applied
to a run's findings), `retest` (measure again only what did not pass, carry the rest over with its provenance) and
`record` (the acceptance folder over several runs, signed by the vendor and countersigned by the buyer, with its
HTML report in `report`). They read and write run folders through RunFolder and sign through report.attest.
"""
