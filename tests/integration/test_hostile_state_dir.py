"""Issue 14, case 9: the state directory is secured before anything is created in it, another user's
files in it are refused, and a journaled probe may name only a document under ``docs_dirs`` or the
``[rpc] document``.

The planted files belong to uid 65534 (nobody): the tests chown them, so they need root, and skip
without it. Real daemon construction, the real state lock, the real CLI.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from learnerd.daemon.app import Daemon
from learnerd.daemon.statelock import StateLock
from learnerd.reconcilers.training import training_reconciler
from learnerd.store.probe_journal import JournalError
from learnerd.store.state_dir import UnsafeStateDir
from learnerd.training.settings import TrainingSettings
from tests.conftest import cli_env, learnerd_command
from tests.support.daemon import daemon_config

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's file needs root (chown)")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _journal_line(document: str, prompt: str = "Planted question?") -> str:
    probe = {"id": "f" * 32, "document": document, "prompt": prompt, "reference": "planted answer", "tags": []}
    return json.dumps({"op": "accept", "probe": probe}) + "\n"


def _open_state_dir(root: Path) -> Path:
    state = root / "state"
    state.mkdir()
    state.chmod(0o777)  # as a careless install leaves it: anyone may create files in it
    return state


def _plant_journal(state: Path, document: Path) -> Path:
    """A probe journal written by uid 65534 into the open state directory."""
    journal = state / "journals" / "injected-probes.jsonl"
    journal.parent.mkdir()
    journal.write_text(_journal_line(str(document)))
    for path in (journal.parent, journal):
        os.chown(path, NOBODY, NOBODY)
    return journal


def test_case9_the_lock_and_the_daemon_tighten_the_state_dir_first(tmp_path: Path, minilm) -> None:
    state = _open_state_dir(tmp_path)
    with StateLock(state):
        assert _mode(state) == 0o700
    state.chmod(0o777)
    cfg = daemon_config(tmp_path)
    daemon = Daemon(cfg, embedder=minilm)
    try:
        assert _mode(state) == 0o700, "0700 from the daemon's construction, not only once the service runs"
    finally:
        daemon.close()


@needs_root
def test_case9_a_journal_planted_by_another_user_is_refused_before_anything_is_created(tmp_path: Path, minilm):
    state = _open_state_dir(tmp_path)
    target = tmp_path / "elsewhere" / "chosen-by-them.dlm"
    journal = _plant_journal(state, target)
    cfg = daemon_config(tmp_path, training=TrainingSettings(enabled=True, warm_spare=False))
    with pytest.raises(UnsafeStateDir, match=f"{re.escape(str(journal))}.*uid {NOBODY}"):
        Daemon(cfg, embedder=minilm)
    assert _mode(state) == 0o700, "tightened before the refusal"
    assert sorted(p.name for p in state.iterdir()) == ["journals"], "nothing created: no database, no lock"
    assert not target.parent.exists(), "no file at the path the planted journal chose"
    assert journal.read_text() == _journal_line(str(target)), "their file is left as it was"


@needs_root
def test_case9_the_cli_refuses_a_planted_file_with_a_clear_error(tmp_path: Path) -> None:
    state = _open_state_dir(tmp_path)
    planted = state / "learnerd.db"
    planted.write_bytes(b"")
    os.chown(planted, NOBODY, NOBODY)
    (tmp_path / "logs").mkdir()
    result = subprocess.run(
        learnerd_command("run", "--once", "--state-dir", str(state), "--log-dir", str(tmp_path / "logs")),
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert f"{planted} (uid {NOBODY})" in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in state.iterdir()) == ["learnerd.db"], "not even the lock file was created"


def test_case9_a_journaled_document_outside_the_document_roots_is_refused(tmp_path: Path) -> None:
    cfg = daemon_config(tmp_path, training=TrainingSettings(enabled=True, warm_spare=False))
    journal = cfg.layout.probe_journal
    journal.parent.mkdir(parents=True)
    inside = cfg.docs_dirs[0] / "sub" / "notes.dlm"
    outside = tmp_path / "etc" / "cron.dlm"
    journal.write_text(_journal_line(str(inside), "Inside?") + _journal_line(str(outside)).replace("f" * 32, "e" * 32))
    with pytest.raises(JournalError, match=rf"injected-probes\.jsonl:2: .*{re.escape(str(outside))}"):
        training_reconciler(cfg)
    escaped = cfg.docs_dirs[0] / ".." / "escaped.dlm"  # in a docs dir by name only
    journal.write_text(_journal_line(str(escaped)))
    with pytest.raises(JournalError, match=r"escaped\.dlm"):
        training_reconciler(cfg)

    journal.write_text(_journal_line(str(inside), "Inside?"))
    reconciler = training_reconciler(cfg)  # within docs_dirs: accepted
    assert reconciler.journal is not None
    assert [p.prompt for p in reconciler.journal.pending()] == ["Inside?"]
    reconciler.journal.close()


@pytest.mark.parametrize("how", ["config", "flag"])
def test_a_symlinked_state_dir_is_refused_however_it_is_named(tmp_path: Path, how: str) -> None:
    (tmp_path / "real-state").mkdir(mode=0o700)
    (tmp_path / "state").symlink_to(tmp_path / "real-state")
    (tmp_path / "logs").mkdir()
    config = tmp_path / "learnerd.toml"
    config.write_text('state_dir = "state"\nlog_dirs = ["logs"]\n[training]\nenabled = false\n')
    extra = ["--config", str(config)] if how == "config" else ["--state-dir", str(tmp_path / "state")]
    result = subprocess.run(
        learnerd_command("run", "--once", "--log-dir", str(tmp_path / "logs"), *extra),
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    assert "symlink" in result.stderr and "Traceback" not in result.stderr
    assert list((tmp_path / "real-state").iterdir()) == [], "nothing is created through the link"


def test_entries_an_older_learnerd_left_readable_are_made_private_and_links_left_alone(tmp_path: Path) -> None:
    """docs/privacy.md: files 0600, directories 0700. A database, its WAL and an adapter an older version
    wrote 0644 / 0755 lose the group's and others' bits at start; the owner's (an executable bit) stay; a symbolic
    link (a shared models directory) is neither followed nor changed."""
    state = tmp_path / "state"
    adapter = state / "adapters" / "doc" / "versions" / "v0001"
    adapter.mkdir(parents=True)
    shared = tmp_path / "shared-models"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    (state / "models").symlink_to(shared)
    files = {state / "learnerd.db": 0o644, state / "learnerd.db-wal": 0o644, adapter / "weights": 0o664}
    files[state / "hook.sh"] = 0o755
    for path, mode in files.items():
        path.write_bytes(b"x")
        path.chmod(mode)
    for directory in (state, state / "adapters", adapter):
        directory.chmod(0o755)
    with StateLock(state):
        pass
    assert {p.name: _mode(p) for p in files} == {
        "learnerd.db": 0o600, "learnerd.db-wal": 0o600, "weights": 0o600, "hook.sh": 0o700,
    }  # fmt: skip
    assert _mode(state) == _mode(state / "adapters") == _mode(adapter) == 0o700
    assert _mode(shared) == 0o755 and (state / "models").is_symlink()
