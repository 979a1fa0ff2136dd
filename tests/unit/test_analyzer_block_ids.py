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
