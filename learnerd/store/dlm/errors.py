"""The one exception type of the .dlm document model."""

from __future__ import annotations

from pathlib import Path


class DocumentError(ValueError):
    """A .dlm document (or one of its sections) is malformed.

    Attributes:
        message: what is wrong, without the location.
        path: the file, or None for text that came from elsewhere.
        line: 1-based line number in the file (for a section built in memory, the line within the
            section); always >= 1.
    """

    def __init__(self, message: str, *, path: str | Path | None = None, line: int = 1) -> None:
        self.message = message
        self.path = Path(path) if path is not None else None
        self.line = max(1, int(line))
        super().__init__(f"{self.path if self.path is not None else '<text>'}:{self.line}: {message}")
