"""The file watch on .dlm documents: which documents exist, and which changed.

Watched: every ``*.dlm`` file under the ``roots`` (the configured docs directories, recursively) and the
individually named ``files`` (documents learnerd writes that may live elsewhere: the probes' routed
documents, the RPC target), with their rollover documents (``learned-2.dlm`` beside ``learned.dlm``:
:func:`learnerd.store.routing.rollover_chain`). Names starting with ``.`` are skipped (editors' and
learnerd's own temp files).

A document *changed* when its ``(inode, size, mtime)`` differ from the last look; a new document counts as
changed, a vanished one as *removed*. :class:`DocumentWatcher` looks on every watchfiles event (inotify and
friends, debounced by ``debounce_ms``) and rescans everything every ``rescan_interval_s`` as the safety
net — which is also how directories created later are found; ``force_polling`` turns watchfiles off.
It only reports; the caller debounces changes into training (:class:`learnerd.runtime.debounce.Debouncer`)
and decides what a removal means (the daemon keeps a removed document's adapters and stops training it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import anyio
import anyio.to_thread
import structlog
from anyio.abc import TaskStatus
from watchfiles import Change, awatch

from learnerd.store.routing import in_chain, rollover_chain

log = structlog.get_logger(__name__)

DOCUMENT_SUFFIX = ".dlm"
_Stamp = tuple[int, int, int]  # (st_ino, st_size, st_mtime_ns)


def is_document_name(name: str) -> bool:
    """A ``.dlm`` file name that is not hidden."""
    return name.endswith(DOCUMENT_SUFFIX) and not name.startswith(".")


def scan_documents(roots: Iterable[Path], files: Iterable[Path] = ()) -> dict[Path, _Stamp]:
    """Every existing document under ``roots`` (recursively) and among ``files`` and their rollovers, with its
    stamp.

    Unreadable directories are skipped; a file that vanishes during the scan is left out.
    """
    found: dict[Path, _Stamp] = {}
    candidates: list[Path] = [chained for f in files for chained in rollover_chain(Path(f))]
    for root in roots:
        for directory, _dirs, names in os.walk(root):
            candidates += [Path(directory) / n for n in names if is_document_name(n)]
    for path in candidates:
        stamp = _stamp(path)
        if stamp is not None:
            found[path] = stamp
    return found


def _stamp(path: Path) -> _Stamp | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns) if path.is_file() else None


class DocumentWatcher:
    """Reports documents that change, appear or vanish under ``roots`` and among ``files``.

    Args:
        roots: directories watched recursively for ``*.dlm`` files (missing ones are picked up once they exist).
        files: individual documents watched (their parent directories, not recursively).
        on_change: called in the event loop with a document that appeared or changed.
        on_removed: called in the event loop with a document that vanished (None: only logged).
        rescan_interval_s: seconds between full rescans.
        debounce_ms: watchfiles' debounce (how long a burst of file-system events is gathered).
        force_polling: rescans only, no watchfiles.
    """

    def __init__(
        self,
        roots: Sequence[Path],
        files: Sequence[Path],
        on_change: Callable[[Path], None],
        on_removed: Callable[[Path], None] | None = None,
        *,
        rescan_interval_s: float = 10.0,
        debounce_ms: int = 50,
        force_polling: bool = False,
    ) -> None:
        self.roots = list(dict.fromkeys(Path(r) for r in roots))
        self.files = [Path(f) for f in dict.fromkeys(files) if not any(_under(Path(f), r) for r in self.roots)]
        self._on_change = on_change
        self._on_removed = on_removed
        self._rescan_s = rescan_interval_s
        self._debounce_ms = debounce_ms
        self._force_polling = force_polling
        self._known: dict[Path, _Stamp] = {}
        self._watched: list[tuple[Path, bool]] = []
        self._watch_stop: anyio.Event | None = None

    def documents(self) -> list[Path]:
        """The documents seen at the last look, sorted."""
        return sorted(self._known)

    def scan_now(self) -> list[Path]:
        """Take the first look (without reporting anything) and return the documents found, sorted."""
        self._known = scan_documents(self.roots, self.files)
        return self.documents()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled; reports started once the watcher is armed. Call :meth:`scan_now` first
        (otherwise every existing document is reported as new)."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._rescan_loop)
            if not self._force_polling:
                tg.start_soon(self._watch_loop)
                tg.start_soon(self._stop_watcher_on_exit)
                await anyio.sleep(0)  # let the watcher arm, then catch up on what changed meanwhile
            await self.rescan()
            task_status.started()

    async def rescan(self) -> None:
        """Look at every document now and report the differences."""
        found = await anyio.to_thread.run_sync(scan_documents, self.roots, self.files)
        for path in sorted(set(self._known) - set(found)):
            del self._known[path]
            self._report_removed(path)
        for path, stamp in sorted(found.items()):
            if self._known.get(path) != stamp:
                self._known[path] = stamp
                self._report_change(path)

    def _check(self, path: Path) -> None:
        stamp = _stamp(path)
        if stamp is None:
            if self._known.pop(path, None) is not None:
                self._report_removed(path)
        elif self._known.get(path) != stamp:
            self._known[path] = stamp
            self._report_change(path)

    def _report_change(self, path: Path) -> None:
        log.debug("document changed", path=str(path))
        self._on_change(path)

    def _report_removed(self, path: Path) -> None:
        log.info("document removed", path=str(path))
        if self._on_removed is not None:
            self._on_removed(path)

    def _watch_targets(self) -> list[tuple[Path, bool]]:
        """``(directory, recursive)`` pairs that exist now."""
        targets = [(r, True) for r in self.roots if r.is_dir()]
        parents = dict.fromkeys(f.parent for f in self.files)
        return targets + [(p, False) for p in parents if p.is_dir()]

    async def _rescan_loop(self) -> None:
        while True:
            await anyio.sleep(self._rescan_s)
            if self._watch_targets() != self._watched and self._watch_stop is not None:
                self._watch_stop.set()  # a directory appeared or vanished: restart the watcher
            try:
                await self.rescan()
            except OSError as exc:
                log.warning("document rescan failed; will retry", error=str(exc))

    async def _watch_loop(self) -> None:
        while True:
            stop = anyio.Event()
            self._watch_stop = stop
            self._watched = self._watch_targets()
            if not self._watched:
                await stop.wait()
                continue
            try:
                async with anyio.create_task_group() as tg:
                    for recursive in (True, False):
                        dirs = [d for d, r in self._watched if r == recursive]
                        if dirs:
                            tg.start_soon(self._watch, dirs, recursive, stop)
            except Exception as exc:  # e.g. a watched directory removed; rescans go on meanwhile
                log.warning("document watch failed; restarting it", error=str(exc))
                await anyio.sleep(self._rescan_s)

    async def _watch(self, dirs: list[Path], recursive: bool, stop: anyio.Event) -> None:
        files = set(self.files)

        def accept(change: Change, path: str) -> bool:
            p = Path(path)
            return is_document_name(p.name) and (recursive or any(in_chain(p, f) for f in files))

        async for changes in awatch(
            *dirs,
            watch_filter=accept,
            debounce=self._debounce_ms,
            step=min(50, self._debounce_ms),
            recursive=recursive,
            stop_event=stop,
            ignore_permission_denied=True,
        ):
            for path in sorted({Path(p) for _, p in changes}):
                self._check(path)

    async def _stop_watcher_on_exit(self) -> None:
        """Wake watchfiles' thread when :meth:`run` ends (it would otherwise wait for its timeout)."""
        try:
            await anyio.sleep_forever()
        finally:
            if self._watch_stop is not None:
                self._watch_stop.set()


def _under(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True
