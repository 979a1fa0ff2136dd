"""The served models' catalog: bases first, one model per parseable .dlm document (id = stem, dlm_id too)."""

from __future__ import annotations

from pathlib import Path

from learnerd.ml.serving import ModelCatalog
from learnerd.store.dlm import read_document
from tests.support.documents import qa_document


def test_documents_become_models_addressable_by_name_and_dlm_id(tmp_path: Path):
    docs = tmp_path / "docs"
    notes = qa_document(docs / "notes.dlm", [("q?", "a")])
    qa_document(docs / "nested" / "ops.dlm", [("q2?", "b")], base_model="learnerd/tiny-llama-no-chat")
    (docs / "broken.dlm").write_text("---\nnot: [closed\n")  # mid-edit: left out, not fatal
    catalog = ModelCatalog([docs, tmp_path / "missing"], ["learnerd/tiny-llama"])

    models = catalog.models()
    # bases (configured, then the documents' built-in ones), then documents in path order
    assert [m.id for m in models] == ["learnerd/tiny-llama", "learnerd/tiny-llama-no-chat", "ops", "notes"]
    dlm_id = read_document(notes).frontmatter.dlm_id
    by_name, by_id = catalog.find("notes"), catalog.find(dlm_id)
    assert by_name == by_id and by_name.doc_key == dlm_id and by_name.relative_to == docs
    assert catalog.find("learnerd/tiny-llama").doc_key is None
    assert catalog.find("broken") is None and catalog.find("nothing") is None

    notes.unlink()
    assert catalog.find("notes") is None  # the catalog follows the directory
