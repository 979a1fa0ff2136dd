"""Log every IPython / Jupyter cell you run to learnerd: ``%load_ext learnerd.integrations.ipython``.

After each cell (IPython's ``post_run_cell`` event) one block goes to the daemon's ``POST /v1/blocks``
(:meth:`learnerd.client.LearnerdClient.log_block`): the cell's leading comment lines are its markdown context
— the intent, which becomes the example's query — and the rest of the cell is the executed code
(``language`` ``"python"``), with exit code 0 when the cell ran without an exception and 1 when it raised
(then the block is kept and never learned). A cell without a leading comment is logged too; having no
markdown context, it is never learned. ``# `` is taken off each comment line, so ``## Pods`` becomes the
markdown heading ``# Pods``::

    # List the pods in the dev namespace
    !kubectl get pods -n dev

Blank cells, cells of comments only, and cells IPython runs silently or outside the history (a frontend's
own requests) are not logged. A Jupyter kernel does not see the notebook's markdown cells: write the intent
as the cell's first comment lines.

Configuration, from the environment of the kernel: ``$LEARNERD_RPC_URL`` (default ``http://127.0.0.1:7429``,
the daemon's ``--listen-rpc`` address); the token is ``$LEARNERD_PROBE_TOKEN``, else the token file ``learnerd
init`` wrote (:func:`learnerd.api.tokens.client_token`). Logging never gets in the way of the
cell: each request waits at most :data:`TIMEOUT_S` seconds, and a failure (daemon down, a refusal) is
written once on stderr and then kept quiet until a cell is logged again.
"""

from __future__ import annotations

import http.client
import os
import sys
from typing import TYPE_CHECKING

from learnerd.client import LearnerdClient, LearnerdError

if TYPE_CHECKING:
    from IPython.core.interactiveshell import ExecutionResult, InteractiveShell

RPC_URL_ENV = "LEARNERD_RPC_URL"
DEFAULT_RPC_URL = "http://127.0.0.1:7429"
TIMEOUT_S = 2.0
"""How long a cell's logging may wait for the daemon (seconds)."""
LANGUAGE = "python"


def split_intent(cell: str) -> tuple[str, str]:
    """``(markdown, code)`` of a cell: its leading comment lines (blank lines before them skipped), each
    without its first ``#`` and the space after it, and the rest of the cell."""
    lines = cell.splitlines()
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    end = start
    while end < len(lines) and lines[end].lstrip().startswith("#"):
        end += 1
    intent = [line.lstrip().removeprefix("#").removeprefix(" ") for line in lines[start:end]]
    return "\n".join(intent).strip(), "\n".join(lines[end:]).strip("\n")


class CellLogger:
    """The ``post_run_cell`` callback: logs the cell as one block through ``client``."""

    def __init__(self, client: LearnerdClient) -> None:
        self.client = client
        self._failing = False

    def post_run_cell(self, result: ExecutionResult) -> None:
        """Log the cell ``result`` ran (see the module docstring). A daemon that is down, refuses or breaks off
        is reported once on stderr, never raised into the shell."""
        info = result.info
        if info is None or info.silent or not info.store_history:
            return
        intent, code = split_intent(info.raw_cell or "")
        if not code.strip():
            return
        try:
            self.client.log_block(
                code, exit_code=0 if result.success else 1, context=[intent] if intent else [], language=LANGUAGE
            )
        except (LearnerdError, OSError, http.client.HTTPException) as exc:  # down, refused, cut off
            if not self._failing:
                print(f"learnerd: the cell was not logged to {self.client.rpc_url}: {exc}", file=sys.stderr)
            self._failing = True
        else:
            self._failing = False


_loaded: dict[int, CellLogger] = {}  # id(shell) → its logger, for unload


def load_ipython_extension(ip: InteractiveShell) -> None:
    """``%load_ext learnerd.integrations.ipython``: log every cell ``ip`` runs from now on."""
    client = LearnerdClient(rpc_url=os.environ.get(RPC_URL_ENV, DEFAULT_RPC_URL), timeout_s=TIMEOUT_S)
    logger = _loaded[id(ip)] = CellLogger(client)
    ip.events.register("post_run_cell", logger.post_run_cell)


def unload_ipython_extension(ip: InteractiveShell) -> None:
    """``%unload_ext learnerd.integrations.ipython``: stop logging."""
    logger = _loaded.pop(id(ip), None)
    if logger is not None:
        ip.events.unregister("post_run_cell", logger.post_run_cell)
        logger.client.close()
