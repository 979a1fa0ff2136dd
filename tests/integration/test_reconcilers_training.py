"""The training reconciler on real documents, the real tiny model and real child processes: it trains only
when the rows changed, refuses what it cannot train, waits out a person's edit, keeps a removed document's
adapters, writes injected probes into the document exactly once, and stops cleanly."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from learnerd.daemon.config import config_from_dict
from learnerd.reconcilers.training import TrainingReconciler, training_reconciler
from learnerd.runtime.reconcile import Result, TerminalError
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from learnerd.store.probe_journal import InjectedProbe, ProbeJournal
from learnerd.training.settings import TrainingSettings
from tests.qa_pairs import EXTRA_QA_PAIRS, QA_PAIRS
from tests.support.documents import qa_document

FAST = {"learning_rate": 1e-2, "max_steps": 2}
SETTINGS = TrainingSettings(num_threads=1, niceness=0, broken_document_retry_s=7.0)


@pytest.fixture
def env(tmp_path: Path, models_dir: Path):
    committed: list[tuple[str, str]] = []
    journal = ProbeJournal(tmp_path / "journal.jsonl")
    store = AdapterStore(tmp_path / "adapters")

    def on_committed(doc: str, version) -> None:  # the candidate passes a gate at once (the gate has its own tests)
        committed.append((doc, version.name))
        store.promote(version)

    reconciler = TrainingReconciler(
        store,
        SETTINGS,
        models_dir=models_dir,
        journal=journal,
        new_document_base_model="learnerd/tiny-llama",
        on_committed=on_committed,
    )
    yield reconciler, committed, tmp_path / "docs"
    journal.close()


def reconcile(reconciler: TrainingReconciler, path: Path) -> Result:
    return anyio.run(reconciler.reconcile, str(path))


def versions(reconciler: TrainingReconciler, path: Path) -> list[str]:
    return [v.name for v in reconciler.store.list_versions(read_document(path).frontmatter.dlm_id)]


def test_trains_when_rows_change_and_only_then(env):
    reconciler, committed, docs = env
    doc = qa_document(docs / "qa.dlm", QA_PAIRS[:4], training=FAST)
    assert reconcile(reconciler, doc) == Result()
    dlm_id = read_document(doc).frontmatter.dlm_id
    v1 = reconciler.store.current(dlm_id)
    meta = v1.metadata()
    assert v1.name == "v0001" and committed == [(str(doc), "v0001")]
    assert meta.section_ids == tuple(s.section_id for s in read_document(doc).sections)
    assert meta.final_loss < meta.start_loss and meta.steps == 2
    assert reconciler.changes["adapters_committed"] == 1 and len(reconciler.recent_cycles_s) == 1

    doc.write_bytes(doc.read_bytes())  # an identical save: new mtime, same rows
    assert reconcile(reconciler, doc) == Result()
    assert versions(reconciler, doc) == ["v0001"] and len(committed) == 1

    qa_document(doc, [*QA_PAIRS[:4]], training={**FAST, "max_steps": 3}, dlm_id=dlm_id)  # hyperparameters only
    assert reconcile(reconciler, doc) == Result() and versions(reconciler, doc) == ["v0001"]

    with doc.open("a") as f:  # a person adds a second section
        f.write(f"::instruction::\n### Q\n{EXTRA_QA_PAIRS[0][0]}\n\n### A\n{EXTRA_QA_PAIRS[0][1]}\n")
    assert reconcile(reconciler, doc) == Result()
    v2 = reconciler.store.current(dlm_id).metadata()
    assert versions(reconciler, doc) == ["v0001", "v0002"] and committed[-1] == (str(doc), "v0002")
    assert v2.parent_version == 1 and len(v2.new_section_ids) == 1 and v2.extra["mode"] == "incremental"


@pytest.mark.parametrize(
    ("base_model", "training", "message"),
    [
        ("smollm2-13m", FAST, "smollm2-13m' is not a built-in model, a dlm registry key"),
        ("learnerd/tiny-llama", {**FAST, "adapter": "qlora"}, "training.adapter 'qlora' needs a GPU"),
        ("learnerd/tiny-llama", {**FAST, "lora_rank": 4}, "unknown key(s) in training: lora_rank"),
    ],
)
def test_what_cannot_be_trained_is_refused_terminally(env, base_model, training, message):
    reconciler, committed, docs = env
    doc = qa_document(docs / "bad.dlm", QA_PAIRS[:2], training=training, base_model=base_model)
    with pytest.raises(TerminalError) as info:
        reconcile(reconciler, doc)
    assert str(info.value).startswith(f"{doc}: ") and message in str(info.value)
    assert committed == [] and reconciler.store.doc_keys() == []


def test_a_document_mid_edit_is_checked_again_later(env):
    reconciler, committed, docs = env
    doc = docs / "editing.dlm"
    qa_document(doc, QA_PAIRS[:2], training=FAST)
    doc.write_text(doc.read_text() + "### Q\nhalf-typed question\n")  # no ### A yet
    assert reconcile(reconciler, doc) == Result(requeue_after=SETTINGS.broken_document_retry_s)
    doc.write_text("---\ndlm_id: [unclosed\n---\n")
    assert reconcile(reconciler, doc) == Result(requeue_after=SETTINGS.broken_document_retry_s)
    assert committed == []


def test_a_removed_document_keeps_its_adapters(env):
    reconciler, _, docs = env
    doc = qa_document(docs / "gone.dlm", QA_PAIRS[:2], training=FAST)
    reconcile(reconciler, doc)
    dlm_id = read_document(doc).frontmatter.dlm_id
    doc.unlink()
    assert reconcile(reconciler, doc) == Result()
    assert [v.name for v in reconciler.store.list_versions(dlm_id)] == ["v0001"]
    assert reconciler.store.current(dlm_id).name == "v0001"


def test_a_copied_document_sharing_a_dlm_id_is_refused(env):
    reconciler, committed, docs = env
    doc = qa_document(docs / "a.dlm", QA_PAIRS[:2], training=FAST)
    reconcile(reconciler, doc)
    copy = docs / "copy.dlm"
    shutil.copy(doc, copy)
    with open(copy, "a") as f:
        f.write("::instruction::\n### Q\nextra?\n\n### A\nyes\n")
    with pytest.raises(TerminalError, match="is also the id of"):
        reconcile(reconciler, copy)
    assert len(committed) == 1


def test_injected_probes_are_written_once_even_when_the_consume_fails(env, monkeypatch):
    reconciler, committed, docs = env
    doc = docs / "learned.dlm"  # does not exist yet: the first drain creates it
    journal = reconciler.journal
    probes = [
        InjectedProbe(InjectedProbe.new_id(), str(doc), "What does ls do?", "Lists files", ("shell",)),
        InjectedProbe(InjectedProbe.new_id(), str(doc), "What is pwd?", "Prints the directory"),
        InjectedProbe(InjectedProbe.new_id(), str(doc), "What does ls do?", "Lists files", ("again",)),
        InjectedProbe(InjectedProbe.new_id(), str(docs / "other.dlm"), "Other?", "Not this document"),
    ]
    journal.append(probes)

    real_consume = journal.consume

    def crash(ids):  # the document write committed, then the process "died" before the consume
        raise OSError("disk gone")

    monkeypatch.setattr(journal, "consume", crash)
    with pytest.raises(OSError):
        reconcile(reconciler, doc)
    first = read_document(doc)
    assert len(journal.pending()) == 4 and committed == []
    monkeypatch.setattr(journal, "consume", real_consume)

    assert reconcile(reconciler, doc) == Result()
    document = read_document(doc)
    injected = document.auto_sections("rpc-inject/")
    assert document.to_bytes() == first.to_bytes()  # nothing appended twice
    assert [(s.harvest_source, s.qa_pairs()[0].question, s.qa_pairs()[0].probe) for s in injected] == [
        ("rpc-inject/shell", "What does ls do?", True),
        ("rpc-inject/what-is-pwd", "What is pwd?", True),
    ]
    assert [p.document for p in journal.pending()] == [str(docs / "other.dlm")]
    assert committed == [(str(doc), "v0001")]
    meta = reconciler.store.current(document.frontmatter.dlm_id).metadata()
    assert {s.section_id for s in injected} <= set(meta.section_ids)


def test_stop_cancels_a_cycle_in_flight(env):
    reconciler, committed, docs = env
    doc = qa_document(docs / "long.dlm", QA_PAIRS[:2], training={"learning_rate": 1e-2, "max_steps": 1_000_000})
    dlm_id = read_document(doc).frontmatter.dlm_id
    outcome: list[Result] = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _record(reconciler.reconcile(str(doc)), outcome))
            staging = reconciler.store.doc_dir(dlm_id) / "versions"
            with anyio.fail_after(60):
                while not list(staging.glob(".staging-*")):
                    await anyio.sleep(0.05)
            await anyio.sleep(1.0)  # the child is training by now
            reconciler.stop()
            with anyio.fail_after(15):
                while not outcome:
                    await anyio.sleep(0.05)
        assert reconciler.in_flight == {}
        with pytest.raises(Exception, match="stopping"):
            await reconciler.run_cycle(doc)

    anyio.run(main)
    assert outcome == [Result()] and committed == []
    assert reconciler.store.current(dlm_id) is None
    assert list((reconciler.store.doc_dir(dlm_id) / "versions").iterdir()) == []


async def _record(coro, into: list) -> None:
    into.append(await coro)


@pytest.mark.parametrize("own_block", [{}, {"retrieval_k": 0}], ids=["learnerds-default", "the-documents-own"])
def test_a_daemon_serving_retrieved_examples_trains_under_them_unless_the_document_says_otherwise(
    tmp_path: Path, models_dir: Path, tiny_model_dir: Path, own_block: dict
):
    """``[serve] rag_k = 3``: each of a document's 4 pairs is trained once more under its 3 nearest pairs, so a
    cycle has twice the rows (and steps) of the same document under a daemon that serves none — unless the
    document's own block sets ``retrieval_k``. The base is the tiny Llama named by its directory: a pretrained
    base's recipe (the built-in name trains without retrieval rows)."""
    steps = {}
    for rag_k in (0, 3):
        root = tmp_path / f"rag{rag_k}"
        (root / "state").mkdir(parents=True)
        (root / "state" / "models").symlink_to(models_dir)
        cfg = config_from_dict(
            {"state_dir": "state", "docs_dirs": ["docs"], "serve": {"rag_k": rag_k}, "training": {"num_threads": 1}},
            base=root,
        )
        training = {"num_epochs": 2, "min_steps": 0, "multi_turn_rows": 0, "retrieval_multi_turn": 0, **own_block}
        doc = qa_document(root / "docs" / "notes.dlm", QA_PAIRS[:4], training=training, base_model=str(tiny_model_dir))
        reconciler = training_reconciler(cfg)
        try:
            assert reconcile(reconciler, doc) == Result()
        finally:
            reconciler.journal.close()
        steps[rag_k] = reconciler.store.latest(read_document(doc).frontmatter.dlm_id).metadata().steps
    assert steps[0] == 2  # 4 rows, micro-batch 4, 2 epochs
    assert steps[3] == (2 * steps[0] if not own_block else steps[0])
