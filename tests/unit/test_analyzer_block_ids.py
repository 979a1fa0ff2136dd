from pathlib import Path

from learnerd.analyzer.block_ids import block_ids_in_file
from learnerd.analyzer.blocklog import event_line
from learnerd.store.blocks import Cell


def test_block_ids_in_a_file_are_read_by_the_analyzers_readers_and_bad_lines_skipped(tmp_path: Path):
    path = tmp_path / "session.jsonl"
    path.write_text(
        event_line("context", "b-2", 1.0, cells=[Cell("markup", "List pods")])
        + "\n"
        + '{"not": "a block log"}\n'
        + "{torn\n"
        + event_line("executed", "b-1", 2.0, cell=Cell("code", "ls"), exit_code=0)
        + event_line("executed", "b-2", 3.0, cell=Cell("code", "kubectl get pods"), exit_code=0)
    )
    found = block_ids_in_file(path)
    assert found.block_ids == ["b-2", "b-1"] and found.skipped == 2


def test_a_codex_rollout_names_the_blocks_the_analyzer_makes_of_it(peer_data: Path, tmp_path: Path):
    """Codex CLI names its session only in a rollout's first line (a file-scoped format): the file's path goes
    to the reader as the analyzer gives it, so ``forget --source`` of a Codex session finds its blocks."""
    import anyio

    from learnerd.store.blocks import list_block_ids
    from tests.support.analyzer import Harness

    rollout = sorted((peer_data / "assistant-logs" / "codex").glob("rollout-*.jsonl"))[0]
    (tmp_path / "logs").mkdir()
    copy = tmp_path / "logs" / rollout.name
    copy.write_bytes(rollout.read_bytes())
    harness = Harness(tmp_path, [tmp_path / "logs"])
    anyio.run(harness.analyzer().sync)
    learned = list_block_ids(harness.conn)
    found = block_ids_in_file(copy)
    assert learned and all(b.startswith("codex:") for b in found.block_ids)
    assert sorted(found.block_ids) == sorted(learned)


def test_an_atuin_history_names_its_rows_blocks(peer_data: Path, tmp_path: Path):
    from tests.support.assistant_logs import build_history

    found = block_ids_in_file(build_history(peer_data, tmp_path / "atuin"))
    assert len(found.block_ids) == 19 and found.skipped == 1  # 20 rows, one soft-deleted
