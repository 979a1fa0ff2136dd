"""The analyzer: tails every log file in the configured directories and turns lines into blocks
(foyle TN005 "continuous log processing", with TN006's ``notifier`` callback).

The analyzer knows the framings (JSON lines: files, lines, byte-offset watermarks; SQLite rows: a table read
read-only in rowid order, rowid watermarks, :mod:`learnerd.analyzer.sqlite_source`), not the formats: each
line goes through :func:`learnerd.analyzer.ingest.ingest_line` (each row through
:func:`~learnerd.analyzer.ingest.ingest_record`) to the reader in :data:`learnerd.analyzer.registry.READERS`
that detects it.

Guarantees:

- **Exactly-once ingestion, crash-safe.** Lines are read in bounded batches (``batch_max_lines`` /
  ``batch_max_bytes``); each batch's block rows, the records its readers keep pending (half foyle
  traces) and the file's watermark
  (path, inode, byte offset, line count, fingerprint) commit in one SQLite transaction. A crash at
  any moment (``kill -9``) loses nothing and duplicates nothing: a restart resumes at the last
  committed watermark, and re-merging an event is a no-op anyway.
- **Notification after commit.** ``notify(block_id)`` is called once per changed block per batch,
  after the batch's transaction commits — never for an unchanged block (a replay notifies nobody).
  Notifications are not persisted: a crash between a commit and the consumer's work loses them, so a
  daemon should enqueue every block once at start-up (level-triggered resync) to be safe.
- **Complete lines only** (see :mod:`learnerd.analyzer.tail`): a partial last line is left until
  its LF arrives, except a last line that is already a whole JSON object.
- **Rotation, truncation, replacement, deletion.** Files are identified by inode, not by name. A path
  that now names another inode was rotated: the old file is finished first — through the handle the
  analyzer still holds, or found by its inode in the same directory, or under its new name when it
  was renamed to another log-file name (then it simply keeps its watermark) — and the new file is
  read from byte 0. A file shorter than its watermark, or whose first bytes no longer match the
  watermark's fingerprint (deleted and recreated, possibly with the same inode number), is read
  again from the start; both are logged and counted as ``truncations``. A deleted file is finished
  through its open handle when there is one, then dropped: its watermark row is deleted. Files in a
  log directory that is missing (unmounted) keep their watermarks.
- **Fairness.** Between batches the analyzer yields to the event loop (``anyio.sleep(0)``), so a
  large backlog never starves the reconcilers sharing the loop and the SQLite connection. No
  transaction is held across an ``await``.
- **Bad input never stops ingestion.** Malformed lines (bad UTF-8, bad JSON, missing or ill-typed
  fields, and any exception a line causes: see :func:`learnerd.analyzer.ingest.ingest_line`),
  unknown event types, oversized lines (skipped unread), refused block events (a time more than a day
  ahead, a block id of another source: :class:`~learnerd.store.blocks.BlockRefused`) and unjoinable traces
  are counted and logged (a structlog event with ``file`` and ``line``, per file and kind at most 10 in 10 s, then
  ``suppressed=n``: :mod:`learnerd.runtime.log_throttle`), and the next line is read; the last
  malformed line is kept in the stats for ``ctl status``. Valid JSON from another program (runme's
  ``level``/``ts``/``msg`` lines) and a whole-file JSON document (a pretty-printed ``.json``: its
  first line is not JSON by itself, the file up to ``max_line_bytes`` is) are skipped as "not a block
  log" with one warning per file. A file that fails in any other way (unreadable, or a bug) is
  logged, counted in ``errors`` and retried later, and the pass goes on to the next file; only a
  failing database ends a pass.

Discovery and watching: see :mod:`learnerd.analyzer.discovery` for which files count. ``run()``
watches the existing log directories with watchfiles (inotify and friends, debounced by
``debounce_ms``): an event for a tracked file drains that file, an event for a new log file tracks
and drains it, and anything else (a new directory, a rotation, a deletion) rescans. So while the
watcher runs an idle daemon costs O(changes), not O(files): every ``poll_interval_s`` it only checks
whether a log directory appeared or vanished (then the watcher restarts and a full rescan follows),
and the full rescan, the safety net for missed events (an inotify queue overflow), runs every
``rescan_interval_s``. With ``force_polling``, or while the watcher is down (inotify's watch limit reached,
say), the full rescan runs every ``poll_interval_s``, stretched so that rescans take at most 5 % of the time
(:func:`rescan_interval`): 100,000 idle files cost a twentieth of a core at most.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import anyio
import structlog
from anyio.abc import TaskStatus
from prometheus_client import CollectorRegistry
from watchfiles import Change, awatch

from learnerd.analyzer import ingest
from learnerd.analyzer.discovery import JSON_DOCUMENT_REASON, discover, find_by_inode, is_json_document, is_log_path
from learnerd.analyzer.reader import ROWID, SKIPPED, SQLITE_ROWS, UNJOINABLE, framing_of
from learnerd.analyzer.registry import columns as registry_columns
from learnerd.analyzer.registry import pending_records
from learnerd.analyzer.registry import reader_for as registry_reader_for
from learnerd.analyzer.settings import AnalyzerConfig
from learnerd.analyzer.sqlite_source import OVERSIZED, WAL_SUFFIX, NotASource, read_rows
from learnerd.analyzer.stats import AnalyzerStats, LineProblem, StatsRecorder
from learnerd.analyzer.tail import Batch, RawLine, read_batch
from learnerd.privacy.redact import Redactor
from learnerd.runtime.log_throttle import LogThrottle
from learnerd.store.db import transaction
from learnerd.store.watermarks import (
    FINGERPRINT_BYTES,
    Watermark,
    delete_watermark,
    fingerprint_of,
    load_watermarks,
    put_watermark,
)

log = structlog.get_logger(__name__)

Notify = Callable[[str], None]
"""Called with the id of each block a committed batch changed (the daemon passes a workqueue's ``add``)."""


@dataclass
class _Tracked:
    """A log file being tailed: its watermark plus what only this process knows."""

    path: str
    inode: int
    offset: int = 0
    line: int = 0
    fingerprint: str = ""
    fingerprint_len: int = 0
    fd: int | None = None
    mid_line: bool | None = None  # None: not known yet (looked up from the byte before offset)
    idle_stat: tuple[int, int] | None = None  # (size, mtime_ns) when the last read found nothing new
    json_document: bool = False  # the file read from byte 0 is one (pretty-printed) JSON document, not a log
    not_a_source: bool = False  # a .db file that is not a SQLite log of a known table: skipped


RESCAN_DUTY_CYCLE = 0.05
"""The largest share of the time full rescans may take while no watcher runs (polling, or a watcher that
failed: e.g. inotify's watch limit reached with very many directories)."""


def rescan_interval(cfg: AnalyzerConfig, *, watching: bool, last_scan_s: float) -> float:
    """Seconds between full rescans: ``rescan_interval_s`` while the watcher runs; else ``poll_interval_s``,
    stretched so rescans take at most :data:`RESCAN_DUTY_CYCLE` of the time (a rescan of 100,000 files that
    takes 0.5 s runs every 10 s, not every second)."""
    if watching:
        return cfg.rescan_interval_s
    return max(cfg.poll_interval_s, last_scan_s / RESCAN_DUTY_CYCLE)


class Analyzer:
    """Log files → blocks, for the daemon (``learnerd run``) and ``learnerd run --once``.

    Args:
        conn: a connection from :func:`learnerd.store.db.connect`. Used only from the event loop's
            thread; the analyzer opens and closes its own transactions on it.
        log_dirs: directories whose log files are tailed, recursively. They need not exist yet.
        notify: called with a block id after each commit that changed that block; must not block.
            An exception from it is logged and ingestion goes on.
        config: batch sizes, line limit, polling (:class:`learnerd.analyzer.settings.AnalyzerConfig`).
        clock: wall clock in epoch seconds, stamped on changed rows as ``updated_at``.
        registry: prometheus registry for the counters (see :mod:`learnerd.analyzer.stats`);
            None keeps them private.
        host: the replica host its watermarks are keyed by (``""`` for a single process; see
            :mod:`learnerd.store.watermarks`).
        redactor: replaces secrets in every record before it is stored (:mod:`learnerd.privacy.redact`);
            None stores records as read.
        join_window_s: executions join the answers learnerd served at most this many seconds before them
            (``[suggestions] join_window_s``, :func:`learnerd.store.suggestions.resolve`); None joins nothing.

    Use :meth:`sync` to ingest what the files hold now, :meth:`run` to keep ingesting until
    cancelled; :meth:`close` (or ``with``) releases the file handles the analyzer keeps.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        log_dirs: Iterable[str | os.PathLike[str]],
        notify: Notify,
        config: AnalyzerConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        registry: CollectorRegistry | None = None,
        host: str = "",
        redactor: Redactor | None = None,
        join_window_s: float | None = None,
    ) -> None:
        self._conn = conn
        self._redactor = redactor
        self._join_window_s = join_window_s
        self._host = host
        self._roots = tuple(dict.fromkeys(os.path.abspath(os.path.expanduser(os.fspath(d))) for d in log_dirs))
        self._notify = notify
        self._config = config or AnalyzerConfig()
        self._formats = frozenset(self._config.formats)
        self._clock = clock
        self._stats = StatsRecorder(registry)
        self._lock = anyio.Lock()
        self._tracked: dict[str, _Tracked] = {}
        self._open_fds: OrderedDict[int, _Tracked] = OrderedDict()  # LRU of held handles, by id(tracked)
        self._warned_unreadable: set[tuple[str, int]] = set()
        self._warned_foreign: set[tuple[str, int]] = set()
        #: Per file and kind of bad line, at most 10 warnings per 10 s (``suppressed=n`` counts the lines
        #: not logged since): a million bad lines are counted exactly but logged a few times.
        self._throttle = LogThrottle(burst=10)
        self._watching = False  # the watcher is running: full rescans every rescan_interval_s only
        self._rescan_soon = False  # the watcher (re)started: rescan once it is armed
        self._watched: tuple[str, ...] = ()
        self._watch_stop: anyio.Event | None = None
        for wm in load_watermarks(conn, host):
            if is_log_path(wm.path, self._roots):
                self._tracked[wm.path] = _Tracked(
                    wm.path, wm.inode, wm.offset, wm.line, wm.fingerprint, wm.fingerprint_len
                )
        self._stats.set_files_tracked(len(self._tracked))
        self._stats.set_pending_traces(pending_records(conn))
        for root in self._roots:
            if not os.path.exists(root):
                log.info("log directory does not exist yet; waiting for it", dir=root)
            elif not os.path.isdir(root):
                log.warning("log directory is not a directory; ignored until it is one", dir=root)

    @property
    def log_dirs(self) -> tuple[str, ...]:
        """The log directories, absolute."""
        return self._roots

    @property
    def stats(self) -> AnalyzerStats:
        """A snapshot of the counters (see :class:`~learnerd.analyzer.stats.AnalyzerStats`)."""
        return self._stats.snapshot()

    def count_redactions(self, kinds: Mapping[str, int]) -> None:
        """Count secrets another intake (``POST /v1/blocks``, RPC ``inject_probe``) replaced before storing, so
        ``learnerd_redactions_total`` and ``redactions`` cover every intake."""
        self._stats.redacted(kinds)

    async def sync(self) -> AnalyzerStats:
        """Ingest every complete line now in the log files, up to their end; return the counters.

        "Now": each file is read up to the size it had when the pass reached it (give or take the
        last batch), so a file that keeps growing cannot keep a sync from returning.

        What ``learnerd run --once`` and tests use; safe to call while :meth:`run` is going (the
        two take turns).

        Raises:
            sqlite3.Error: the database failed; the batch in progress was rolled back (nothing of
                it is committed, its watermark did not move) and a later call retries it.
        """
        async with self._lock:
            await self._scan_all()
        return self.stats

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Sync, then keep ingesting: watch the log directories and rescan every ``poll_interval_s``.

        Runs until cancelled; reports started (``await task_group.start(analyzer.run)``) once the
        first sync is done and the watcher is set up. A failing pass (database or I/O error) is
        logged, counted in ``errors`` and retried on the next change or rescan; it never ends
        :meth:`run`. Closes the held file handles on the way out.
        """
        try:
            await self._guarded(self._scan_all)
            self._watched = self._existing_roots()
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._poll_loop)
                if not self._config.force_polling:
                    tg.start_soon(self._watch_loop)
                    tg.start_soon(self._stop_watcher_on_exit)
                    # The watcher arms (adds its inotify watches) when its task first runs; a catch-up
                    # scan after that covers whatever was written between the first scan and then.
                    await anyio.sleep(0)
                    await self._guarded(self._scan_all)
                task_status.started()
        finally:
            self.close()

    def close(self) -> None:
        """Close every held file handle. The analyzer stays usable: handles reopen when needed."""
        for tracked in list(self._open_fds.values()):
            self._close_fd(tracked)

    def __enter__(self) -> Analyzer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- scanning

    def _existing_roots(self) -> tuple[str, ...]:
        return tuple(r for r in self._roots if os.path.isdir(r))

    async def _scan_all(self) -> None:
        """One full pass: reconcile tracked files with what is on disk, then drain every log file."""
        self._stats.add("rescans")
        found = discover(self._roots)
        first_path_of_inode: dict[int, str] = {}
        for path, inode in found.items():
            first_path_of_inode.setdefault(inode, path)
        stale = [t for t in self._tracked.values() if found.get(t.path) != t.inode]
        for t in stale:
            del self._tracked[t.path]
        renames: dict[str, _Tracked] = {}
        gone: list[_Tracked] = []
        for t in stale:
            new_path = first_path_of_inode.get(t.inode)
            if new_path is not None and new_path not in renames and self._same_file(new_path, t):
                renames[new_path] = t
            else:
                gone.append(t)
        for t in gone:  # first, so that their watermark rows are gone before a rename takes a path
            await self._finish(t, rotated=t.path in found)
        for new_path, t in renames.items():
            self._rename(t, new_path, rotated=t.path in found)
        tracked_inodes = {t.inode: t.path for t in self._tracked.values()}
        for path, inode in found.items():
            tracked = self._tracked.get(path)
            if tracked is None:
                if inode in tracked_inodes:  # a hard link to a file already tailed under another name
                    continue
                tracked = _Tracked(path, inode)
                self._tracked[path] = tracked
                tracked_inodes[inode] = path
            await self._drain_guarded(tracked)
        self._stats.set_files_tracked(len(self._tracked))

    async def _on_changes(self, paths: Iterable[str]) -> None:
        """Handle a watchfiles event batch: drain appended-to files, track and drain new log files,
        rescan for anything else (a new directory, a rotation, a deletion)."""
        rescan = False
        tracked_inodes: set[int] | None = None
        for path in sorted({p.removesuffix(WAL_SUFFIX) for p in paths}):  # a SQLite log's WAL: the log
            t = self._tracked.get(path)
            try:
                st: os.stat_result | None = os.stat(path, follow_symlinks=False)
            except OSError:
                st = None
            if t is not None and st is not None and st.st_ino == t.inode:
                await self._drain_guarded(t)
                continue
            if t is None and st is None:
                continue  # came and went, or a path that never was a tracked file
            if t is None and st is not None and stat.S_ISREG(st.st_mode) and is_log_path(path, self._roots):
                if tracked_inodes is None:
                    tracked_inodes = {x.inode for x in self._tracked.values()}
                if st.st_ino not in tracked_inodes:  # a new log file (not a rename, not a hard link)
                    t = _Tracked(path, st.st_ino)
                    self._tracked[path] = t
                    tracked_inodes.add(st.st_ino)
                    self._stats.set_files_tracked(len(self._tracked))
                    await self._drain_guarded(t)
                    continue
            rescan = True
        if rescan:
            await self._scan_all()

    def _rename(self, t: _Tracked, new_path: str, rotated: bool) -> None:
        """``t``'s file now lives at ``new_path`` (another log-file name): move its watermark there."""
        old_path = t.path
        with transaction(self._conn):
            delete_watermark(self._conn, old_path, self._host)
            put_watermark(self._conn, self._watermark(t, path=new_path), self._clock(), self._host)
        t.path = new_path
        self._tracked[new_path] = t
        if rotated:
            self._stats.add("rotations")
        log.info("log file renamed; following it", file=new_path, old_file=old_path, line=t.line)

    async def _finish(self, t: _Tracked, rotated: bool) -> None:
        """``t.path`` no longer names ``t``'s file and no log-file name does: read what is left of it
        (through the held handle, or under a non-log name it was rotated to in the same directory),
        then stop tailing it and delete its watermark. Kept as is while its log directory is missing."""
        root = next((r for r in self._roots if is_log_path(t.path, (r,))), None)
        if root is None or not os.path.isdir(root):
            self._tracked[t.path] = t
            return
        fd = self._held_fd(t)
        if fd is None:
            moved = find_by_inode(os.path.dirname(t.path), t.inode)
            if moved is not None and self._same_file(moved, t):
                fd = self._open_path(moved, t)
        if fd is not None:
            await self._drain_guarded(t, fd)
        self._close_fd(t)
        with transaction(self._conn):
            delete_watermark(self._conn, t.path, self._host)
        if rotated:
            self._stats.add("rotations")
            log.info(
                "log file rotated; finished the old file, reading the new one from the start", file=t.path, line=t.line
            )
        else:
            self._stats.add("deleted_files")
            log.info("log file deleted; stopped tailing it", file=t.path, line=t.line)

    # ----------------------------------------------------------------- reading

    async def _drain_guarded(self, t: _Tracked, fd: int | None = None) -> None:
        """:meth:`_drain`, with a file that fails logged (once per file until it reads again), counted
        in ``errors`` and skipped, so the pass goes on to the next file.

        Raises:
            sqlite3.Error: the database failed (the whole pass fails and is retried).
        """
        key = (t.path, t.inode)
        try:
            await self._drain(t, fd)
            self._warned_unreadable.discard(key)
        except Exception as exc:
            if isinstance(exc, ingest.STORE_ERRORS):  # outside a line (the watermark, the traces count): the database
                raise
            if key in self._warned_unreadable:
                return
            self._warned_unreadable.add(key)
            reason = ingest.failure_reason(exc)
            if isinstance(exc, OSError):
                log.warning("log file unreadable; will retry", file=t.path, line=t.line, error=str(exc))
            else:
                log.error(
                    "log file failed; will retry, other files go on",
                    file=t.path,
                    line=t.line,
                    error=reason,
                    exc_info=exc,
                )
            self._stats.add("errors")
            self._stats.problem("error", LineProblem(t.path, t.line + 1, reason, self._clock()))

    async def _drain(self, t: _Tracked, fd: int | None = None) -> None:
        """Ingest ``t`` batch by batch up to its end (``fd``: read this handle instead of ``t.path``)."""
        if framing_of(t.path) is SQLITE_ROWS:
            await self._drain_rows(t)
            return
        if fd is None:
            try:
                st = os.stat(t.path, follow_symlinks=False)
            except FileNotFoundError:
                return
            if st.st_ino != t.inode or (st.st_size, st.st_mtime_ns) == t.idle_stat:
                return
            fd = self._held_fd(t)
            if fd is None:
                fd = self._open_path(t.path, t)
                if fd is None:
                    return
        st = os.fstat(fd)
        if t.offset > 0:
            if st.st_size < t.offset:
                self._restart(t, "log file truncated; reading it from the start", st)
            elif t.fingerprint_len and fingerprint_of(os.pread(fd, t.fingerprint_len, 0)) != t.fingerprint:
                self._restart(t, "log file replaced (its first bytes changed); reading it from the start", st)
        if t.mid_line is None:
            t.mid_line = t.offset > 0 and os.pread(fd, 1, t.offset - 1) != b"\n"
        cfg = self._config
        end = st.st_size  # a pass stops here: a file that grows as fast as it is read cannot hold it
        while True:
            st = os.fstat(fd)
            if st.st_size < t.offset:  # truncated while its backlog was being read
                self._restart(t, "log file truncated; reading it from the start", st)
                end = st.st_size
            if t.offset == 0:
                t.json_document = is_json_document(fd, st.st_size, cfg.max_line_bytes)
            batch = read_batch(
                fd,
                t.offset,
                t.line,
                mid_line=t.mid_line,
                max_lines=cfg.batch_max_lines,
                max_bytes=cfg.batch_max_bytes,
                max_line_bytes=cfg.max_line_bytes,
            )
            if not batch.lines:
                if t.fingerprint_len and fingerprint_of(os.pread(fd, t.fingerprint_len, 0)) != t.fingerprint:
                    self._restart(t, "log file replaced (its first bytes changed); reading it from the start", st)
                    end = st.st_size
                    continue
                t.idle_stat = (st.st_size, st.st_mtime_ns)
                return
            self._commit(t, fd, batch)
            await anyio.sleep(0)  # let the reconcilers run between batches
            if t.offset >= end:
                return  # the rest, if any, is read on the next change or rescan

    async def _drain_rows(self, t: _Tracked) -> None:
        """Ingest the rows of a SQLite log (:data:`~learnerd.analyzer.reader.SQLITE_ROWS`) past its watermark,
        batch by batch, each batch's blocks and watermark (the last rowid) in one transaction.

        A file that is no SQLite database or has no such table is skipped from then on (one warning).

        Raises:
            SourceUnreadable: the database is locked or unreadable (retried later).
        """
        try:
            st = os.stat(t.path, follow_symlinks=False)
        except FileNotFoundError:
            return
        if st.st_ino != t.inode or t.not_a_source:
            return
        cfg = self._config

        def read(after_rowid: int) -> tuple[list[dict[str, object]], int]:
            return read_rows(
                t.path,
                SQLITE_ROWS.table,
                after_rowid,
                cfg.batch_max_lines,
                columns=registry_columns(SQLITE_ROWS),
                max_value_bytes=cfg.max_line_bytes,
                max_batch_bytes=cfg.batch_max_bytes,
            )

        try:
            rows, top = read(t.offset)
        except NotASource as exc:
            t.not_a_source = True  # until the path names another file (a new inode is tracked afresh)
            log.warning("file is not a SQLite log of a known format; skipping it", file=t.path, reason=str(exc))
            return
        if top < t.offset:  # vacuumed (rows renumbered) or rewritten: read again; merging is idempotent
            log.warning("SQLite log renumbered or rewritten; reading it from the start", file=t.path, rowid=t.offset)
            self._stats.add("truncations")
            t.offset = t.line = 0
            rows, top = read(0)
        while rows:
            now = self._clock()
            held = next((i for i, row in enumerate(rows) if self._holds(row, now)), None)
            if held is not None:
                rows = rows[:held]
            if rows:
                self._commit_rows(t, rows)
                await anyio.sleep(0)
            if held is not None or t.offset >= top:
                return
            rows, top = read(t.offset)

    def _holds(self, row: dict[str, object], now: float) -> bool:
        reader = registry_reader_for(row, SQLITE_ROWS, self._formats)
        return reader is not None and reader.holds is not None and reader.holds(row, now)

    def _commit_rows(self, t: _Tracked, rows: list[dict[str, object]]) -> None:
        """Ingest ``rows`` and move the rowid watermark in one transaction; then count, log and notify."""
        now = self._clock()
        lines = [
            RawLine(int(row[ROWID]), b"", int(row.get(OVERSIZED, 0)))  # type: ignore[call-overload]  # INTEGER rowid
            for row in rows
        ]
        end_rowid = lines[-1].number
        with transaction(self._conn):
            results = [
                ingest.ingest_record(
                    self._conn,
                    row,
                    SQLITE_ROWS,
                    now,
                    self._redactor,
                    path=t.path,
                    line=int(row[ROWID]),  # type: ignore[call-overload]  # an INTEGER rowid
                    formats=self._formats,
                    join_window_s=self._join_window_s,
                )
                for row in rows
            ]
            t_line = t.line + len(rows)
            put_watermark(self._conn, Watermark(t.path, t.inode, end_rowid, t_line), now, self._host)
        t.offset, t.line = end_rowid, t_line
        changed = self._account(t, Batch(lines, end_rowid, t_line), results, 0)
        for block_id in changed:
            try:
                self._notify(block_id)
            except Exception:
                log.exception("notify failed", block_id=block_id)

    def _restart(self, t: _Tracked, message: str, st: os.stat_result) -> None:
        log.warning(message, file=t.path, line=t.line, offset=t.offset, size=st.st_size)
        self._stats.add("truncations")
        t.offset = t.line = t.fingerprint_len = 0
        t.fingerprint = ""
        t.mid_line = False
        with transaction(self._conn):
            put_watermark(self._conn, self._watermark(t), self._clock(), self._host)

    def _commit(self, t: _Tracked, fd: int, batch: Batch) -> None:
        """Ingest ``batch`` and move the watermark in one transaction; then count, log and notify."""
        now = self._clock()
        results: list[ingest.LineResult] = []
        fp_len = min(FINGERPRINT_BYTES, batch.end_offset)
        fingerprint = t.fingerprint if fp_len == t.fingerprint_len else fingerprint_of(os.pread(fd, fp_len, 0))
        new = Watermark(t.path, t.inode, batch.end_offset, batch.end_line, fingerprint, fp_len)
        pending: int | None = None
        with transaction(self._conn):
            for raw in batch.lines:
                if t.json_document:
                    results.append(ingest.LineResult(ingest.FOREIGN, reason=JSON_DOCUMENT_REASON))
                else:
                    results.append(
                        ingest.ingest_line(
                            self._conn,
                            raw,
                            now,
                            self._redactor,
                            path=t.path,
                            formats=self._formats,
                            join_window_s=self._join_window_s,
                        )
                    )
            put_watermark(self._conn, new, now, self._host)
            if any(r.trace_id for r in results):
                pending = pending_records(self._conn)
        start_offset = t.offset
        t.offset, t.line, t.mid_line = batch.end_offset, batch.end_line, batch.mid_line
        t.fingerprint, t.fingerprint_len = fingerprint, fp_len
        t.idle_stat = None
        changed = self._account(t, batch, results, batch.end_offset - start_offset)
        if pending is not None:
            self._stats.set_pending_traces(pending)
        for block_id in changed:
            try:
                self._notify(block_id)
            except Exception:
                log.exception("notify failed", block_id=block_id)

    def _account(self, t: _Tracked, batch: Batch, results: Sequence[ingest.LineResult], nbytes: int) -> list[str]:
        """Count and log a committed batch; return the changed block ids, first change first."""
        stats = self._stats
        path = t.path
        stats.add("lines_read", sum(1 for raw in batch.lines if not raw.continuation))
        stats.add("bytes_read", nbytes)
        for result in results:
            if result.redacted:
                stats.redacted(result.redacted)
            stats.by_format("rejected_attempts", result.reader, result.rejected_attempts)
            stats.by_format("rejected_suggestions", result.reader, result.rejected_suggestions)
        changed: dict[str, None] = {}
        for raw, r in zip(batch.lines, results, strict=True):
            changed.update(dict.fromkeys(r.changed))
            if r.refused:
                stats.add("refused_events", len(r.refused))
                self._throttle.warning(
                    f"refused:{path}", "block event refused", file=path, line=raw.number, reason=r.refused[0]
                )
            if r.outcome == ingest.MALFORMED:
                stats.add("malformed_lines")
                stats.problem("malformed", LineProblem(path, raw.number, r.reason, self._clock()))
                self._throttle.warning(
                    f"malformed:{path}", "malformed log line skipped", file=path, line=raw.number, reason=r.reason
                )
            elif r.outcome == ingest.FOREIGN:
                stats.add("foreign_lines")
                if (path, t.inode) not in self._warned_foreign:
                    self._warned_foreign.add((path, t.inode))
                    log.warning(
                        "log file holds lines that are not a block log; skipping them (one warning per file)",
                        file=path,
                        line=raw.number,
                        reason=r.reason,
                    )
            elif r.outcome == ingest.UNKNOWN:
                stats.add("unknown_events")
                self._throttle.warning(
                    f"unknown:{path}", "unknown event skipped", file=path, line=raw.number, reason=r.reason
                )
            elif r.outcome == ingest.OVERSIZED:
                stats.add("oversized_lines")
                self._throttle.warning(
                    f"oversized:{path}",
                    "oversized log line skipped unread",
                    file=path,
                    line=raw.number,
                    bytes=raw.length,
                    max_line_bytes=self._config.max_line_bytes,
                )
            elif r.outcome == SKIPPED:
                stats.add("skipped_lines")
            elif r.outcome == ingest.JOINED:
                stats.add("traces_joined")
            elif r.outcome == UNJOINABLE:
                stats.unjoinable(r.reason)
                log.debug(
                    f"{r.reader} trace names no block; not ingested",
                    file=path,
                    line=raw.number,
                    trace_id=r.trace_id,
                    reason=r.reason,
                )
        stats.add("blocks_changed", len(changed))
        return list(changed)

    # ----------------------------------------------------------------- handles

    def _watermark(self, t: _Tracked, path: str | None = None) -> Watermark:
        return Watermark(path or t.path, t.inode, t.offset, t.line, t.fingerprint, t.fingerprint_len)

    def _same_file(self, path: str, t: _Tracked) -> bool:
        """Whether ``path`` holds ``t``'s file: same inode and, past byte 0, the same first bytes."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if os.fstat(fd).st_ino != t.inode:
                return False
            return not t.fingerprint_len or fingerprint_of(os.pread(fd, t.fingerprint_len, 0)) == t.fingerprint
        finally:
            os.close(fd)

    def _held_fd(self, t: _Tracked) -> int | None:
        if t.fd is not None:
            self._open_fds.move_to_end(id(t))
        return t.fd

    def _open_path(self, path: str, t: _Tracked) -> int | None:
        """Open ``path`` for ``t`` and hold the handle; None when it is gone or is another inode."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        if os.fstat(fd).st_ino != t.inode:
            os.close(fd)
            return None
        t.fd = fd
        self._open_fds[id(t)] = t
        while len(self._open_fds) > self._config.max_open_files:
            _, oldest = self._open_fds.popitem(last=False)
            self._close_fd(oldest)
        return fd

    def _close_fd(self, t: _Tracked) -> None:
        self._open_fds.pop(id(t), None)
        if t.fd is not None:
            os.close(t.fd)
            t.fd = None

    # ----------------------------------------------------------------- run() loops

    async def _guarded(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run a pass under the lock; log and count a failure instead of raising it (a full rescan
        follows at the next ``poll_interval_s``)."""
        try:
            async with self._lock:
                await fn()
        except Exception:
            self._stats.add("errors")
            self._rescan_soon = True  # retried at the next poll_interval_s, watcher or not
            log.exception("analyzer pass failed; will retry")

    async def _poll_loop(self) -> None:
        """Every ``poll_interval_s``: restart the watcher when a log directory appeared or vanished,
        and rescan everything when due (see the module docstring and :func:`rescan_interval`)."""
        cfg = self._config
        last_full, last_cost = anyio.current_time(), 0.0
        while True:
            await anyio.sleep(cfg.poll_interval_s)
            roots_changed = self._existing_roots() != self._watched
            if roots_changed and self._watch_stop is not None:
                self._watch_stop.set()  # a log directory appeared or vanished: restart the watcher
            interval = rescan_interval(cfg, watching=self._watching, last_scan_s=last_cost)
            if roots_changed or self._rescan_soon or anyio.current_time() - last_full >= interval:
                self._rescan_soon = False
                started = anyio.current_time()
                await self._guarded(self._scan_all)
                last_full = anyio.current_time()
                last_cost = last_full - started

    async def _watch_loop(self) -> None:
        step = min(50, self._config.debounce_ms)
        while True:
            stop = anyio.Event()
            self._watch_stop = stop
            self._watched = self._existing_roots()
            if not self._watched:
                self._watching = False
                await stop.wait()
                continue
            if self._watching:
                self._rescan_soon = True  # a restart: what changed while it was down is found by a rescan
            self._watching = True
            try:
                async for changes in awatch(
                    *self._watched,
                    watch_filter=self._watch_filter,
                    debounce=self._config.debounce_ms,
                    step=step,
                    stop_event=stop,
                    ignore_permission_denied=True,
                ):
                    paths = {path for _, path in changes}
                    await self._guarded(partial(self._on_changes, paths))
            except Exception as exc:  # e.g. a watched directory removed; rescans go on meanwhile
                self._watching = False
                self._rescan_soon = True
                self._stats.add("errors")
                log.warning("file watch failed; restarting it", error=str(exc))
                await anyio.sleep(self._config.poll_interval_s)

    async def _stop_watcher_on_exit(self) -> None:
        """Wake watchfiles' thread when :meth:`run` ends (it would otherwise wait for its timeout)."""
        try:
            await anyio.sleep_forever()
        finally:
            if self._watch_stop is not None:
                self._watch_stop.set()

    def _watch_filter(self, change: Change, path: str) -> bool:
        if is_log_path(path.removesuffix(WAL_SUFFIX), self._roots):
            return True
        return change == Change.added and os.path.isdir(path)  # a new directory may hold log files
