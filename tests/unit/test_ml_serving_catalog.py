"""The served models' catalog: bases first (the configured ones, then each document's own base under its name),
one model per parseable .dlm document (id = stem, dlm_id too); the built-in random tiny model only when named."""

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


def test_each_documents_base_is_listed_by_name_and_the_tiny_model_only_when_named(tmp_path: Path):
    """Issue 60, finding 13: a document on SmolLM2 offers its base to compare against, under the name the document
    gives it; nothing names the random tiny model, so it is not offered."""
    docs = tmp_path / "docs"
    qa_document(docs / "ops.dlm", [("q?", "a")], base_model="smollm2-135m-instruct")

    assert [m.id for m in ModelCatalog([docs], []).models()] == ["smollm2-135m-instruct", "ops"]
    base = ModelCatalog([docs], []).find("smollm2-135m-instruct")
    assert (base.base_model, base.doc_key) == ("smollm2-135m-instruct", None)
    named = ModelCatalog([docs], ["learnerd/tiny-llama"]).models()
    assert [m.id for m in named] == ["learnerd/tiny-llama", "smollm2-135m-instruct", "ops"]
