"""The promotion gate end to end (docs/evaluation.md, "The promotion gate"): ``learnerd train`` of a document
the tiny model learns is promoted; a bad cycle of the same document (``learning_rate: 0.5``, trained fresh)
is rejected — ``current`` does not move, a real ``learnerd run`` serves the previous version to the official
``openai`` client and names the rejected one in ``/v1/models``, and the rejection is shown by
``learnerd ctl status`` and ``learnerd eval --history``; the next cycle plans from the current version. The
same candidate evaluated again with other evaluation seeds gets the same verdict, check for check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from learnerd.daemon.config import load_config
from learnerd.eval.gate import decide
from learnerd.eval.probes.base import EvalOptions
from learnerd.eval.report import load_report
from learnerd.eval.settings import GateSettings
from learnerd.eval.suite import evaluate_version
from learnerd.ml.base_model import resolve_base_model
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.qa_pairs import QA_PAIRS
from tests.support.evaluation import qa_document, run_cli, run_cli_in_process
from tests.support.serving import client, serving_daemon, write_config

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

PAIRS = QA_PAIRS[:4]


@pytest.fixture(scope="module")
def first_cycle(tmp_path_factory, models_dir: Path) -> tuple[Path, dict]:
    """A root (``learnerd.toml``, ``docs/notes.dlm`` of :data:`PAIRS`, ``state/``) after ``learnerd train`` of the
    document's first cycle, and that command's JSON: both tests start from it (each on a copy, :func:`copy_of`)."""
    root = tmp_path_factory.mktemp("first-cycle")
    write_config(root, models_dir)
    doc = root / "docs" / "notes.dlm"
    doc.write_text(qa_document(PAIRS, epochs=20))
    good = json.loads(run_cli("train", str(doc), "--json", "--config", str(root / "learnerd.toml")).stdout)
    return root, good


def copy_of(first_cycle: tuple[Path, dict], tmp_path: Path) -> tuple[Path, dict]:
    """A copy of the first cycle's root under ``tmp_path`` (the config's paths are relative, the model link kept).
    The fixture proves ``learnerd train`` in a subprocess; the tests run their commands in this process
    (:func:`tests.support.evaluation.run_cli_in_process`: a terminal as wide as that of
    :func:`tests.support.evaluation.run_cli`)."""
    root, good = first_cycle
    shutil.copytree(root, tmp_path, symlinks=True, dirs_exist_ok=True)
    return tmp_path, good


def test_a_bad_cycle_is_rejected_and_the_previous_version_stays_served(tmp_path: Path, first_cycle):
    _, good = copy_of(first_cycle, tmp_path)
    config = ("--config", str(tmp_path / "learnerd.toml"))
    doc = tmp_path / "docs" / "notes.dlm"
    dlm_id = read_document(doc).frontmatter.dlm_id
    assert good["version"] == "v0001" and good["gate"]["outcome"] == "promoted", good["gate"]

    doc.write_text(doc.read_text().replace("learning_rate: 0.01", "learning_rate: 0.5"))
    bad = run_cli_in_process("train", str(doc), "--fresh", "--json", *config, check=False)
    assert bad.returncode == 1, bad.stderr[-2000:]
    gate = json.loads(bad.stdout)["gate"]
    assert gate["version"] == "v0002" and gate["outcome"] == "rejected" and gate["baseline"] == 1
    assert [r.split(":")[0] for r in gate["reasons"]] == ["probe_recall"]
    store = AdapterStore(tmp_path / "state" / "adapters")
    assert store.current(dlm_id).name == "v0001" and store.rejected(dlm_id)[0].name == "v0002"
    assert (store.resolve(dlm_id, 2).path / "eval.json").is_file()  # kept for inspection

    # the next cycle plans from the current version, not the rejected
    again = run_cli_in_process("train", str(doc), *config)
    assert again.stdout == "nothing to train: the rows are unchanged since v0001\n"

    history = json.loads(run_cli_in_process("eval", str(doc), "--history", "--json", *config).stdout)
    assert [(p["name"], p["gate"], p["current"]) for p in history] == [
        ("v0001", "promoted", True),
        ("v0002", "rejected", False),
    ]
    assert "v0002 rejected: probe_recall" in run_cli_in_process("eval", str(doc), "--history", *config).stdout

    with serving_daemon(tmp_path, "--no-train") as (process, url):
        api = client(url)
        card = {m.id: m for m in api.models.list()}["notes"].model_extra["learnerd"]
        assert card["adapter"] == "v0001" and card["rejected"]["version"] == "v0002"
        question, answer = PAIRS[0]
        reply = api.chat.completions.create(
            model="notes", messages=[{"role": "user", "content": question}], max_tokens=16, temperature=0
        )
        assert reply.system_fingerprint == f"{dlm_id}@v0001" and reply.choices[0].message.content == answer
        status = process.client().call("GET", "/status")["documents"][str(doc)]
        assert status["served"] == "v0001" and status["rejected"]["version"] == "v0002"
        assert status["rejected"]["reasons"] == gate["reasons"]
        ctl = run_cli_in_process("ctl", "status", *config).stdout
        assert "v0002: probe_recall" in ctl


def test_the_same_candidate_evaluated_with_three_seeds_gets_one_verdict(tmp_path: Path, models_dir: Path, first_cycle):
    """Issue 59, gate stability. An evaluation's only seeds are its noise adapters' (``null_seed_base``); they move
    the z-scores, and no check of the gate reads a z-score: every check counts greedy answers or compares
    log-likelihoods. A second version's candidate evaluated with seeds 1, 2 and 3 (and torch's global seed set to
    each) is decided against the current version's report as ``learnerd train``'s own evaluation decided it (the
    test config's: no noise adapters at all, one prompt per divergence probe)."""
    copy_of(first_cycle, tmp_path)  # the first version, trained from PAIRS
    config = ("--config", str(tmp_path / "learnerd.toml"))
    doc = tmp_path / "docs" / "notes.dlm"
    doc.write_text(qa_document(QA_PAIRS[:8], epochs=20))
    trained = json.loads(run_cli_in_process("train", str(doc), "--json", *config).stdout)
    assert trained["gate"]["outcome"] == "promoted" and trained["gate"]["baseline"] == 1
    document = read_document(doc)
    store = AdapterStore(tmp_path / "state" / "adapters")
    current = load_report(store.resolve(document.frontmatter.dlm_id, 1).path / "eval.json")
    candidate = store.resolve(document.frontmatter.dlm_id, 2)
    base = resolve_base_model(document.frontmatter.base_model, cache_dir=models_dir)
    settings = load_config(tmp_path / "learnerd.toml").evaluation  # the test config's, as learnerd train read it
    torch.set_num_threads(1)
    decisions, null_means = [], []
    for seed in (1, 2, 3):
        torch.manual_seed(seed)
        # two noise adapters a seed: the fewest whose z-scores are calibrated (one is degenerate), and each seed's
        # pair differs from the others' ({1, 2}, {2, 3}, {3, 4})
        options = EvalOptions.from_settings(settings, null_seed_base=seed, null_runs=2)
        report = evaluate_version(document, candidate, base, options=options)
        decisions.append(decide(report, current, GateSettings(), current_version=1))
        null_means.append(report.null_stats["delta_kl"]["mean"])
    assert len(set(null_means)) == 3  # the seeds changed what they seed
    checks = {tuple((c.name, c.outcome, c.detail) for c in d.checks) for d in decisions}
    assert len(checks) == 1 and {d.promoted for d in decisions} == {True}
    assert [(c["name"], c["outcome"], c["detail"]) for c in trained["gate"]["checks"]] == list(checks.pop())
