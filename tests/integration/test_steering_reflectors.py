"""The OpenAI-compatible reflector and judge against a real local HTTP server speaking the
chat-completions protocol (aiohttp on 127.0.0.1), driven by the real ``openai`` client."""

from __future__ import annotations

import json
import re

import pytest

from learnerd.ml.base_model import load_model_directory
from learnerd.steering.chat import make_client
from learnerd.steering.clusters import eos_token_ids, load_or_build_clusters
from learnerd.steering.evolve import EvolutionSettings, SteeredModel, run_evolution
from learnerd.steering.judges import JudgeError, LLMJudge, MatchJudge
from learnerd.steering.pool import PoolItem
from learnerd.steering.processor import read_steering
from learnerd.steering.reflectors import (
    OpenAIReflector,
    ReflectionRequest,
    ReflectorError,
    Scores,
    Trial,
    format_messages,
    reflector_messages,
)
from tests.qa_pairs import QA_PAIRS
from tests.support.openai_server import chat_server
from tests.support.steering import one_thread

IDS = (0, 1, 2, 3)


def _request() -> ReflectionRequest:
    zero = dict.fromkeys(IDS, 0.0)
    return ReflectionRequest(
        iteration=0,
        deltas=zero,
        responses=(),
        scores=Scores(12.0, 0.5, 1 / 1.12, 0.4 / 1.12 + 0.3),
        cluster_descriptions={"clusters": [{"id": c, "kind": "k-means", "size": 1, "samples": ["x"]} for c in IDS]},
        summary="",
        trials=(Trial(zero, 0.6571),),
        cluster_ids=IDS,
        bounds=dict.fromkeys(IDS, (-2.0, 2.0)),
        scale=100.0,
    )


def _reply(deltas: dict, summary: str = "ok") -> str:
    return json.dumps({"deltas": deltas, "summary": summary})


VALID = {"0": 0.5, "1": -0.25, "2": 0, "3": 2.0}


def test_the_request_carries_the_strict_json_schema():
    request = _request()
    messages = reflector_messages(request)
    with chat_server(lambda body: _reply(VALID, "raised EOS")) as server:
        reflection = OpenAIReflector(make_client(server.base_url), "gpt-4o").reflect(request, messages)
    (body,) = server.requests
    assert body["model"] == "gpt-4o" and body["messages"] == messages
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["strict"] is True and response_format["json_schema"]["name"]
    schema = response_format["json_schema"]["schema"]
    assert schema["required"] == ["deltas", "summary"] and schema["additionalProperties"] is False
    deltas = schema["properties"]["deltas"]
    assert deltas["required"] == ["0", "1", "2", "3"] and deltas["additionalProperties"] is False
    assert all(deltas["properties"][i] == {"type": "number"} for i in "0123")
    assert reflection.deltas == {0: 0.5, 1: -0.25, 2: 0.0, 3: 2.0} and reflection.summary == "raised EOS"


def test_invalid_replies_are_rejected_and_retried():
    invalid = [
        _reply({"0": 0.5, "1": 0, "2": 0}),  # missing id 3
        _reply({**VALID, "4": 1.0}),  # extra id 4
        _reply({**VALID, "2": "0.5"}),  # a string value
        _reply({**VALID, "3": 2.5}),  # beyond the bound
        "not json",
    ]
    replies = iter([*invalid, _reply(VALID, "finally")])
    request = _request()
    with chat_server(lambda body: next(replies)) as server:
        reflection = OpenAIReflector(make_client(server.base_url), "m", max_attempts=6).reflect(
            request, reflector_messages(request)
        )
    assert reflection.summary == "finally" and reflection.deltas[3] == 2.0
    assert len(server.requests) == 6
    reasons = [
        r"missing cluster id\(s\) \[3\]",
        r"unknown cluster id\(s\) \[4\]",
        r"cluster 2's value '0.5' is not a finite number",
        r"cluster 3's value 2.5 is outside \[-2.0, 2.0\]",
        r"Expecting value",
    ]
    for n, (bad, reason) in enumerate(zip(invalid, reasons, strict=True), start=1):
        retry = server.requests[n]["messages"]
        assert retry[-2] == {"role": "assistant", "content": bad}
        assert retry[-1]["role"] == "user"
        assert re.search(reason, retry[-1]["content"]), (reason, retry[-1]["content"])
    assert server.requests[5]["response_format"] == server.requests[0]["response_format"]


def test_no_valid_reply_in_the_allowed_attempts_is_an_error():
    request = _request()
    with chat_server(lambda body: _reply({"0": 1})) as server:
        reflector = OpenAIReflector(make_client(server.base_url), "m", max_attempts=2)
        with pytest.raises(ReflectorError, match=r"in 2 attempt\(s\); last: deltas: missing cluster id"):
            reflector.reflect(request, reflector_messages(request))
    assert len(server.requests) == 2


def test_an_unreachable_endpoint_is_an_error():
    with chat_server(lambda body: "") as server:
        base_url = server.base_url
    request = _request()
    client = make_client(base_url, timeout_s=5.0)
    with pytest.raises(ReflectorError, match="failed"):
        OpenAIReflector(client, "m").reflect(request, reflector_messages(request))


def test_llm_judge_asks_for_a_strict_verdict_and_retries():
    replies = iter(['{"correct": "yes", "explanation": "x"}', '{"correct": true, "explanation": "it says Paris"}'])
    with chat_server(lambda body: next(replies)) as server:
        verdict = LLMJudge(make_client(server.base_url), "judge-model").judge("Capital of France?", "Paris", "Paris.")
    assert verdict.correct is True and verdict.explanation == "it says Paris"
    first = server.requests[0]
    assert first["response_format"]["json_schema"]["strict"] is True
    assert first["response_format"]["json_schema"]["schema"]["required"] == ["correct", "explanation"]
    assert "Paris." in first["messages"][-1]["content"] and "Capital of France?" in first["messages"][-1]["content"]
    with chat_server(lambda body: "{}") as server, pytest.raises(JudgeError):
        LLMJudge(make_client(server.base_url), "m", max_attempts=1).judge("q", "a", "r")


@pytest.mark.usefixtures("one_torch_thread")
def test_a_valid_reply_updates_the_deltas_and_the_summary(tiny_model_dir, minilm, tmp_path):
    """Two iterations of the loop with the chat reflector: its first proposal is what iteration 1
    evaluates, its summary is served back in the next message, and the messages written are those sent."""
    model, tokenizer = load_model_directory(tiny_model_dir)
    with one_thread():
        clusters = load_or_build_clusters(
            tokenizer,
            embedder_name=minilm.name,
            make_embedder=lambda: minilm,
            k=4,
            seed=0,
            eos_ids=eos_token_ids(tokenizer, model.generation_config),
            cache_root=tmp_path / "clusters",
        )
    ids = clusters.cluster_ids
    proposals = [
        ({str(c): 0.1 * c for c in ids}, "first: favour the later clusters"),
        ({str(c): -0.5 for c in ids}, "second: everything down"),
    ]

    def reply(body: dict) -> str:
        deltas, summary = proposals[len(seen)]
        seen.append(body)
        return _reply(deltas, summary)

    seen: list[dict] = []
    pool = [PoolItem(q, a, f"pair {i}") for i, (q, a) in enumerate(QA_PAIRS[:4])]
    run_dir = tmp_path / "run"
    with chat_server(reply) as server:
        outcome = run_evolution(
            run_dir,
            model=SteeredModel(model, tokenizer, max_new_tokens=6),
            clusters=clusters,
            pool=pool,
            judge=MatchJudge(),
            reflector=OpenAIReflector(make_client(server.base_url), "gpt-4o"),
            settings=EvolutionSettings(iterations=2, minibatch_size=2, max_new_tokens=6, delta_bound=1.0),
        )
    history = outcome.history
    assert outcome.status == "finished" and len(history) == 2 and len(server.requests) == 2
    assert history[0]["deltas"] == {str(c): 0.0 for c in ids}
    assert history[0]["proposed"] == history[1]["deltas"] == {str(c): 0.1 * c for c in ids}
    assert [h["summary"] for h in history] == [p[1] for p in proposals]
    assert read_steering(run_dir / "deltas_current.json").deltas == {c: -0.5 for c in ids}
    second_message = server.requests[1]["messages"][-1]["content"]
    assert "[iteration 0] first: favour the later clusters" in second_message
    assert json.dumps({str(c): 0.1 * c for c in ids}) in second_message  # the deltas used
    for n, request in enumerate(server.requests):
        assert (run_dir / f"reflector_message_{n:03d}.txt").read_text() == format_messages(request["messages"])
