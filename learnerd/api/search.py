"""``POST /search``: the learned examples nearest to a text, served on the admin socket and over TCP."""

from __future__ import annotations

from aiohttp import web

from learnerd.api.http import Handler, field, json_response, read_json
from learnerd.api.surface import ControlSurface


def search_handler(control: ControlSurface) -> Handler:
    """``POST /search`` ``{"text": str, "k": int = 3}`` → ``[{id, query, answer, language, score}]``."""

    async def handle(request: web.Request) -> web.Response:
        body = await read_json(request)
        hits = await control.search(field(body, "text", str), field(body, "k", int, 3))
        return json_response(hits)

    return handle
