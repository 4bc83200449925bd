"""The handover commands of `gpucert`: `punchlist`, `accept`, `countersign` (cli.py registers them).

Exit codes as everywhere: 0 (the punch list is empty, the cluster is accepted, the signature added), 1 (failing
nodes on the punch list, the acceptance failed), 2 (usage, or a run that does not verify).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from gpucert.errors import ConfigError

__all__ = ["add_acceptance_commands"]

console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)


def cmd_punchlist(a: argparse.Namespace) -> int:
    from gpucert.acceptance.punchlist import punch_list, render
    from gpucert.runfolder import RunFolder

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
    from gpucert.report import attest

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
    from gpucert.report import attest

    path, fp = attest.countersign(Path(a.dir), Path(a.key))
    count = len(attest.read_envelope(path).signatures)
    console.print(f"countersigned {a.dir} with {fp}: {path} now holds {count} signatures")
    return 0


def add_acceptance_commands(sub: Any) -> None:
    """Add the handover commands to the `gpucert` parser's subcommands."""
    from gpucert.acceptance.punchlist import FORMATS

    pl = sub.add_parser("punchlist", help="one row per failing node and GPU, with what a repair ticket needs")
    pl.add_argument("run_dir")
    pl.add_argument("--format", choices=FORMATS, default="md", help="csv, json or md (default md)")
    pl.add_argument("--out", default=None, help="write to this file instead of the terminal")
    pl.set_defaults(func=cmd_punchlist)
    ac = sub.add_parser("accept", help="the signed acceptance record of the cluster over its runs (latest wins)")
    ac.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    ac.add_argument("--sign-key", required=True, help="the vendor's private key: signs the record")
    ac.add_argument(
        "--key",
        action="append",
        help="another public key the runs may be signed with (the signing key's own is always accepted)",
    )
    ac.add_argument("--out", default="acceptance", help="where acceptance/<id>/ is written (default ./acceptance)")
    ac.set_defaults(func=cmd_accept)
    cs = sub.add_parser("countersign", help="add a signature (the buyer's) to a signed folder's envelope")
    cs.add_argument("dir")
    cs.add_argument("--key", required=True, help="the countersigner's private key")
    cs.set_defaults(func=cmd_countersign)
