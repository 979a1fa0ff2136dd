"""Hot swap under load: while 8 clients ask continuously, the training reconciler of a real ``learnerd run``
commits a new adapter version; every request succeeds, each client sees the versions in order, and the
new version answers the question it was just taught (pushed with ``LearnerdClient.inject_probe``)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from learnerd.client import PROBE_TOKEN_ENV, LearnerdClient
from learnerd.store.dlm import read_document
from tests.qa_pairs import QA_PAIRS
from tests.support.daemon_process import free_port, wait_until
from tests.support.documents import qa_document
from tests.support.serving import client, serving_daemon, write_config

pytestmark = pytest.mark.slow

TRAINING = {"learning_rate": 1e-2, "max_steps": 40}
CLIENTS = 8
PROBE_TOKEN = "probe-token-0123456789abcdef"


def served_adapter(url: str) -> str | None:
    models = {m.id: m for m in client(url).models.list()}
    return models["notes"].model_extra["learnerd"]["adapter"] if "notes" in models else None


def test_a_commit_swaps_the_adapter_under_eight_clients_without_a_failed_request(tmp_path: Path, models_dir: Path):
    # routing = "always-adapter": the question is learned only by v0002, and every answer must name its version
    extra = '[serve]\nqueue_size = 64\nmax_tokens = 16\nrouting = "always-adapter"\n\n[rpc]\ndocument = "notes.dlm"\n'
    write_config(tmp_path, models_dir, extra, training=True)
    doc = qa_document(tmp_path / "docs" / "notes.dlm", QA_PAIRS[:1], training=TRAINING)
    dlm_id = read_document(doc).frontmatter.dlm_id
    question, answer = QA_PAIRS[1]
    messages = [{"role": "user", "content": question}]
    rpc = f"127.0.0.1:{free_port()}"
    with (
        serving_daemon(tmp_path, "--listen-rpc", rpc, env={PROBE_TOKEN_ENV: PROBE_TOKEN}) as (_, url),
        LearnerdClient(rpc_url=f"http://{rpc}", probe_token=PROBE_TOKEN) as learnerd,
    ):
        wait_until(lambda: served_adapter(url) == "v0001", timeout=300, what="v0001 served", interval=0.5)
        results: list[list[tuple[str, str]]] = [[] for _ in range(CLIENTS)]
        failures: list[BaseException] = []
        stop = threading.Event()

        def ask(mine: list[tuple[str, str]]) -> None:
            api = client(url)
            while not stop.is_set():
                try:
                    r = api.chat.completions.create(model="notes", messages=messages, max_tokens=8, temperature=0)
                except BaseException as exc:
                    failures.append(exc)
                    return
                mine.append((r.system_fingerprint, r.choices[0].message.content))

        threads = [threading.Thread(target=ask, args=(results[i],)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: all(results), timeout=120, what="every client answered")
            accepted = learnerd.inject_probe(question, answer, tags=["hot-swap"])  # a new cycle: v0002
            assert accepted["accepted"] is True
            wait_until(lambda: served_adapter(url) == "v0002", timeout=300, what="v0002 served", interval=0.5)
            counts = [len(r) for r in results]
            wait_until(
                lambda: all(len(r) >= c + 2 for r, c in zip(results, counts, strict=True)) or failures,
                timeout=120,
                what="two more answers per client",
            )
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
    assert failures == []
    v1, v2 = f"{dlm_id}@v0001", f"{dlm_id}@v0002"
    for mine in results:
        versions = [fp for fp, _ in mine]
        assert set(versions) <= {v1, v2} and versions[-1] == v2
        assert versions == sorted(versions)  # v0001 ... v0001, v0002 ... v0002: never back to the old one
    answers = {fp: {text for f, text in (x for r in results for x in r) if f == fp} for fp in (v1, v2)}
    assert answers[v2] == {answer}  # the new adapter learned it (greedy: one answer)
    assert answer not in answers[v1]
