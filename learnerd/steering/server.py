"""An external inference server that ``learnerd evolve`` owns for the run (``[steering.server]``).

learnerd generates in process; a user who serves with SGLang, vLLM or learnerd's own endpoint can let
evolve drive that server instead. Every iteration (:func:`learnerd.steering.evolve.run_evolution`'s
``on_deltas``):

1. the server evolve started for the previous iteration is stopped: ``stop_signal`` to its process
   group, ``SIGKILL`` after ``stop_timeout_s`` (a GPU is free again before the next deltas are loaded);
2. the iteration's deltas are in a steering file (``deltas_current.json``) and ``start`` runs in a
   shell with ``{steering}`` replaced by that file's absolute path (shell-quoted), in a new session,
   its output appended to ``server.log`` in the run directory;
3. ``health_url`` is polled until it answers 2xx: exponential backoff from 0.1 s, doubling up to
   2 s between tries, for at most ``ready_timeout_s``; a server that exits first, or is not ready by
   then, is a :class:`ServerError`;
4. the minibatch is answered through the server's OpenAI-compatible chat completions (greedy:
   ``temperature`` 0, ``max_tokens`` = ``max_new_tokens``) by :class:`ServedModel`.

The last server is stopped when the run ends (finished, stopped or failed). Only processes evolve
started are ever signalled: a server the user started must be stopped by the user first.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from learnerd.ml.generate import Reply
from learnerd.steering.settings import ServerSettings

log = structlog.get_logger(__name__)

FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0
LOG_FILE = "server.log"


class ServerError(RuntimeError):
    """The server did not start, did not become healthy in time, or failed a chat completion."""


class ExternalServer:
    """The server process of ``settings.start`` (module docstring); a context manager that stops it on exit.

    Args:
        settings: ``[steering.server]`` (``start`` and ``health_url`` set).
        log_path: file the server's stdout and stderr are appended to.
    """

    def __init__(self, settings: ServerSettings, log_path: Path) -> None:
        if not settings.start:
            raise ValueError("no server.start command")
        self.settings = settings
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def restart(self, steering_file: Path, stop: threading.Event | None = None) -> None:
        """Stop the running server, start it with ``steering_file`` and wait until it is healthy (or
        ``stop`` is set). Raises :class:`ServerError`."""
        self.stop()
        command = self.settings.start.replace("{steering}", shlex.quote(str(Path(steering_file).resolve())))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(  # the user's own command, as configured
                command, shell=True, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
            )
        self.starts += 1
        log.info("server started", pid=self.process.pid, command=command, steering=str(steering_file))
        self._wait_ready(stop or threading.Event())

    def _wait_ready(self, stop: threading.Event) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.settings.ready_timeout_s
        delay, tries, last = FIRST_BACKOFF_S, 0, "no answer yet"
        while not stop.is_set():
            tries += 1
            try:
                with urllib.request.urlopen(self.settings.health_url, timeout=min(5.0, MAX_BACKOFF_S * 2)) as answer:
                    if 200 <= answer.status < 300:
                        log.info("server ready", pid=self.process.pid, tries=tries)
                        return
                    last = f"HTTP {answer.status}"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError) as exc:
                last = str(getattr(exc, "reason", exc))
            code = self.process.poll()
            if code is not None:
                self.process = None
                raise ServerError(f"the server exited with status {code} before it was ready (see {self.log_path})")
            if time.monotonic() + delay > deadline:
                self.stop()
                raise ServerError(
                    f"{self.settings.health_url} not ready after {self.settings.ready_timeout_s:g} s "
                    f"({tries} tries; last: {last}; see {self.log_path})"
                )
            stop.wait(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)

    def stop(self) -> None:
        """Send ``stop_signal`` to the server's process group and wait for it (``SIGKILL`` after
        ``stop_timeout_s``); nothing when no server runs."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.Signals[self.settings.stop_signal])
            process.wait(self.settings.stop_timeout_s)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            log.warning("server ignored the stop signal: killing it", pid=process.pid, signal=self.settings.stop_signal)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.info("server stopped", pid=process.pid, returncode=process.returncode)

    def __enter__(self) -> ExternalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ServedModel:
    """Answers questions through the server's chat completions, with the interface of
    :class:`learnerd.steering.evolve.SteeredModel`: the deltas are the server's (the steering file it
    was started with), so ``processor`` is ignored. A reply's ``token_ids`` are its text encoded by
    ``tokenizer`` (the document's), so lengths are counted as in process."""

    client: Any
    model_name: str
    tokenizer: Any
    system: str | None = None
    max_new_tokens: int = 128

    def reply(self, question: str, processor: Any = None, stop: threading.Event | None = None) -> Reply:
        """The server's greedy reply to ``question``. Raises :class:`ServerError` when the request fails."""
        import openai

        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": question})
        try:
            completion = self.client.chat.completions.create(
                model=self.model_name, messages=messages, max_tokens=self.max_new_tokens, temperature=0
            )
        except openai.OpenAIError as exc:
            raise ServerError(f"chat completion at {self.client.base_url} failed: {exc}") from exc
        text = (completion.choices[0].message.content or "") if completion.choices else ""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return Reply(text, tuple(ids))
