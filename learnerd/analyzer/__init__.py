"""Log files → blocks (foyle TN005): watermarked tailing and one module per input format.

The daemon uses :class:`Analyzer` (see :mod:`learnerd.analyzer.analyzer`); writers of learnerd's own
block-log format use :func:`learnerd.analyzer.blocklog.event_line`.
"""

from learnerd.analyzer.analyzer import Analyzer, Notify
from learnerd.analyzer.stats import AnalyzerStats

__all__ = ["Analyzer", "AnalyzerStats", "Notify"]
