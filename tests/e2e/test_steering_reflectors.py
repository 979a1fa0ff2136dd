"""``learnerd evolve --reflector openai`` end to end: the real CLI on the built-in tiny model asks a real
local server speaking OpenAI's structured outputs (strict ``json_schema``, refused otherwise) for the
next deltas; a schema-violating reply is retried with the reason, and when every attempt violates the
schema the iteration's reflection is skipped and the run goes on."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import cli_env, learnerd_command
from tests.support.openai_server import structured_chat_server
from tests.support.steering import document_text

pytestmark = pytest.mark.slow


def test_a_schema_violating_reflector_is_retried_then_its_iteration_is_skipped(tmp_path):
    doc = tmp_path / "qa.dlm"
    doc.write_text(document_text(), encoding="utf-8")
    run_dir = tmp_path / "run"
    answered: list[int] = []  # iteration of each request, from the message it carries

    def reply(body: dict, schema: dict) -> str:
        ids = schema["properties"]["deltas"]["required"]  # answered per the schema the request carries
        iteration = int(body["messages"][1]["content"].split("\n", 1)[0].removeprefix("## Iteration "))
        answered.append(iteration)
        if iteration == 1:  # iteration 1: every attempt leaves out cluster 0
            return json.dumps({"deltas": {c: 0.5 for c in ids[1:]}, "summary": "forgot one"})
        return json.dumps({"deltas": {c: 0.25 * (iteration + 1) for c in ids}, "summary": f"after {iteration}"})

    with structured_chat_server(reply) as server:
        result = subprocess.run(
            learnerd_command(
                "evolve", str(doc), "--state-dir", str(tmp_path / "state"), "--run-dir", str(run_dir),
                "--reflector", "openai", "--reflector-base-url", server.base_url, "--reflector-model", "local",
                "--iterations", "3", "--minibatch-size", "2", "--max-new-tokens", "8", "--clusters", "4",
                "--delta-bound", "2", "--json", "--log-level", "warning",
            ),
            env=cli_env(OMP_NUM_THREADS="1"),
            capture_output=True,
            text=True,
            timeout=600,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "finished"
    assert answered == [0, 1, 1, 1, 2]  # iteration 1: three attempts (reflector_max_attempts)
    retry = server.requests[2]["messages"]
    assert retry[-1]["role"] == "user" and "deltas: missing cluster id(s) [0]" in retry[-1]["content"]
    assert all(r["response_format"]["json_schema"]["strict"] is True for r in server.requests)

    history = json.loads((run_dir / "history.json").read_text())["iterations"]
    zero, quarter = {str(c): 0.0 for c in range(6)}, {str(c): 0.25 for c in range(6)}
    assert [h["deltas"] for h in history] == [zero, quarter, quarter]  # the skipped one proposes its own deltas
    assert "reflection_skipped" not in history[0] and "reflection_skipped" not in history[2]
    assert "no valid steering_deltas reply from local in 3 attempt(s)" in history[1]["reflection_skipped"]
    assert [h["summary"] for h in history] == ["after 0", "", "after 2"]
    assert history[2]["proposed"] == {str(c): 0.75 for c in range(6)}
    assert "reflection skipped, the same deltas again" in result.stderr
