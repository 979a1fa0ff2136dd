"""Log files → blocks (foyle TN005): watermarked tailing and one module per input format.

Each format is a :class:`~learnerd.analyzer.reader.Reader` (the contract: :mod:`learnerd.analyzer.reader`)
in its own module — :mod:`~learnerd.analyzer.blocklog` (learnerd's block log), :mod:`~learnerd.analyzer.foyle`
(foyle's raw logs), :mod:`~learnerd.analyzer.claude_code`, :mod:`~learnerd.analyzer.codex` and
:mod:`~learnerd.analyzer.otel_genai` (assistants' sessions, under the shared rules of
:mod:`~learnerd.analyzer.sessions`), :mod:`~learnerd.analyzer.atuin` (a SQLite history read through
:mod:`~learnerd.analyzer.sqlite_source`), :mod:`~learnerd.analyzer.own_log` (learnerd's own log lines, skipped) —
listed in :data:`learnerd.analyzer.registry.READERS`; every reader's block events end in one intake
(:mod:`learnerd.analyzer.ingest`). Which files are logs is :mod:`~learnerd.analyzer.discovery`, how they are
read from a watermark :mod:`~learnerd.analyzer.tail`, what they hold :mod:`~learnerd.analyzer.formats`
(``learnerd sources``) and :mod:`~learnerd.analyzer.block_ids` (``learnerd forget --source``). The daemon uses
:class:`~learnerd.analyzer.analyzer.Analyzer` (counters: :mod:`~learnerd.analyzer.stats`); writers of learnerd's
own block-log format use :func:`learnerd.analyzer.blocklog.event_line`.

The package itself imports nothing, so that ``[analyzer]`` (:mod:`learnerd.analyzer.settings`) loads alone.
"""
