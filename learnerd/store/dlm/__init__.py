"""The .dlm document model: one import for the rest of learnerd.

* :mod:`learnerd.store.dlm.document` — :class:`Document`, :class:`Section`, parsing and serializing,
  section ids, in-memory edits (append / upsert / remove / strip auto-written sections);
* :mod:`learnerd.store.dlm.frontmatter` — :class:`Frontmatter`, :func:`new_ulid`;
* :mod:`learnerd.store.dlm.training` — :class:`TrainingConfig`, the ``training`` block's dlm keys (names,
  defaults, ranges) and learnerd's step budget; the training ingredients add theirs (:mod:`learnerd.training.config`);
* :mod:`learnerd.store.dlm.qa` — the ``### Q`` / ``### A`` grammar, :class:`QAPair`;
* :mod:`learnerd.store.dlm.edit` — :func:`new_document`, :func:`probe_section` (:func:`probe_section_ids`), and
  :func:`update_document`, the compare-and-swap write every learnerd writer uses;
* :mod:`learnerd.store.dlm.rows` — :func:`training_rows`, the rows a document trains on.

Every malformed input raises :class:`DocumentError` (file and line in ``path`` / ``line``).
"""

from learnerd.store.dlm.document import (
    HARVEST_MARKER_RE,
    MEDIA_TYPES,
    SECTION_TYPES,
    Document,
    Section,
    harvest_marker,
    parse_body,
    parse_bytes,
    parse_text,
    read_document,
)
from learnerd.store.dlm.edit import (
    ConflictError,
    DocumentTooLarge,
    UnrepresentableError,
    WriteOutcome,
    new_document,
    probe_section,
    probe_section_ids,
    update_document,
)
from learnerd.store.dlm.errors import DocumentError
from learnerd.store.dlm.frontmatter import CURRENT_DLM_VERSION, Frontmatter, new_ulid
from learnerd.store.dlm.qa import QAPair, parse_qa
from learnerd.store.dlm.rows import ChatRow, TextRow, training_rows
from learnerd.store.dlm.training import LEARNERD_LOOP_KEYS, TrainingConfig, TrainingConfigError

__all__ = [
    "CURRENT_DLM_VERSION",
    "HARVEST_MARKER_RE",
    "LEARNERD_LOOP_KEYS",
    "MEDIA_TYPES",
    "SECTION_TYPES",
    "ChatRow",
    "ConflictError",
    "Document",
    "DocumentError",
    "DocumentTooLarge",
    "Frontmatter",
    "QAPair",
    "Section",
    "TextRow",
    "TrainingConfig",
    "TrainingConfigError",
    "UnrepresentableError",
    "WriteOutcome",
    "harvest_marker",
    "new_document",
    "new_ulid",
    "parse_body",
    "parse_bytes",
    "parse_qa",
    "parse_text",
    "probe_section",
    "probe_section_ids",
    "read_document",
    "training_rows",
    "update_document",
]
