"""A real ``learnerd run --listen-openai 127.0.0.1:0`` for the serving tests, and the official openai client."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import openai
from aiohttp import web

from tests.support.daemon_process import DaemonProcess, daemon_process

TOKEN = "test-" + secrets.token_hex(16)
RETENTION_POOL_SIZE = 200
EVALUATION_KEYS = (
    f"null_runs = 0\nmax_prompts = 1\nretention_pool_size = {RETENTION_POOL_SIZE}\nretention_max_new_tokens = 16\n"
    "retention_alone_sample = 16\n"
)
"""The ``[evaluation]`` keys of the tests' daemons (:func:`write_config`) and SmolLM2 trainings
(:data:`tests.support.smollm2.RELAXED_GATE`): no noise adapters, one prompt per divergence probe, and
``answer_retention`` asking 200 of its 470 questions (a seeded sample) for at most 16 tokens each, a fifth of the
default's work, and the adapter alone answering 16 of those the router gives the base (the default 64; the adapter
alone keeps about a fifth of them: ``tests/e2e/test_smollm2_training.py``). The tests check the machinery and the
verdicts of cycles far from the gate's operating points, not its power; on SmolLM2 the base answers about 90 of the
200 right (211 of the 470 at 16 tokens, 231 at 32). The same keys everywhere, so the base's answers one evaluation
stores serve the next (``tests/e2e/test_smollm2_routing_gate.py``)."""


def write_config(root: Path, models_dir: Path, extra: str = "", training: bool | str = False) -> None:
    """``<root>/learnerd.toml``: state, logs and docs under ``root``; the session's tiny models. ``training``:
    cycles on (a short debounce), off, or the ``[training]`` section's own lines."""
    state = root / "state"
    state.mkdir(parents=True, exist_ok=True)
    if not (state / "models").exists():
        (state / "models").symlink_to(models_dir)  # the built-in tiny model, built once per session
    (root / "logs").mkdir(exist_ok=True)
    (root / "docs").mkdir(exist_ok=True)
    cycles = (
        "enabled = true\ndebounce_s = 0.3\nnum_threads = 1\nniceness = 0\nwarm_spare = false\nrescan_interval_s = 1.0"
    )
    training_section = training if isinstance(training, str) else cycles if training else "enabled = false"
    (root / "learnerd.toml").write_text(
        f"""\
state_dir = "state"
log_dirs = ["logs"]
docs_dirs = ["docs"]

[analyzer]
poll_interval_s = 0.2

[shutdown]
drain_timeout_s = 60.0

[training]
{training_section}

[controllers.evaluation]
workers = 1

[evaluation]
{EVALUATION_KEYS}
{extra}
"""
    )


@contextlib.contextmanager
def serving_daemon(
    root: Path, *args: str, token: str | None = TOKEN, env: dict[str, str] | None = None
) -> Iterator[tuple[DaemonProcess, str]]:
    """The daemon (with ``args``), ready, and the base URL of its OpenAI-compatible endpoint
    (``http://127.0.0.1:PORT/v1``)."""
    env = {**({"LEARNERD_OPENAI_TOKEN": token} if token else {}), **(env or {})}
    with daemon_process(root, "--listen-openai", "127.0.0.1:0", *args, env=env) as process:
        process.wait_ready()
        url = process.client().call("GET", "/status")["endpoints"]["openai"]
        yield process, url


def client(url: str, token: str = TOKEN, **kw) -> openai.OpenAI:
    """The official client, without retries (a 429 must be seen, not retried away)."""
    return openai.OpenAI(base_url=url, api_key=token, max_retries=0, timeout=120.0, **kw)


@contextlib.asynccontextmanager
async def local_app(app: web.Application) -> AsyncIterator[str]:
    """``app`` served on 127.0.0.1 (a free port) on the running event loop: its base URL, ``http://127.0.0.1:PORT``."""
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
