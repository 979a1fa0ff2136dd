"""The OpenAI-compatible endpoint of a real ``learnerd run`` on 127.0.0.1, driven by the official ``openai``
client (and raw aiohttp for what a well-behaved client never sends): models, completions, streaming,
and hostile input."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import aiohttp
import openai
import pytest

from learnerd.client import SEARCH_TOKEN_ENV, AsyncLearnerdClient, LearnerdClient
from learnerd.ml.base_model import load_model_directory, resolve_base_model
from learnerd.ml.retrieved_examples import with_examples
from learnerd.ml.rows import ChatMessage, render_chat
from learnerd.store.adapters import AdapterStore
from learnerd.store.dlm import read_document
from tests.conftest import REPO_ROOT, cli_env, learnerd_command
from tests.qa_pairs import QA_PAIRS
from tests.support.daemon import append_blocks
from tests.support.daemon_process import free_port, wait_until
from tests.support.documents import qa_document
from tests.support.manual import doc_block
from tests.support.serving import TOKEN, client, serving_daemon, write_config
from tests.support.tied_model import commit_noise_adapter

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
SEARCH_TOKEN = "search-token-0123456789abcdef"
BLOCKS = {
    "01HSERVEAAAAAAAAAAAAAAAAAA": ("list the files in the current directory", "ls -la"),
    "01HSERVEBBBBBBBBBBBBBBBBBB": ("show the disk usage of this folder", "du -sh ."),
    "01HSERVECCCCCCCCCCCCCCCCCC": ("print the working directory", "pwd"),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, models_dir: Path):
    root = tmp_path_factory.mktemp("serve")
    write_config(root, models_dir, "[serve]\nqueue_size = 4\nmax_tokens = 16\nmax_body_bytes = 65536\n")
    doc = qa_document(root / "docs" / "notes.dlm", QA_PAIRS[:2])
    text = doc.read_text().replace("---\n", '---\nsystem_prompt: "You answer in one word."\n', 1)
    doc.write_text(text)
    append_blocks(root / "logs" / "blocks.jsonl", BLOCKS)
    env = {SEARCH_TOKEN_ENV: SEARCH_TOKEN}
    with serving_daemon(root, "--listen-search", "127.0.0.1:0", env=env) as (process, url):
        yield process, url, read_document(doc).frontmatter.dlm_id


def test_models_list_names_the_bases_and_each_document(served):
    _, url, dlm_id = served
    models = {m.id: m for m in client(url).models.list()}
    assert {"learnerd/tiny-llama", "notes"} <= set(models) <= {"learnerd/tiny-llama", "notes", "learned"}
    notes = models["notes"].model_extra["learnerd"]
    assert notes == {
        "kind": "document",
        "base_model": "learnerd/tiny-llama",
        "dlm_id": dlm_id,
        "adapter": None,
        "rejected": None,
    }
    assert models["learnerd/tiny-llama"].model_extra["learnerd"]["kind"] == "base"


def test_a_chat_completion_and_the_same_one_streamed(served):
    _, url, dlm_id = served
    api = client(url)
    reply = api.chat.completions.create(model="notes", messages=QUESTION, max_tokens=8, temperature=0)
    assert reply.object == "chat.completion" and reply.model == "notes"
    choice = reply.choices[0]
    assert choice.finish_reason in ("stop", "length") and choice.message.role == "assistant"
    assert 1 <= reply.usage.completion_tokens <= 8
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.system_fingerprint == f"{dlm_id}@base"  # no adapter trained yet

    by_id = api.chat.completions.create(model=dlm_id, messages=QUESTION, max_tokens=8, temperature=0)
    assert by_id.choices[0].message.content == choice.message.content  # greedy: the same model, the same text

    chunks = list(
        api.chat.completions.create(
            model="notes",
            messages=QUESTION,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == choice.message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == choice.finish_reason
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens

    # the document's system prompt went first: the prompt is longer than the same question to the base
    base = api.chat.completions.create(model="learnerd/tiny-llama", messages=QUESTION, max_tokens=1, temperature=0)
    assert reply.usage.prompt_tokens > base.usage.prompt_tokens
    with_own_system = api.chat.completions.create(
        model="notes", messages=[{"role": "system", "content": "x"}, *QUESTION], max_tokens=1, temperature=0
    )
    assert with_own_system.usage.prompt_tokens < reply.usage.prompt_tokens


def test_seeded_sampling_repeats_and_stop_strings_cut(served):
    _, url, _ = served
    api = client(url)
    kw = {"model": "learnerd/tiny-llama", "messages": QUESTION, "max_tokens": 12, "temperature": 1.0, "seed": 7}
    first = api.chat.completions.create(**kw).choices[0].message.content
    assert api.chat.completions.create(**kw).choices[0].message.content == first
    greedy = api.chat.completions.create(model="notes", messages=QUESTION, max_tokens=12, temperature=0)
    text = greedy.choices[0].message.content
    stop = text[3:5]
    cut = api.chat.completions.create(model="notes", messages=QUESTION, max_tokens=12, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_errors_have_openai_statuses(served):
    _, url, _ = served
    api = client(url)
    wrong = client(url, token="wrong-" + TOKEN)
    with pytest.raises(openai.AuthenticationError, match="answers with a document's learned adapter"):
        wrong.chat.completions.create(model="notes", messages=QUESTION, max_tokens=1)
    assert [m.id for m in wrong.models.list()] == ["learnerd/tiny-llama"], "on loopback: the bases, not the documents"
    with pytest.raises(openai.NotFoundError) as err:
        api.chat.completions.create(model="no-such-model", messages=QUESTION)
    assert err.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        api.chat.completions.create(model="notes", messages=[])
    for extension in ({"rag_k": 1000}, {"rag_k": -1}, {"unknown": 1}):  # k over [admin] max_k, negative, a typo
        with pytest.raises(openai.BadRequestError):
            api.chat.completions.create(model="notes", messages=QUESTION, extra_body={"learnerd": extension})
    huge = api.chat.completions.create(model="notes", messages=QUESTION, max_tokens=10**9, temperature=0)
    assert huge.usage.completion_tokens <= 16 and huge.model_extra["learnerd"]["max_tokens"] == 16


def test_hostile_requests_get_4xx_never_5xx(served):
    _, url, _ = served
    auth = {"Authorization": f"Bearer {TOKEN}"}
    chat = f"{url}/chat/completions"

    async def main() -> list[tuple[int, str | None]]:
        async with aiohttp.ClientSession() as s:
            async with s.post(chat, json={"model": "notes", "messages": QUESTION}) as r:
                assert r.status == 401
                assert (await r.json())["error"]["code"] == "invalid_api_key"
            async with s.post(chat, data=b"{not json", headers=auth) as r:
                assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_request_error"
            async with s.post(chat, data=b"x" * (10 * 1024 * 1024), headers=auth) as r:
                assert r.status == 413
            async with s.get(f"{url}/nothing-here", headers=auth) as r:
                assert r.status == 404
            async with s.get(url.removesuffix("/v1") + "/healthz") as r:  # probes need no token
                assert r.status == 200

            body = {"model": "notes", "messages": QUESTION, "max_tokens": 4, "temperature": 0}

            async def one() -> tuple[int, str | None]:
                async with s.post(chat, json=body, headers=auth) as r:
                    await r.read()
                    return r.status, r.headers.get("Retry-After")

            return await asyncio.gather(*(one() for _ in range(200)))

    results = asyncio.run(main())
    statuses = [status for status, _ in results]
    assert set(statuses) <= {200, 429}
    assert statuses.count(429) > 0 and statuses.count(200) >= 4  # queue_size = 4: some queued, the rest refused
    assert all(int(retry) >= 1 for status, retry in results if status == 429)


def test_metrics_count_requests_and_tokens(served):
    process, url, _ = served
    client(url).chat.completions.create(model="notes", messages=QUESTION, max_tokens=3, temperature=0)
    text = process.client().call("GET", "/metrics")
    assert 'learnerd_serve_requests_total{model="notes",status="200"}' in text
    assert 'learnerd_serve_generated_tokens_total{model="notes"}' in text
    assert 'learnerd_serve_time_to_first_token_seconds_count{model="notes"}' in text


def test_retrieved_examples_are_quoted_in_the_system_message_and_not_logged(served, tiny_model_dir: Path):
    process, url, _ = served
    admin = process.client()
    wait_until(lambda: len(admin.call("POST", "/search", {"text": "x", "k": 3})) == 3, what="three examples indexed")
    question = "list all files in this directory"
    reply = client(url).chat.completions.create(
        model="notes",
        messages=[{"role": "user", "content": question}],
        max_tokens=2,
        temperature=0,
        extra_body={"learnerd": {"rag_k": 2}},
    )
    retrieved = reply.model_extra["learnerd"]["retrieved"]
    assert retrieved[0]["id"] == "01HSERVEAAAAAAAAAAAAAAAAAA"  # the nearest example first
    assert len(retrieved) == 2 and retrieved[0]["score"] >= retrieved[1]["score"]
    # the prompt is exactly: the document's system prompt and the quoted examples in one system message, the question
    _, tokenizer = load_model_directory(tiny_model_dir)
    turns = [ChatMessage("system", "You answer in one word."), ChatMessage("user", question)]
    prompt = with_examples(turns, retrieved)
    assert [m.role for m in prompt] == ["system", "user"]
    assert all(f"> {BLOCKS[hit['id']][0]}" in prompt[0].content for hit in retrieved)
    assert reply.usage.prompt_tokens == len(render_chat(tokenizer, prompt, add_generation_prompt=True))
    events = process.log_events()
    logged = [e for e in events if e.get("event") == "chat completion" and e.get("retrieved")]
    assert logged[-1]["retrieved"] == [hit["id"] for hit in retrieved] and "prompt" not in logged[-1]
    assert question not in json.dumps(events) and BLOCKS[retrieved[0]["id"]][0] not in json.dumps(logged)


def test_a_version_trained_without_retrieval_rows_is_quoted_only_what_it_has_not_learned(
    tmp_path: Path, models_dir: Path, tiny_model_dir: Path
):
    """The document's v0001 learned example A (its manifest) without retrieval rows: among the 2 examples nearest
    to the question, A is held back (``withheld``) and only the other is quoted; the base is quoted both."""
    write_config(tmp_path, models_dir, '[serve]\nmax_tokens = 2\nrouting = "always-adapter"\n')  # the version answers
    doc = qa_document(tmp_path / "docs" / "notes.dlm", QA_PAIRS[:2])
    append_blocks(tmp_path / "logs" / "blocks.jsonl", BLOCKS)
    base = resolve_base_model("learnerd/tiny-llama", cache_dir=tmp_path / "state" / "models")
    learned = "01HSERVEAAAAAAAAAAAAAAAAAA"
    commit_noise_adapter(
        AdapterStore(tmp_path / "state" / "adapters"), read_document(doc).frontmatter.dlm_id, base, learned=[learned]
    )
    question = [{"role": "user", "content": "list all files in this directory"}]
    with serving_daemon(tmp_path) as (process, url):
        admin = process.client()
        wait_until(
            lambda: len(admin.call("POST", "/search", {"text": "x", "k": 3})) == 3, what="three examples indexed"
        )
        rag = {"learnerd": {"rag_k": 2}}
        to_base = client(url).chat.completions.create(
            model="learnerd/tiny-llama", messages=question, max_tokens=1, temperature=0, extra_body=rag
        )
        to_adapter = client(url).chat.completions.create(
            model="notes", messages=question, max_tokens=1, temperature=0, extra_body=rag
        )
    nearest = to_base.model_extra["learnerd"]["retrieved"]
    assert [h["id"] for h in nearest][:1] == [learned] and len(nearest) == 2
    assert to_base.model_extra["learnerd"]["withheld"] == []
    served = to_adapter.model_extra["learnerd"]
    assert to_adapter.system_fingerprint.endswith("@v0001")
    assert served["withheld"] == [learned] and served["retrieved"] == nearest[1:]
    _, tokenizer = load_model_directory(tiny_model_dir)
    prompt = with_examples([ChatMessage("user", question[0]["content"])], nearest[1:])
    assert to_adapter.usage.prompt_tokens == len(render_chat(tokenizer, prompt, add_generation_prompt=True))


def test_the_chat_call_of_the_docs_sends_the_token_file(served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """docs/integrations.md's client: the official ``openai`` client, the token file of ``learnerd init`` its key."""
    _, url, dlm_id = served
    token_file = tmp_path / "home" / ".config" / "learnerd" / "token"
    token_file.parent.mkdir(parents=True)
    token_file.write_text(f"{TOKEN}\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    scope: dict = {}
    exec(doc_block("chat").replace("http://127.0.0.1:8078/v1", url).replace('"learned"', '"notes"'), scope)
    assert scope["reply"].system_fingerprint == f"{dlm_id}@base" and scope["reply"].choices[0].message.content


def test_the_learnerd_client_searches_and_chats_sync_and_async(served):
    process, url, _ = served
    search_url = process.client().call("GET", "/status")["endpoints"]["search"].removesuffix("/search")
    kw = {"search_url": search_url, "openai_url": url, "search_token": SEARCH_TOKEN, "openai_token": TOKEN}
    wait_until(lambda: len(process.client().call("POST", "/search", {"text": "x", "k": 3})) == 3, what="indexed")
    with LearnerdClient(**kw) as learnerd:
        hits = learnerd.search("print the working directory", k=1)
        reply = learnerd.chat("notes", QUESTION, max_tokens=4, temperature=0)
    assert [(h["id"], h["answer"]) for h in hits] == [("01HSERVECCCCCCCCCCCCCCCCCC", "pwd")]

    async def main():
        async with AsyncLearnerdClient(**kw) as learnerd:
            return await learnerd.search("print the working directory", k=1), await learnerd.chat(
                "notes", QUESTION, max_tokens=4, temperature=0
            )

    async_hits, async_reply = asyncio.run(main())
    assert async_hits == hits
    assert async_reply.choices[0].message.content == reply.choices[0].message.content


@pytest.mark.usefixtures("tiny_model_dir")
def test_the_quick_start_daemon_answers_a_chat_right_after_its_first_model_list(tmp_path: Path, models_dir: Path):
    """Issue 24, readiness: the README's quick-start config served with ``--listen-openai``, polled from the
    moment it starts by the official client as an assistant would. Until the daemon can answer, ``/v1/models``
    refuses (503 with ``Retry-After``) as ``/v1/chat/completions`` does; the first list it answers is followed
    by a chat completion answered without a 503 (no retries)."""
    examples = tmp_path / "examples"
    shutil.copytree(REPO_ROOT / "examples", examples)
    state = tmp_path / ".learnerd-demo"  # the config's state_dir, relative to it
    state.mkdir(mode=0o700)
    (state / "models").symlink_to(models_dir)  # the built-in tiny model, built once per session
    port = free_port()
    api = client(f"http://127.0.0.1:{port}/v1")
    command = learnerd_command("run", "--config", str(examples / "learnerd.toml"), "--no-train")
    with (tmp_path / "daemon.log").open("w") as log:
        proc = subprocess.Popen(
            [*command, "--listen-openai", f"127.0.0.1:{port}"],
            env=cli_env(LEARNERD_OPENAI_TOKEN=TOKEN),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        refusals: Counter = Counter()
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()[-3000:]
            try:
                models = api.models.list()
                break
            except openai.APIConnectionError:
                refusals["not listening"] += 1
            except openai.APIStatusError as exc:
                assert exc.status_code == 503 and int(exc.response.headers["Retry-After"]) >= 1
                refusals[503] += 1
            time.sleep(0.05)
        first = models.data[0].id
        reply = api.chat.completions.create(model=first, messages=QUESTION, max_tokens=4, temperature=0)
        assert reply.choices[0].finish_reason in ("stop", "length") and reply.usage.completion_tokens >= 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
