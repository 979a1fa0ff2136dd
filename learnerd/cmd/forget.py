"""``learnerd forget``: take a learned example back — its example row, its vector (table and live index), its
probe section in every .dlm document, its foyle export file — and write a tombstone so that re-ingestion,
a backfill or a fleet peer never learns it again; every document that lost a section retrains from scratch.

Name what to forget by ``--example ID`` / ``--block ID`` (an example's id is its block's), ``--source FILE``
(every block a log file names, and every block whose command was read from that path, even once the file is
gone) or ``--match TEXT`` (every example whose context or command contains the text, case-sensitive, at least
4 non-space characters; later blocks holding it are refused too, and the probes injected over RPC holding it
go from their document and the probe journal). ``--match`` prints what it will forget and asks before doing
it (``--yes``: do not ask, for scripts). ``--dry-run`` shows what would go. ``--list`` prints the tombstones,
``--remove ID`` deletes one (its blocks may be learned again).

When a daemon runs on the state directory, the forget runs inside it (through the admin socket): retrieval
stops returning the example before the command returns, and the retrain is queued at once. Otherwise this
process does the same work under the state directory's lock, and the next ``learnerd run`` or
``learnerd train`` trains the documents fresh (their adapters trained on sections that are gone). Exit
status 1 when a document could not be rewritten (it does not parse: the report names it and the line).
docs/privacy.md says more.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from learnerd.cmd._common import CommandError, add_common_options, add_dir_options, load_config_from_args, plain

if TYPE_CHECKING:
    from learnerd.daemon.config import Config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("forget", help="take a learned example back everywhere; tombstones", description=plain(__doc__))
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--example", metavar="ID", help="the example with this id")
    what.add_argument("--block", metavar="ID", help="the block with this id (and its example)")
    what.add_argument("--source", metavar="FILE", help="every block this log file names or was read from")
    what.add_argument(
        "--match",
        metavar="TEXT",
        help="every example whose context or command contains TEXT (>= 4 non-space characters; asks first)",
    )
    what.add_argument("--list", action="store_true", help="list the tombstones")
    what.add_argument("--remove", metavar="TOMBSTONE", help="remove a tombstone (what it kept out is learned again)")
    p.add_argument("--dry-run", action="store_true", help="show what would be forgotten; change nothing")
    p.add_argument("--yes", action="store_true", help="do not ask before a --match forget (non-interactive use)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_dir_options(p)
    add_common_options(p)
    p.set_defaults(func=run)


def _target(args: argparse.Namespace) -> tuple[str, str]:
    """``(kind, value)`` of what to forget, checked.

    Raises:
        CommandError: a ``--match`` shorter than 4 non-space characters.
    """
    from learnerd.store.forget import check_match

    for kind in ("example", "block", "match"):
        if getattr(args, kind) is not None:
            value = getattr(args, kind)
            if kind == "match":
                try:
                    check_match(value)
                except ValueError as exc:
                    raise CommandError(f"--match: {exc}") from None
            return kind, value
    return "source", os.path.abspath(os.path.expanduser(args.source))


def run(args: argparse.Namespace) -> int:
    from learnerd.cmd._render import print_json

    cfg = load_config_from_args(args)
    if args.list or args.remove is not None:
        result, where = _call(cfg, args, "GET" if args.list else "POST", "/tombstones" if args.list else "/unforget")
    else:
        kind, value = _target(args)
        gone = kind == "source" and not os.path.isfile(value)
        ask = kind == "match" and not args.dry_run and not args.yes
        if gone or ask:
            preview, where = _call(cfg, args, "POST", "/forget", {"kind": kind, "value": value, "dry_run": True})
            if gone and not preview["tombstone"]["block_ids"]:
                raise CommandError(f"--source {args.source}: no such file, and no block was read from it")
            if ask and not _confirmed(preview, where):
                print("learnerd forget: nothing was forgotten", file=sys.stderr)
                return 1
        body = {"kind": kind, "value": value, "dry_run": args.dry_run}
        result, where = _call(cfg, args, "POST", "/forget", body)
    if args.json:
        print_json(result)
    elif args.list:
        _print_tombstones(result)
    elif args.remove is not None:
        stone = f"{result['kind']} {result['value']!r}"
        print(f"tombstone {result['id']} removed ({stone}): its blocks may be learned again")
    else:
        _print_report(result, where)
    if isinstance(result, dict) and result.get("errors"):
        print(
            "learnerd forget: some documents were not rewritten (see above); the tombstone holds, and the probes "
            "reconciler removes their sections once they parse again",
            file=sys.stderr,
        )
        return 1
    return 0


def _call(cfg: Config, args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """The admin call ``method path`` on the running daemon, else the same work offline; and where it ran."""
    from learnerd.cmd._client import DaemonNotRunning, client_for

    if path == "/unforget":
        body = {"id": args.remove}
    try:
        return client_for(cfg).call(method, path, body), "the running daemon"
    except DaemonNotRunning:
        return _offline(cfg, args, body), "offline"


def _confirmed(preview: dict[str, Any], where: str) -> bool:
    """Print what a forget would take back (on stderr: stdout stays the result) and ask; True on yes."""
    _print_report(preview, where, file=sys.stderr)
    print(
        f"forget these {len(preview['examples'])} example(s), and keep {preview['tombstone']['value']!r} out of "
        "everything learned from now on? [y/N] ",
        end="",
        file=sys.stderr,
        flush=True,
    )
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def _offline(cfg: Config, args: argparse.Namespace, body: dict[str, Any] | None) -> Any:
    """The same work as the daemon's (``body``: the forget's kind, value and dry run), in this process, under
    the state directory's lock."""
    from learnerd.cmd._common import open_store
    from learnerd.daemon.control import forget_scope
    from learnerd.daemon.statelock import StateDirBusy, StateLock
    from learnerd.store import db
    from learnerd.store.forget import NothingToForget, forget_in_files, forget_in_store
    from learnerd.store.state_dir import UnsafeStateDir
    from learnerd.store.tombstones import delete_tombstone, load_tombstones

    if not cfg.layout.is_postgres and not cfg.layout.db_path.exists():
        raise CommandError(f"no learnerd database at {cfg.layout.db_path}: nothing was learned yet")
    lock = StateLock(cfg.state_dir)
    try:
        lock.acquire()
    except (StateDirBusy, UnsafeStateDir) as exc:
        raise CommandError(str(exc)) from exc
    conn = open_store(cfg)
    try:
        if args.list:
            return [t.to_json() for t in load_tombstones(conn).all]
        if args.remove is not None:
            with db.transaction(conn):
                stone = delete_tombstone(conn, args.remove)
            if stone is None:
                raise CommandError(f"no tombstone has the id {args.remove!r} (see learnerd forget --list)")
            return stone.to_json()
        assert body is not None
        kind, value, dry_run = body["kind"], body["value"], body["dry_run"]
        source_ids: list[str] = []
        if kind == "source" and os.path.isfile(value):
            from learnerd.analyzer.block_ids import block_ids_in_file

            source_ids = block_ids_in_file(Path(value)).block_ids
        try:
            report = forget_in_store(conn, kind, value, source_block_ids=source_ids, dry_run=dry_run)
        except NothingToForget as exc:
            raise CommandError(str(exc)) from exc
        documents, export_dir = forget_scope(cfg)
        journal = _journal(cfg) if kind == "match" and not dry_run else None  # opening one compacts it
        try:
            return forget_in_files(report, documents, export_dir, journal).to_json()
        finally:
            if journal is not None:
                journal.close()
    finally:
        conn.close()
        lock.release()


def _journal(cfg: Config) -> Any:
    """The probe journal of ``cfg``'s state directory, None when there is none (nothing was ever injected)."""
    from learnerd.store.probe_journal import ProbeJournal

    path = cfg.layout.probe_journal
    return ProbeJournal(path) if path.exists() else None


def _print_report(report: dict[str, Any], where: str, file: Any = None) -> None:
    def out(line: str) -> None:
        print(line, file=file or sys.stdout)

    stone = report["tombstone"]
    verb = "would forget" if report["dry_run"] else "forgot"
    out(f"{verb} {len(report['examples'])} example(s) ({where}; tombstone {stone['id']}: {stone['kind']})")
    for example in report["examples"]:
        out(f"  {example['id']}: {example['answer'][:80]!r}")
    out(f"  vectors: {report['vectors']}")
    out(f"  served answers: {report['suggestions']}")
    for path, n in report["documents"].items():
        out(f"  {path}: {n} section(s) {'would be removed' if report['dry_run'] else 'removed'}")
    for path in report["export_files"]:
        out(f"  {path}: {'would be deleted' if report['dry_run'] else 'deleted'}")
    if report.get("journal_probes"):
        verb = "would be dropped" if report["dry_run"] else "dropped"
        out(f"  injected probes pending in the probe journal: {report['journal_probes']} {verb}")
    for path, reason in report["errors"].items():
        out(f"  {path}: NOT rewritten: {reason}")
    if report["retrain"] and not report["dry_run"]:
        when = "queued now" if where != "offline" else "at the next learnerd run / train"
        out(f"  fresh retrain of {', '.join(report['retrain'])}: {when}")


def _print_tombstones(stones: list[dict[str, Any]]) -> None:
    if not stones:
        print("no tombstones")
    for stone in stones:
        print(f"{stone['id']}  {stone['kind']:<7}  {stone['value']!r}  ({len(stone['block_ids'])} block(s))")
