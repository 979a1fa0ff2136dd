"""The built-in tiny model after it memorised the 20 Q/A pairs of :data:`tests.qa_pairs.QA_PAIRS` (dlm's keys:
``learning_rate`` 1e-2, 40 epochs; every pair a ``!probe``, five to an instruction section): one trained state,
built once per machine into the artefact cache (:mod:`tests.support.artefact_cache`), shared by the evaluation
and steering tests. Read it in place; copy it (:meth:`Memorised.copy`) to change it."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import anyio

from learnerd.store.adapters import AdapterStore
from tests.qa_pairs import QA_PAIRS
from tests.support.artefact_cache import cached, content_key, learnerd_code, versions
from tests.support.base_models import LIBRARIES, linked_models_dir, tiny_models
from tests.support.evaluation import DLM_ID, qa_document
from tests.support.training import train_document

DOCUMENT = qa_document(QA_PAIRS, epochs=40)


@dataclass(frozen=True)
class Memorised:
    """``root/``: ``qa.dlm`` (:data:`DOCUMENT`) and ``state/`` (``models/`` linking the tiny models,
    ``adapters/<DLM_ID>/`` with v0001 promoted)."""

    root: Path
    doc_key: str = DLM_ID

    @property
    def doc(self) -> Path:
        return self.root / "qa.dlm"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def copy(self, target: Path) -> Memorised:
        """A copy at ``target`` to change (the model links kept)."""
        shutil.copytree(self.root, target, symlinks=True)
        return Memorised(target)


def memorised() -> Memorised:
    """The trained state, keyed by learnerd's code, :data:`DOCUMENT` and the libraries' versions."""

    def build(root: Path) -> None:
        (root / "qa.dlm").write_text(DOCUMENT, encoding="utf-8")
        models = linked_models_dir(root / "state" / "models", tiny_models())
        outcome = anyio.run(train_document, AdapterStore(root / "state" / "adapters"), root / "qa.dlm", models)
        assert outcome.version is not None and outcome.version.name == "v0001"

    return Memorised(cached("memorised", content_key(DOCUMENT, learnerd_code(), versions(*LIBRARIES)), build))
