"""learnerd's bearer token: the rules a token obeys, the token file ``learnerd init`` writes, and which token a
TCP surface uses.

``learnerd init`` writes a random token (:data:`TOKEN_BYTES` random bytes, URL-safe base64: 43 characters) to
``<config dir>/token`` with mode 0600, where the config dir is the config file's directory (``--config``,
``$LEARNERD_CONFIG``, else ``$XDG_CONFIG_HOME/learnerd``: :func:`token_path`). The daemon serves its TCP surfaces
behind it — the OpenAI-compatible endpoint, RPC ``inject_probe`` and ``POST /v1/blocks``, ``POST /search`` —
and learnerd's clients read it (:mod:`learnerd.client`, the IPython extension, the shell hook of
``docs/integrations.md``). Each surface's environment variable (``$LEARNERD_OPENAI_TOKEN``,
``$LEARNERD_PROBE_TOKEN``, ``$LEARNERD_SEARCH_TOKEN``) overrides the file for that surface.

The daemon reads the file strictly (:func:`read_token_file`): a token file another user could read or write is
refused, as ssh refuses such a private key. A client reads it leniently (:func:`client_token`): no file, no token.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from learnerd.sections import CONFIG_ENV, default_config_dir

TOKEN_FILE_NAME = "token"
"""The token file's name in the config dir."""
MIN_TOKEN_CHARS = 16
"""The shortest token accepted (a guessable token would defeat the point)."""
TOKEN_BYTES = 32
"""Random bytes in a token ``learnerd init`` writes (:func:`secrets.token_urlsafe`)."""


class TokenError(ValueError):
    """A token is missing or too short, or the token file is unsafe or unreadable."""


def check_token(token: str | None, env: str, what: str, path: Path | None = None) -> str:
    """``token`` if usable; ``env`` and ``path`` (the token file) name where it comes from in the message, ``what``
    says what needs it.

    Raises:
        TokenError: unset, empty, or shorter than :data:`MIN_TOKEN_CHARS`.
    """
    if not token:
        where = f"run `learnerd init` (it writes {path}) or set ${env}" if path is not None else f"set ${env}"
        raise TokenError(f"{what} needs a bearer token: {where}")
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(f"${env} must be at least {MIN_TOKEN_CHARS} characters long")
    return token


def token_path(config_file: Path | None = None) -> Path:
    """``<config dir>/token``: the directory of ``config_file``; without one, of ``$LEARNERD_CONFIG``, else
    ``$XDG_CONFIG_HOME/learnerd`` (:func:`~learnerd.sections.default_config_dir`)."""
    if config_file is None and os.environ.get(CONFIG_ENV):
        config_file = Path(os.environ[CONFIG_ENV])
    directory = config_file.expanduser().absolute().parent if config_file is not None else default_config_dir()
    return directory / TOKEN_FILE_NAME


def write_token_file(path: Path) -> str:
    """Create ``path`` holding a new random token and a newline, mode 0600, atomically; return the token.

    Raises:
        FileExistsError: ``path`` exists (a token is never replaced: clients hold it).
        OSError: the directory is missing or not writable.
    """
    from learnerd.store.atomic import replace_if_unchanged

    token = secrets.token_urlsafe(TOKEN_BYTES)
    if not replace_if_unchanged(path, f"{token}\n".encode(), None, mode=0o600):
        raise FileExistsError(f"{path} already exists")
    return token


def read_token_file(path: Path) -> str | None:
    """The token in ``path`` (its first line, stripped), or None when there is no such file.

    Raises:
        TokenError: not a regular file, owned by another user, readable or writable by group or others (a
            secret another user may know: ``chmod 600`` it), unreadable, or holding a token shorter than
            :data:`MIN_TOKEN_CHARS`.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TokenError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise TokenError(f"the token file {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise TokenError(f"the token file {path} belongs to uid {st.st_uid}, not to this user ({os.geteuid()})")
        if st.st_mode & 0o077:
            mode = stat.S_IMODE(st.st_mode)
            raise TokenError(f"the token file {path} is open to other users (mode {mode:04o}): chmod 600 it")
        first = f.read(4096).decode("utf-8", "replace").splitlines()
    token = first[0].strip() if first else ""
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(f"the token file {path} holds no token of at least {MIN_TOKEN_CHARS} characters")
    return token


def surface_token(env: str, config_file: Path | None) -> tuple[str | None, str | None]:
    """The token a surface of the daemon started with ``config_file`` serves behind, and where it came from:
    ``$env`` when set (``("…", "$LEARNERD_OPENAI_TOKEN")``), else the token file (``("…", "/path/token")``), else
    ``(None, None)``. The value is not checked for length here (:func:`check_token`).

    Raises:
        TokenError: the token file is unsafe or unreadable (:func:`read_token_file`).
    """
    if os.environ.get(env):
        return os.environ[env], f"${env}"
    path = token_path(config_file)
    token = read_token_file(path)
    return (token, str(path)) if token is not None else (None, None)


def client_token(env: str) -> str | None:
    """The token a client sends to a surface: ``$env`` when set, else the token file's (:func:`token_path`), else
    None (no file, or one this user cannot read)."""
    if os.environ.get(env):
        return os.environ[env]
    try:
        first = token_path().read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return (first[0].strip() or None) if first else None
