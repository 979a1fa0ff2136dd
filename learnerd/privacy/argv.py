"""Secrets found in the parsed command line (:mod:`learnerd.privacy.shell`), where their place says what they are.

* **Password options of common CLIs** (:data:`PASSWORD_OPTIONS`, from each tool's manual): ``sshpass -p``,
  ``docker login -p``/``--password``, ``redis-cli -a``, ``zip -P``, ``7z -p…``, ``mysql -p…`` (attached only:
  ``-p db`` prompts), ``openssl -passin pass:…``, ``ldapsearch -w``, ``sqlcmd -P``, ``keytool -storepass``,
  ``plink -pw``, … — as a separate word, attached (``-pSECRET``) or after ``=``; ``user:password`` values
  (``curl -u``/``--user``, ``http -a``, ``skopeo --creds``, ``smbclient -U user%password``, ``lftp -u
  user,password``) give only the part after the separator; ``htpasswd -b`` takes the password as its last
  operand.
* **Any option whose name says secret** (``--password``, ``--api-key``, ``--client-secret``,
  ``-storepass``; not ``--password-file``, ``--password-stdin``, ``--with-token``).
* **Variable assignments** whose name says secret (``DB_PASS=…``, ``export X_TOKEN=…``, ``local
  password="a b"``) — the value's own characters, quotes kept.
* **``config set NAME VALUE``** (aws, npm, yarn, pnpm, pip, git config) when NAME says secret.
* **Passwords piped to a command that reads one on standard input** (``echo pw | docker login
  --password-stdin``, ``echo user:pw | chpasswd``, ``echo pw | sudo -S …``, ``passwd --stdin``).

Every finder returns ``(start, end, kind)`` spans of the parsed text.
"""

from __future__ import annotations

from collections.abc import Iterator

from learnerd.privacy.formats import is_path, secret_name, templated
from learnerd.privacy.shell import Command, Script, Word, is_option

Span = tuple[int, int, str]

_LOGIN = ("login",)
PASSWORD_OPTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # command: (its options that take a password, the subcommands they need: () = any)
    "sshpass": (("-p",), ()),
    "docker": (("-p", "--password"), _LOGIN),
    "podman": (("-p", "--password"), _LOGIN),
    "nerdctl": (("-p", "--password"), _LOGIN),
    "buildah": (("-p", "--password"), _LOGIN),
    "oras": (("-p", "--password"), _LOGIN),
    "helm": (("-p", "--password"), _LOGIN),
    "cf": (("-p",), ("login", "auth")),
    "oc": (("-p", "--password", "--token"), _LOGIN),
    "az": (("-p", "--password"), _LOGIN),
    "redis-cli": (("-a", "--pass"), ()),
    "zip": (("-P", "--password"), ()),
    "zipcloak": (("-P",), ()),
    "unzip": (("-P",), ()),
    "7z": (("-p",), ()),
    "7za": (("-p",), ()),
    "7zz": (("-p",), ()),
    "rar": (("-p", "-hp"), ()),
    "unrar": (("-p",), ()),
    "mysql": (("-p",), ()),
    "mysqldump": (("-p",), ()),
    "mysqladmin": (("-p",), ()),
    "mysqlimport": (("-p",), ()),
    "mysqlshow": (("-p",), ()),
    "mysqlcheck": (("-p",), ()),
    "mariadb": (("-p",), ()),
    "mariadb-dump": (("-p",), ()),
    "mongo": (("-p",), ()),
    "mongosh": (("-p",), ()),
    "mongodump": (("-p",), ()),
    "mongorestore": (("-p",), ()),
    "mongoexport": (("-p",), ()),
    "mongoimport": (("-p",), ()),
    "openssl": (("-k", "-pass", "-passin", "-passout", "-password"), ()),
    "ldapsearch": (("-w",), ()),
    "ldapadd": (("-w",), ()),
    "ldapmodify": (("-w",), ()),
    "ldapdelete": (("-w",), ()),
    "ldappasswd": (("-w", "-s", "-a"), ()),
    "ldapwhoami": (("-w",), ()),
    "sqlcmd": (("-P",), ()),
    "bcp": (("-P",), ()),
    "cqlsh": (("-p",), ()),
    "influx": (("-password", "-t"), ()),
    "mosquitto_pub": (("-P", "--pw"), ()),
    "mosquitto_sub": (("-P", "--pw"), ()),
    "twine": (("-p",), ()),
    "rabbitmqadmin": (("-p",), ()),
    "keytool": (("-storepass", "-keypass", "-srcstorepass", "-deststorepass", "-srckeypass", "-destkeypass"), ()),
    "jarsigner": (("-storepass", "-keypass"), ()),
    "plink": (("-pw",), ()),
    "pscp": (("-pw",), ()),
    "psftp": (("-pw",), ()),
    "rdesktop": (("-p",), ()),
    "security": (("-w",), ()),
    "useradd": (("-p",), ()),
    "usermod": (("-p",), ()),
    "gpg": (("--passphrase",), ()),
    "gh": (("-b", "--body"), ("secret",)),
    "vault": (("-token",), ()),
    "curl": (("--oauth2-bearer",), ()),
}
"""Each CLI's options whose value is a password or token (see the module docstring)."""

USER_PASSWORD_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    # command: (options whose value is user<sep>password, sep)
    "curl": (("-u", "--user", "-U", "--proxy-user"), ":"),
    "http": (("-a", "--auth"), ":"),
    "https": (("-a", "--auth"), ":"),
    "skopeo": (("--creds", "--src-creds", "--dest-creds"), ":"),
    "smbclient": (("-U", "--user"), "%"),
    "rpcclient": (("-U", "--user"), "%"),
    "smbmap": (("-u",), "%"),
    "lftp": (("-u", "--user"), ","),
    "wget": (("--user",), ":"),
}
"""CLIs whose option carries ``user<separator>password``: only the part after the separator is secret."""

_ATTACHED_ONLY = frozenset({"mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mariadb",
                            "mariadb-dump", "7z", "7za", "7zz", "rar", "unrar"})  # fmt: skip
_WRAPPERS = frozenset({"sudo", "doas", "env", "nohup", "time", "nice", "ionice", "command", "exec", "builtin",
                       "timeout", "stdbuf", "xargs", "chroot", "watch", "torsocks", "proxychains"})  # fmt: skip
_STDIN_PASSWORD = (
    # (command, an option that makes it read a password on standard input, or "" for always)
    ("docker", "--password-stdin"), ("podman", "--password-stdin"), ("nerdctl", "--password-stdin"),
    ("helm", "--password-stdin"), ("oras", "--password-stdin"), ("buildah", "--password-stdin"),
    ("passwd", "--stdin"), ("chpasswd", ""), ("sudo", "-S"), ("sudo", "--stdin"), ("htpasswd", "-i"),
    ("kinit", "--password-file=STDIN"), ("gh", "--with-token"), ("vault", "-"), ("cryptsetup", ""),
)  # fmt: skip
_SINGLE_DASH_LONG = frozenset(
    {"openssl", "keytool", "jarsigner", "plink", "pscp", "psftp", "influx", "security", "vault", "java"}
)  # -key is not -k with "ey" attached
_SECRET_MOUNTS = frozenset({"docker", "podman", "buildah", "nerdctl", "buildctl"})  # --secret id=…,src=…
_CONFIG_SET = frozenset({"aws", "npm", "yarn", "pnpm", "pip", "pip3", "git", "poetry", "composer", "conda"})


def unwrapped(command: Command) -> list[Word]:
    """``command``'s argv without the wrappers before it (``sudo -E``, ``env X=1``, ``nohup``, ``timeout 5``):
    what runs."""
    argv = command.argv
    while argv and argv[0].value.rsplit("/", 1)[-1] in _WRAPPERS:
        wrapper = argv[0].value.rsplit("/", 1)[-1]
        i = 1
        while i < len(argv) and (is_option(argv[i]) or (wrapper == "env" and "=" in argv[i].value)):
            takes_value = wrapper in ("sudo", "doas") and argv[i].value in (
                "-u",
                "-g",
                "-C",
                "-D",
                "-h",
                "-p",
                "-r",
                "-t",
            )
            takes_value |= (
                wrapper in ("nice", "ionice", "timeout", "xargs", "stdbuf", "watch") and len(argv[i].value) == 2
            )
            i += 2 if takes_value else 1
        if wrapper == "timeout" and i < len(argv):
            i += 1  # the duration
        if wrapper == "nice" and i < len(argv) and argv[i].value.lstrip("-").isdigit():
            i += 1
        argv = argv[i:]
    return argv


def name_of(word: Word) -> str:
    """A command word's basename (``/usr/bin/rm`` → ``rm``)."""
    return word.value.rsplit("/", 1)[-1]


def secret_spans(script: Script) -> list[Span]:
    """Every span :mod:`this module <learnerd.privacy.argv>` finds in ``script`` (see the module docstring)."""
    spans: list[Span] = []
    for command in script.commands:
        for name, value in command.assignments:
            if value.value and secret_name(name) and not templated(value.value) and not _is_path(value.value):
                spans.append((*value.span(), name.upper().lstrip("_") or "SECRET"))
        argv = unwrapped(command)
        if not argv:
            continue
        if argv[0].value in ("export", "declare", "local", "readonly", "typeset", "setenv"):
            spans += _declared(argv)
        spans += _options(argv)
        spans += _piped_passwords(command, argv)
    return spans


def _declared(argv: list[Word]) -> Iterator[Span]:
    """``export X_TOKEN=…`` words tree-sitter left as plain words, and csh's ``setenv NAME value``."""
    for i, word in enumerate(argv[1:], start=1):
        name, eq, value = word.value.partition("=")
        if eq and value and secret_name(name) and not templated(value):
            yield (*word.span(len(name) + 1), name.upper())
        elif argv[0].value == "setenv" and i == 1 and secret_name(word.value) and len(argv) > 2:
            yield (*argv[2].span(), word.value.upper())


def _options(argv: list[Word]) -> list[Span]:
    command, spans = name_of(argv[0]), []
    options, subcommands = PASSWORD_OPTIONS.get(command, ((), ()))
    if subcommands and not any(w.value in subcommands for w in argv[1:4]):
        options = ()
    pairs, sep = USER_PASSWORD_OPTIONS.get(command, ((), ""))
    operands = [w for w in argv[1:] if not is_option(w)]
    i = 1
    while i < len(argv):
        word, value = argv[i], argv[i].value
        following = argv[i + 1] if i + 1 < len(argv) else None
        flag, eq, attached = value.partition("=")
        found: tuple[Word, int] | None = None  # (word, index in its value where the secret starts)
        if flag in pairs or _attached(value, pairs) is not None:
            if flag not in pairs:
                target: tuple[Word, int] | None = (word, 2)
            else:
                target = (word, len(flag) + 1) if eq else ((following, 0) if following is not None else None)
            if target is not None:
                cut = target[0].value.find(sep, target[1])
                if cut >= 0 and cut + 1 < len(target[0].value):
                    spans.append((*target[0].span(cut + 1), "BASIC_AUTH_PASSWORD"))
                i += 1 if eq or flag not in pairs else 2
                continue
        elif flag in options:
            if eq:
                found = (word, len(flag) + 1)
            elif command not in _ATTACHED_ONLY and following is not None:
                found = (following, 0)
                i += 1
        elif command not in _SINGLE_DASH_LONG and (short := _attached(value, options)) is not None:
            found = (word, short)
        elif is_option(word) and secret_name(flag) and not (command in _SECRET_MOUNTS and flag == "--secret"):
            if eq and attached:
                found = (word, len(flag) + 1)
            elif not eq and following is not None and not is_option(following) and _generic_takes_value(flag):
                found = (following, 0)
                i += 1
        if found is not None:
            holder, start = found
            secret = holder.value[start:]
            if secret.startswith("pass:"):  # openssl's pass:PASSWORD (env:VAR, file:PATH, fd:N name one)
                start, secret = start + 5, secret[5:]
            elif command == "openssl" and secret.startswith(("env:", "file:", "fd:", "stdin")):
                secret = ""
            if secret and not templated(secret) and not _is_path(secret):
                kind = "MYSQL_PASSWORD" if command.startswith(("mysql", "mariadb")) else "PASSWORD"
                spans.append((*holder.span(start), kind))
        i += 1
    batch = any(w.value.startswith("-") and "b" in w.value[1:] for w in argv[1:] if is_option(w))
    if command == "htpasswd" and batch and operands:  # htpasswd -b FILE USER PASSWORD, -nb USER PASSWORD
        spans.append((*operands[-1].span(), "PASSWORD"))
    if command in _CONFIG_SET:
        spans += _config_set(argv)
    return spans


def _attached(value: str, options: tuple[str, ...]) -> int | None:
    """Where the secret starts in ``-pSECRET`` (a one-letter option of ``options`` with its value attached)."""
    for option in options:
        if len(option) == 2 and value.startswith(option) and len(value) > 2 and not value.startswith("--"):
            return 2
    return None


def _generic_takes_value(flag: str) -> bool:
    """A long option named as a secret takes the next word as its value (``--password hunter2``); a short
    spelling (``-password``) is some tool's own and is only read attached with ``=``."""
    return flag.startswith("--") or (flag.startswith("-") and len(flag) > 2)


def _is_path(value: str) -> bool:
    return is_path(value) or value in ("-", "stdin")


def _config_set(argv: list[Word]) -> list[Span]:
    """``aws configure set NAME VALUE``, ``npm config set NAME VALUE``, ``git config [--global] NAME VALUE``."""
    operands = [w for w in argv[1:] if not is_option(w)]
    for i, word in enumerate(operands):
        if (word.value in ("set", "config") and i + 2 < len(operands)) or (
            argv[0].value == "git" and word.value == "config"
        ):
            rest = operands[i + 1 :]
            if rest and rest[0].value == "set":
                rest = rest[1:]
            if len(rest) >= 2 and secret_name(rest[0].value.rsplit(".", 1)[-1].rsplit(":", 1)[-1]):
                return [(*rest[1].span(), rest[0].value.rsplit(".", 1)[-1].upper().strip("_") or "SECRET")]
    return []


def _piped_passwords(command: Command, argv: list[Word]) -> list[Span]:
    """An ``echo``/``printf`` whose output a password-reading command reads (see the module docstring)."""
    names = {name_of(argv[0]), command.name}
    values = [w.value for w in command.argv]
    if not any(c in names and (not o or o in values) for c, o in _STDIN_PASSWORD):
        return []
    name = name_of(argv[0])
    spans: list[Span] = []
    for upstream in command.upstream:
        producer = unwrapped(upstream)
        if producer and name_of(producer[0]) in ("echo", "printf"):
            for word in producer[1:]:
                if is_option(word) or not word.value or word.value.startswith("$") or "%" in word.value[:2]:
                    continue
                start = word.value.find(":") + 1 if name == "chpasswd" else 0
                spans.append((*word.span(start), "PASSWORD"))
    for redirect in command.redirects:
        if redirect.op == "<<<" and not redirect.target.value.startswith("$"):
            spans.append((*redirect.target.span(), "PASSWORD"))
    return spans
