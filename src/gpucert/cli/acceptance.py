"""The handover and signature commands of `gpucert`: `baseline record` (each passing node's handover baseline),
`keygen` and `sign`, `punchlist`, `accept`, `countersign` and `verify` (every signature of an envelope with its key;
a re-test's carried evidence against its source).

Exit codes as everywhere: 0 (the punch list is empty, the cluster is accepted, the signature added, the folder
verifies), 1 (failing nodes on the punch list, the acceptance failed, the folder does not verify), 2 (usage, or a
run that does not verify given to `accept`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from gpucert.cli.args import existing_file, existing_folder, file_to_write, folder_to_write
from gpucert.errors import ConfigError
from gpucert.plan.runfolder import RunFolder
from gpucert.report import attest
from gpucert.report.soak_verdict import SOAK_PREDICATE_TYPE

__all__ = ["add_acceptance_commands"]

console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)


def cmd_punchlist(a: argparse.Namespace) -> int:
    from gpucert.acceptance.punchlist import punch_list, render

    folder = RunFolder(Path(a.run_dir))
    rows = punch_list(folder)
    text = render(rows, a.format, run=folder.id)
    if a.out:
        try:
            Path(a.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write the punch list: {exc.strerror}", path=a.out, key="--out") from None
        console.print(f"wrote {a.out}: {len(rows)} failing node/GPU(s)")
    else:
        sys.stdout.write(text)
    return 0 if not rows else 1


def cmd_accept(a: argparse.Namespace) -> int:
    from gpucert.acceptance.record import STATUSES, accept

    sign_key = Path(a.sign_key)
    keys = [attest.load_private_key(sign_key).public_key(), *(attest.load_public_key(Path(k)) for k in a.key or [])]
    folder, record, fp = accept([Path(r) for r in a.run_dirs], Path(a.out), sign_key=sign_key, keys=keys)
    t = record["totals"]
    console.print(
        f"{t['nodes']} of {t['expected']} nodes: " + ", ".join(f"{t[s]} {s}" for s in STATUSES) + f"; "
        f"{len(record['waivers'])} waiver(s) in the record"
    )
    for problem in record["problems"]:
        console.print(f"  [red]{problem}[/]")
    ok = record["result"] == "pass"
    console.print(f"[bold {'green' if ok else 'red'}]ACCEPTANCE {record['result'].upper()}[/]: {folder}")
    console.print(f"  signed by {fp}; the buyer countersigns: gpucert countersign {folder} --key BUYER_KEY")
    return 0 if ok else 1


def cmd_countersign(a: argparse.Namespace) -> int:
    path, fp = attest.countersign(Path(a.dir), Path(a.key))
    count = len(attest.read_envelope(path).signatures)
    console.print(f"countersigned {a.dir} with {fp}: {path} now holds {count} signatures")
    return 0


SCOPES = {
    "measure": "certification: every node measured and judged (configure + certify)",
    "recertify": "recertification of one node (configure + certify + recertify)",
    "retest": "re-test: a certification that measured the nodes that had not passed and carried the others' signed "
    "evidence over (configure + certify)",
    "plan": "configure only: the cluster's configuration, NOTHING MEASURED (not a certification of the hardware)",
    "static": "static gate: the spec's recipe alone, NO CLUSTER (not a certification)",
}


def _valid(v: attest.Verification) -> str:
    """The line of a folder that verifies: who signed it, and whether its verdict was decided again from its
    evidence (a run of another gpucert version's rules is not: said, so VALID is never read as more than it is)."""
    signers = ", ".join(dict.fromkeys(s.verified_by for s in v.signatures if s.verified_by))
    derived = "; the verdict follows from its evidence" if v.rederived else ""
    if v.not_rederived is not None:
        derived = f" (signatures and digests only: the verdict was NOT re-derived: {v.not_rederived})"
    return f"[green]VALID[/]: signed by {signers}; every file matches its digest{derived}"


def cmd_verify(a: argparse.Namespace) -> int:
    from gpucert.acceptance.retest import read_retest_record, verify_carried

    keys = [Path(k) for k in a.key]
    v = attest.verify(Path(a.run_dir), keys)
    for sig in v.signatures:
        by = f"[green]valid[/], made with key {sig.verified_by}" if sig.verified_by else "not made by any --key given"
        console.print(f"signature {sig.index + 1} (keyid {sig.keyid or '-'}): {by}", soft_wrap=True)
    if v.signature_ok:  # nothing of a payload is shown before its signature is known to be good
        v.other = verify_carried(Path(a.run_dir), [attest.load_public_key(k) for k in keys])
        # verify_carried read the record already: one it could not read is among v.other
        record = read_retest_record(RunFolder(Path(a.run_dir))) if not v.other else None
        if record is not None and record.carried:
            from gpucert.plan.carried_pairs import read_carried

            pairs = read_carried(RunFolder(Path(a.run_dir)))
            also = f" and {len(pairs.files)} of their fabric pairs documents" if pairs is not None else ""
            said = f"carried evidence: {len(record.carried)} nodes{also}, each file as its source run signed it"
            console.print(said, soft_wrap=True)
        pred = v.statement.get("predicate", {})
        files = len(v.statement.get("subject", []))
        if v.statement.get("predicateType") == attest.PREDICATE_TYPE:
            target = pred.get("target", "?")
            if target == "simulated":
                console.print(
                    "[bold yellow]TARGET: SIMULATED[/] this certificate is of a simulated fleet, not hardware"
                )
            else:
                console.print(f"target: {target}")
            console.print(
                f"spec {pred.get('spec', {}).get('name')}, run {pred.get('run', {}).get('id')}, "
                f"result {str(pred.get('result', '?')).upper()}, {files} files"
            )
            mode = str((pred.get("scope") or {}).get("mode"))
            console.print(f"scope: {SCOPES.get(mode, f'{mode}: unknown (signed by another gpucert?)')}", markup=False)
        elif v.statement.get("predicateType") == SOAK_PREDICATE_TYPE:
            soak = pred.get("soak", {})
            console.print(
                f"soak of spec {pred.get('spec', {}).get('name')} ({pred.get('target')}), run "
                f"{pred.get('run', {}).get('id')}: {soak.get('duration')} in {soak.get('round')} rounds, result "
                f"{str(pred.get('result', '?')).upper()}, {files} files",
                markup=False,
            )
        else:
            console.print(
                f"acceptance {pred.get('id')} of spec {pred.get('spec')}: result {str(pred.get('result')).upper()}, "
                f"{len(pred.get('runs', {}))} runs, {files} files"
            )
    if v.ok:
        console.print(_valid(v), soft_wrap=True)
        return 0
    console.print("[red]INVALID[/]:")
    for problem in v.problems():
        console.print(f"  {problem}", markup=False, soft_wrap=True)
    return 1


def cmd_baseline_record(a: argparse.Namespace) -> int:
    from gpucert.fleet.handover_binding import spec_nodes_dir
    from gpucert.spec.handover import record_baselines

    if a.force and not a.reason:
        raise ConfigError(
            "--force needs --reason TEXT: why a failed node's figures may serve as its baseline", key="--reason"
        )
    run_dir = Path(a.run_dir)
    written, refused = record_baselines(
        run_dir,
        spec_nodes_dir(Path(a.out), RunFolder(run_dir).spec_name(), run_dir),
        certificate=attest.certificate_digest(run_dir),
        force_reason=a.reason if a.force else None,
        allow_unsigned=a.allow_unsigned,
    )
    for path in written:
        console.print(f"wrote {path}")
    for why in refused:
        console.print(f"[red]refused[/] {why}", markup=True)
    return 0 if not refused else 1


def cmd_keygen(a: argparse.Namespace) -> int:
    priv, pub, fp = attest.generate_key(Path(a.dir))
    console.print(f"private key {priv} (mode 0600: keep it out of run folders and repositories)")
    console.print(f"public key  {pub} (give this to whoever verifies)")
    console.print(f"fingerprint {fp}")
    return 0


def cmd_sign(a: argparse.Namespace) -> int:
    from gpucert.acceptance.retest import verify_carried

    carried = verify_carried(Path(a.run_dir), None)  # a re-test's carried files as its source signed them
    if carried:
        for problem in carried:
            console.print(f"  {problem}", markup=False, soft_wrap=True)
        raise ConfigError(
            "its carried evidence is not what its source run signed: not signed (verify would refuse it); re-test "
            "from the source again",
            path=a.run_dir,
        )
    path, fp = attest.sign_run(Path(a.run_dir), Path(a.key), replace=a.replace)
    console.print(f"signed {a.run_dir} with {fp}: {path}")
    return 0


def add_acceptance_commands(sub: Any) -> None:
    """Register the handover and signature commands: `baseline record`, `keygen`, `sign`, `verify`, `punchlist`,
    `accept` and `countersign`."""
    from gpucert.acceptance.punchlist import FORMATS

    bl = sub.add_parser("baseline", help="handover baselines per node")
    bsub = bl.add_subparsers(dest="baseline", required=True)
    br = bsub.add_parser(
        "record", help="write baselines/nodes/<spec>/<node>.yaml for every node that passed in RUN_DIR"
    )
    br.add_argument("run_dir", type=existing_folder)
    br.add_argument(
        "--out",
        type=folder_to_write,
        default="baselines/nodes",
        help="under which <spec>/ is written (default baselines/nodes)",
    )
    br.add_argument("--force", action="store_true", help="record failed nodes too (needs --reason)")
    br.add_argument("--reason", default=None, help="why: written into each forced file")
    br.add_argument(
        "--allow-unsigned", action="store_true", help="record from a run that was not signed (said in each file)"
    )
    br.set_defaults(func=cmd_baseline_record)
    g = sub.add_parser("keygen", help="create an Ed25519 signing key pair in DIR")
    g.add_argument("dir", type=folder_to_write)
    g.set_defaults(func=cmd_keygen)
    sg = sub.add_parser("sign", help="sign a completed run folder (certificate.intoto.json)")
    sg.add_argument("run_dir", type=existing_folder)
    sg.add_argument("--key", type=existing_file, required=True, help="the private key from `gpucert keygen`")
    sg.add_argument(
        "--replace",
        action="store_true",
        help="replace the folder's certificate (only while every file still matches it; drops its signatures)",
    )
    sg.set_defaults(func=cmd_sign)

    v = sub.add_parser("verify", help="check a signed folder's signatures (each with its key) and every file's digest")
    v.add_argument("run_dir", type=existing_folder, metavar="DIR")
    v.add_argument(
        "--key",
        type=existing_file,
        required=True,
        action="append",
        help="a signer's public key; give it once per signature to require (vendor, then buyer)",
    )
    v.set_defaults(func=cmd_verify)

    pl = sub.add_parser(
        "punchlist",
        help="one row per failing node and GPU, with what a repair ticket needs",
        description="Exit status: 0 when the list is empty (nothing to repair), 1 when it has rows, 2 when the run "
        "folder cannot be read.",
    )
    pl.add_argument("run_dir", type=existing_folder)
    pl.add_argument("--format", choices=FORMATS, default="md", help="csv, json or md (default md)")
    pl.add_argument("--out", type=file_to_write, default=None, help="write to this file instead of the terminal")
    pl.set_defaults(func=cmd_punchlist)
    ac = sub.add_parser("accept", help="the signed acceptance record of the cluster over its runs (latest wins)")
    ac.add_argument("run_dirs", type=existing_folder, nargs="+", metavar="RUN_DIR")
    ac.add_argument("--sign-key", type=existing_file, required=True, help="the vendor's private key: signs the record")
    ac.add_argument(
        "--key",
        type=existing_file,
        action="append",
        help="another public key the runs may be signed with (the signing key's own is always accepted)",
    )
    ac.add_argument(
        "--out",
        type=folder_to_write,
        default="acceptance",
        help="where acceptance/<id>/ is written (default ./acceptance)",
    )
    ac.set_defaults(func=cmd_accept)
    cs = sub.add_parser("countersign", help="add a signature (the buyer's) to a signed folder's envelope")
    cs.add_argument("dir", type=existing_folder)
    cs.add_argument("--key", type=existing_file, required=True, help="the countersigner's private key")
    cs.set_defaults(func=cmd_countersign)
