"""Which board each GPU entry of `dcgmi diag -j` is: DCGM's GPU ids are its own, never this node's NVML indexes.

DCGM numbers GPUs in the order its host engine's NVML listed them when it first attached; a GPU it finds on a later
attach (after a reset, or a board that fell off the bus and came back) gets an id after those it kept, matched by
UUID (DcgmCacheManager::MergeNewlyDetectedGpuList, dcgmlib/src/DcgmCacheManager.cpp, DCGM 4.5.2), and an engine
reached with `--host` numbers the GPUs it sees. What dcgmi's JSON says of a GPU is its id, its PCI device id (the
product, the same on every board of a node) and its serial where NVML gives one (see `dcgm.dcgm_serials`): the
serial is the one thing in it that names a board. So each entry is filed under the board with its serial. An entry
with no serial is tied only where nothing else can be meant (one GPU on each side, the engine this node's own);
otherwise it is kept apart, charged to no board, and the boards it leaves without a result cannot be judged.
An entry whose serial is none of this node's, or more entries than boards, make the whole diagnostic an error: the
engine tested GPUs that are not (all) this node's.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpucert.measure.evidence import DcgmEvidence, DcgmGpuResult, DcgmTestResult

__all__ = ["board_serial", "tie_to_boards"]


def board_serial(serial: str | None) -> str | None:
    """A serial that names a board; None for none, DCGM's placeholders (`<<<NOT_SUPPORTED>>>`, `<<<NULL>>>`:
    DCGM_STR_NOT_SUPPORTED and DCGM_STR_BLANK, dcgmlib/dcgm_structs.h) and nvidia-smi's `N/A`."""
    s = (serial or "").strip()
    return None if not s or (s.startswith("<<<") and s.endswith(">>>")) or s.strip("[]") == "N/A" else s


def _ids(d: DcgmEvidence) -> dict[int, str | None]:
    """Every DCGM GPU id the diagnostic reports, with its serial (None where it has none)."""
    out: dict[int, str | None] = {}
    for test in d.results.values():
        for key, r in test.gpus.items():
            gid = r.dcgm_id if r.dcgm_id is not None else key
            out[gid] = out.get(gid) or board_serial(r.serial)
    return out


def _tie(ids: dict[int, str | None], boards: Mapping[int, str | None], local: bool) -> tuple[dict[int, int], str]:
    """DCGM id -> board index, and why the diagnostic cannot stand at all ('' when it can)."""
    by_serial: dict[str, list[int]] = {}
    for index, serial in boards.items():
        if (s := board_serial(serial)) is not None:
            by_serial.setdefault(s, []).append(index)
    tie = {g: by_serial[s][0] for g, s in ids.items() if s is not None and len(by_serial.get(s, [])) == 1}
    # a serial none of the boards has is another host's GPU, unless a board without a serial could be it
    unknown = any(board_serial(s) is None for s in boards.values())
    foreign = {g: s for g, s in ids.items() if s is not None and s not in by_serial and not unknown}
    if foreign:
        named = ", ".join(f"DCGM GPU {g} serial {s}" for g, s in sorted(foreign.items()))
        mine = ", ".join(sorted(by_serial)) or "none NVML could read"
        return tie, (
            f"the GPUs dcgmi tested are not this node's ({named}; this node's serials: {mine}): was an embedded "
            "host engine started against another host?"
        )
    untied = sorted(set(ids) - set(tie))
    if untied and local and len(ids) == len(boards) == 1 and not tie:
        return {untied[0]: next(iter(boards))}, ""  # one GPU each side, this node's engine: no other can be meant
    if len(ids) > len(boards):
        return tie, (
            f"dcgmi reported {len(ids)} GPUs (DCGM ids {sorted(ids)}), this node has {len(boards)}: the engine tested "
            "GPUs that are not this node's"
        )
    return tie, ""


def tie_to_boards(d: DcgmEvidence, boards: Mapping[int, str | None], *, local: bool) -> DcgmEvidence:
    """The diagnostic with each test's GPU results filed under the board (NVML index) each entry's serial names.

    `boards` is this node's NVML index -> serial (None where NVML has none); `local`: dcgmi talked to this node's
    own engine (no `--host`). Entries that nothing ties to a board go to each test's `untied`, by DCGM id.
    """
    if d.runtime_error or not d.results:
        return d
    tie, refusal = _tie(_ids(d), boards, local)
    if refusal:
        return d.model_copy(update={"runtime_error": refusal})
    results = {}
    for name, test in d.results.items():
        gpus: dict[int, DcgmGpuResult] = {}
        untied: dict[int, DcgmGpuResult] = dict(test.untied)
        for key, r in test.gpus.items():
            gid = r.dcgm_id if r.dcgm_id is not None else key
            entry = r.model_copy(update={"dcgm_id": gid})
            if gid in tie:
                gpus[tie[gid]] = entry
            else:
                untied[gid] = entry
        results[name] = DcgmTestResult(
            summary=test.summary, gpus=dict(sorted(gpus.items())), info=test.info, untied=untied
        )
    return d.model_copy(update={"results": results})
