"""Log files → blocks (foyle TN005): watermarked tailing and one module per input format.

Each format is a :class:`~learnerd.analyzer.reader.Reader` (the contract: :mod:`learnerd.analyzer.reader`)
in its own module — :mod:`~learnerd.analyzer.blocklog` (learnerd's block log), :mod:`~learnerd.analyzer.foyle`
(foyle's raw logs), :mod:`~learnerd.analyzer.own_log` (learnerd's own log lines, skipped) — listed in
:data:`learnerd.analyzer.registry.READERS`; every reader's block events end in one intake
(:mod:`learnerd.analyzer.ingest`). The daemon uses :class:`~learnerd.analyzer.analyzer.Analyzer`; writers of
learnerd's own block-log format use :func:`learnerd.analyzer.blocklog.event_line`.

The package itself imports nothing, so that ``[analyzer]`` (:mod:`learnerd.analyzer.settings`) loads alone.
"""
