"""HTTP surfaces: admin on the Unix socket (:mod:`.admin`, its peer check :mod:`.peercred`, its socket file
:mod:`.unix_socket`), search and metrics over TCP (:mod:`.search`, :mod:`.tcp_endpoints`, :mod:`.health`), RPC
``inject_probe`` (:mod:`.rpc`) and ``POST /v1/blocks`` (:mod:`.blocks`), the OpenAI-compatible endpoint
(:mod:`.openai_app`, :mod:`.openai_models`); the bearer token of every TCP surface and the token file
``learnerd init`` writes (:mod:`.tokens`); and the plumbing below the handlers (:mod:`.http`, :mod:`.json_body`,
:mod:`.errors`). They reach the daemon only through :class:`learnerd.api.surface.ControlSurface`."""
