"""Destructive commands, decided on the parsed command (:mod:`learnerd.privacy.shell`), not on its spelling.

Each category is a function of one simple command — its name after wrappers (``sudo -E``, ``env``,
``nohup``, ``timeout 5``, ``command``, ``/usr/bin/``, ``\\rm``), its words after quote removal, its
redirects and what feeds its standard input — and of the script around it:

* **recursive deletion or overwrite of home, root or devices**: ``rm -r`` of ``/``, ``~``, ``$HOME`` (``"$HOME/"``,
  ``${HOME:?}/*``, ``~/..``: paths are normalized, home stands for ``/home/<user>``), a top-level system
  directory or a device; ``find <those> -delete`` / ``-exec rm``; ``mv`` of them; ``shred``; ``dd of=``,
  ``>`` or ``tee`` onto a disk device; truncating ``/etc/passwd``-class files (``: > /etc/passwd``,
  ``truncate -s 0``, ``cp /dev/null``); a fork bomb;
* **filesystem creation or wiping**: ``mkfs*``, ``mke2fs``, ``mkswap``, ``wipefs``, ``blkdiscard``,
  ``sgdisk --zap-all``, ``parted … mklabel``, ``cryptsetup luksFormat``, ``zpool destroy``;
* **a download run by an interpreter**: a pipeline from ``curl``/``wget``/… into any shell or language
  interpreter that reads its program on standard input (``| sh``, ``| /bin/sh``, ``| sudo -E bash -``,
  ``| python3``; not ``| python3 -m json.tool``), a substitution of one as an interpreter's program
  (``bash -c "$(curl …)"``, ``sh <(wget …)``, ``eval "$(curl …)"``), and a downloaded file run later in
  the same text (``curl -o i.sh … && bash i.sh``);
* **permission or ownership changes on root**: ``chmod``/``chown``/``chgrp`` of ``/`` (recursive or not)
  and recursive ones of home or a top-level system directory (``chmod 777 -R /``, ``chown -R x /``);
* **force pushes to protected branches**: ``git push`` with ``--force``/``-f``/a ``+`` refspec, or a
  deletion, onto ``main``, ``master``, ``trunk``, ``develop``, ``production``, ``prod``, ``release*``,
  ``stable`` (not ``--force-with-lease``, not another branch);
* **destructive SQL** (parsed with sqlparse) given to a database client (``psql -c``, ``mysql -e``,
  ``sqlite3 db SQL``, a here-document, an ``echo`` piped in): ``DROP``, ``TRUNCATE``, ``DELETE`` without
  ``WHERE``; ``dropdb``; ``redis-cli FLUSHALL``/``FLUSHDB``; ``mongosh --eval 'db.dropDatabase()'``;
* **cluster-wide deletes**: ``kubectl delete`` with ``--all`` across namespaces (``-A``) or of
  cluster-scoped kinds (``ns``, ``nodes``, ``pv``, ``crd``…), ``kubectl delete all --all``, deleting
  ``kube-system``; ``terraform destroy``; ``gcloud projects delete``.

A command string given to another program (``bash -c '…'``, ``su -c``, ``eval``, ``ssh host '…'``,
``find -exec sh -c``, ``xargs``, ``docker exec … sh -c``) is parsed and judged the same way.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator

import sqlparse
from sqlparse import sql as sql_tokens

from learnerd.privacy.argv import name_of, unwrapped
from learnerd.privacy.shell import Command, Script, Word, is_option, parse

HOME = "/home/~"
"""What ``~`` and ``$HOME`` stand for when a path is normalized (so ``~/..`` is ``/home``)."""
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/root",
    "/run", "/sbin", "/srv", "/sys", "/usr", "/var", "/Users", "/System", "/Library", "/Applications", "/private",
})  # fmt: skip
"""Top-level directories whose recursive deletion, move or permission change breaks the machine."""
CRITICAL_FILES = re.compile(
    r"/etc/(?:passwd|shadow|group|gshadow|sudoers|fstab|crypttab|login\.defs|pam\.d/.*)|/boot/.*"
    r"|/(?:usr/)?s?bin/.+|/(?:usr/)?lib(?:32|64)?/.+"
)
"""Files whose truncation breaks the machine."""
DEVICE = re.compile(
    r"/dev/(?:sd[a-z]+\d*|hd[a-z]+\d*|vd[a-z]+\d*|xvd[a-z]+\d*|nvme\d+n\d+(?:p\d+)?|mmcblk\d+(?:p\d+)?|r?disk\d+(?:s\d+)?"
    r"|md\d+|dm-\d+|mapper/.+|loop\d+|sr\d+|root|mem|kmem|port|disk/.+)"
)
"""Block devices and memory (writing onto them destroys a disk or the running system)."""
PROTECTED_BRANCHES = re.compile(r"(?:main|master|trunk|develop|development|production|prod|stable|release(?:[/-].*)?)")
DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https", "xh", "lwp-request", "GET", "lynx"})
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "yash", "busybox"})
_PROGRAM_OPTIONS = {
    # interpreter family: the options after which its program is given (then standard input is data)
    "shell": ("-c",),
    "python": ("-c", "-m"),
    "node": ("-e", "--eval", "-p", "--print"),
    "perl": ("-e", "-E"),
    "ruby": ("-e",),
    "php": ("-r",),
    "pwsh": ("-c", "-Command", "-File", "-f"),
    "lua": ("-e",),
}
_WIPERS = frozenset({"wipefs", "blkdiscard", "mkswap", "mke2fs", "mkntfs", "mkdosfs", "mkexfatfs", "newfs"})
_CLUSTER_KINDS = frozenset({
    "ns", "namespace", "namespaces", "node", "nodes", "no", "pv", "persistentvolume", "persistentvolumes", "crd",
    "crds", "customresourcedefinition", "customresourcedefinitions", "clusterrole", "clusterroles",
    "clusterrolebinding", "clusterrolebindings", "storageclass", "storageclasses", "sc", "all",
})  # fmt: skip
_SQL_OPTIONS = {
    "psql": ("-c", "--command"),
    "mysql": ("-e", "--execute"),
    "mariadb": ("-e", "--execute"),
    "clickhouse-client": ("-q", "--query"),
    "clickhouse": ("-q", "--query"),
    "cqlsh": ("-e", "--execute"),
    "sqlcmd": ("-Q", "-q"),
    "duckdb": ("-c",),
    "cockroach": ("-e", "--execute"),
    "snowsql": ("-q", "--query"),
    "spark-sql": ("-e",),
    "hive": ("-e",),
    "trino": ("--execute",),
    "sqlite3": (),
    "bq": (),
}
MAX_NESTING = 4
"""Command strings inside command strings (``bash -c "sh -c '…'"``) are judged this deep."""

Rule = Callable[[Command, list[Word], Script], str | None]

DELETION = "recursive deletion or overwrite of home, root or a device"
FILESYSTEM = "filesystem creation or wiping"
DOWNLOAD = "a download run by an interpreter"
PERMISSIONS = "a permission or ownership change on root"
FORCE_PUSH = "a force push to a protected branch"
SQL = "destructive SQL"
CLUSTER = "a cluster-wide delete"
CATEGORIES = (DELETION, FILESYSTEM, DOWNLOAD, PERMISSIONS, FORCE_PUSH, SQL, CLUSTER)
"""The categories a refusal names first (what is counted); the detail follows in parentheses."""


def refusal(script: Script, depth: int = 0) -> str | None:
    """Why the command ``script`` holds is destructive, as ``"<category> (<detail>)"`` (one of
    :data:`CATEGORIES`: ``"recursive deletion or overwrite of home, root or a device (rm -r of ~)"``), or None."""
    for command in script.commands:
        argv = unwrapped(command)
        for category, rule in RULES:
            detail = rule(command, argv, script)
            if detail:
                return f"{category} ({detail})"
        if depth < MAX_NESTING:
            for text in _nested_commands(argv):
                reason = refusal(parse(text), depth + 1)
                if reason:
                    return reason
    bomb = _fork_bomb(script)
    return f"{DELETION} ({bomb})" if bomb else None


def target(word: Word) -> str:
    """``word`` as a normalized path: home (``~``, ``~user``, ``$HOME``, ``${HOME:?}``) is :data:`HOME`, ``.``
    and ``..`` resolved, a trailing ``/*`` (or ``/.``) dropped: ``"$HOME/"`` → ``/home/~``, ``/*`` → ``/``."""
    value = re.sub(r"^(?:~[a-z_][\w-]*|~|\$\{?HOME(?:[:?\-=+][^}/]*)?\}?|\$\{?USERPROFILE\}?)(?=/|$)", HOME, word.value)
    if not value.startswith("/"):
        return value
    path = posixpath.normpath(value)
    while path.endswith(("/*", "/.*")) or (path.endswith("/") and path != "/"):
        path = path.rsplit("/", 1)[0] or "/"
    return "/" if path.startswith("//") else path


def _protected(word: Word) -> bool:
    path = target(word)
    return path in SYSTEM_DIRS or path == HOME or bool(DEVICE.fullmatch(path))


def _has_flag(argv: list[Word], letters: str, long: tuple[str, ...] = ()) -> bool:
    for word in argv[1:]:
        value = word.value
        if value in long or value.split("=", 1)[0] in long:
            return True
        if value.startswith("-") and not value.startswith("--") and any(c in value[1:] for c in letters):
            return True
    return False


def _operands(argv: list[Word]) -> list[Word]:
    """Words after the command name that are not options (all of them after ``--``)."""
    out, rest = [], False
    for word in argv[1:]:
        if rest or not is_option(word):
            out.append(word)
        elif word.value == "--":
            rest = True
    return out


# --- recursive deletion or overwrite of home, root or devices ---------------------------------------


def _rm(command: Command, argv: list[Word], script: Script) -> str | None:
    if not argv or name_of(argv[0]) not in ("rm", "rmdir", "srm", "unlink"):
        return None
    operands = [w for w in argv[1:] if w.value not in ("-", "--")]
    if any(w.value == "--no-preserve-root" for w in argv):
        return "rm --no-preserve-root"
    if _has_flag(argv, "rR", ("--recursive",)):
        hit = next((w for w in operands if not is_option(w) and _protected(w)), None)
        if hit is not None:
            return f"rm -r of {hit.value}"
    return None


def _find(command: Command, argv: list[Word], script: Script) -> str | None:
    if not argv or name_of(argv[0]) != "find":
        return None
    roots = []
    for word in argv[1:]:
        if word.value.startswith(("-", "(", "!")) and word.value not in ("-H", "-L", "-P"):
            break
        roots.append(word)
    values = [w.value for w in argv]
    deletes = "-delete" in values or any(
        v in ("-exec", "-execdir", "-ok")
        and i + 1 < len(values)
        and values[i + 1].rsplit("/", 1)[-1] in ("rm", "shred")
        for i, v in enumerate(values)
    )
    hit = next((w for w in roots if _protected(w)), None)
    return f"find {hit.value} deleting what it finds" if deletes and hit is not None else None


def _move_or_wipe(command: Command, argv: list[Word], script: Script) -> str | None:
    if not argv:
        return None
    name, operands = name_of(argv[0]), _operands(argv)
    if name == "mv" and len(operands) >= 2 and any(_protected(w) for w in operands[:-1]):
        return f"moves {next(w.value for w in operands[:-1] if _protected(w))} away"
    if name in ("shred", "wipe") and any(_protected(w) or CRITICAL_FILES.fullmatch(target(w)) for w in operands):
        return f"{name} of a device or system file"
    if name == "dd":
        out = next((w.value[3:] for w in argv[1:] if w.value.startswith("of=")), "")
        if out and (DEVICE.fullmatch(posixpath.normpath(out)) or CRITICAL_FILES.fullmatch(posixpath.normpath(out))):
            return f"dd onto {out}"
    if name == "tee" and not _has_flag(argv, "a", ("--append",)):
        hit = next((w for w in operands if DEVICE.fullmatch(target(w)) or CRITICAL_FILES.fullmatch(target(w))), None)
        if hit is not None:
            return f"tee overwrites {hit.value}"
    if name == "truncate" and any(CRITICAL_FILES.fullmatch(target(w)) for w in operands):
        return "truncates a system file"
    if (
        name in ("cp", "cat", "install")
        and operands
        and (
            DEVICE.fullmatch(target(operands[-1]))
            or (
                name == "cp"
                and CRITICAL_FILES.fullmatch(target(operands[-1]))
                and any(w.value in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random") for w in operands[:-1])
            )
        )
    ):
        return f"{name} onto {operands[-1].value}"
    return None


def _redirects(command: Command, argv: list[Word], script: Script) -> str | None:
    for redirect in command.redirects:
        if redirect.op not in (">", ">|", "&>", "<>", ">>", "&>>"):
            continue
        path = target(redirect.target)
        if DEVICE.fullmatch(path) or (redirect.truncates and CRITICAL_FILES.fullmatch(path)):
            return f"overwrites {redirect.target.value}"
    return None


def _fork_bomb(script: Script) -> str | None:
    for name, body in script.functions.items():
        calls = [c for c in body.commands if c.argv and c.argv[0].value == name]
        if len(calls) >= 2 or any(c.upstream and c.upstream[-1].name == name for c in calls):
            return "fork bomb"
    return None


def _filesystem(command: Command, argv: list[Word], script: Script) -> str | None:
    if not argv:
        return None
    name, values = name_of(argv[0]), [w.value for w in argv[1:]]
    if name.startswith("mkfs") or name in _WIPERS:
        return f"{name} (creates or wipes a filesystem)"
    if name == "sgdisk" and any(v in ("-Z", "--zap-all", "-o", "--clear", "-z", "--zap") for v in values):
        return "sgdisk wipes a partition table"
    if name == "parted" and any(v in ("mklabel", "mkpart", "rm", "resizepart") for v in values):
        return "parted rewrites a partition table"
    if name == "sfdisk" and any(v in ("--delete", "--wipe") for v in values):
        return "sfdisk wipes partitions"
    if name == "cryptsetup" and any(v in ("luksFormat", "erase", "luksErase") for v in values):
        return f"cryptsetup {next(v for v in values if v in ('luksFormat', 'erase', 'luksErase'))}"
    if name == "zpool" and values[:1] and values[0] in ("destroy", "labelclear"):
        return f"zpool {values[0]}"
    if (
        name == "zfs"
        and values[:1] == ["destroy"]
        and any(v.startswith("-") and ("r" in v or "R" in v) for v in values)
    ):
        return "zfs destroy -r"
    if name == "nvme" and values[:1] == ["format"]:
        return "nvme format"
    return None


# --- a download run by an interpreter -----------------------------------------------------------------


def _family(name: str) -> str | None:
    if name in SHELLS:
        return "shell"
    match = re.fullmatch(r"(python|pypy|node|nodejs|perl|ruby|php|pwsh|powershell|lua|luajit|bun|deno)[\d.]*", name)
    if match is None:
        return None
    family = match.group(1)
    return {
        "pypy": "python",
        "nodejs": "node",
        "bun": "node",
        "deno": "node",
        "powershell": "pwsh",
        "luajit": "lua",
    }.get(family, family)


def _program(argv: list[Word]) -> tuple[str, Word | None] | None:
    """For an interpreter (or ``source``/``.``/``eval``): ``("stdin", None)`` when it reads its program on
    standard input, ``("word", w)`` when the program is given in ``w`` (a ``-c`` string, a script path, a
    substitution); None for any other command."""
    if not argv:
        return None
    name = name_of(argv[0])
    if name in ("source", ".", "eval"):
        if not argv[1:]:
            return None
        first = argv[1]
        return ("stdin", None) if first.value in ("/dev/stdin", "-") else ("word", first)
    family = _family(name)
    if family is None:
        return None
    options = _PROGRAM_OPTIONS[family]
    words = argv[1:]
    for i, word in enumerate(words):
        value = word.value
        if value in options or (family == "shell" and re.fullmatch(r"-[a-z]*c[a-z]*", value)):
            return ("word", words[i + 1]) if i + 1 < len(words) else ("word", word)
        if value == "-s" and family == "shell":
            return ("stdin", None)  # sh -s -- ARGS: the arguments are $1…, the program is standard input
        if value == "-" or (value.startswith("--") and value != "--"):
            continue
        if is_option(word):
            continue
        if value == "--":
            return ("word", words[i + 1]) if i + 1 < len(words) else ("stdin", None)
        return ("word", word)
    return ("stdin", None)


def _downloads(commands: tuple[Command, ...] | list[Command]) -> bool:
    return any(unwrapped(c) and name_of(unwrapped(c)[0]) in DOWNLOADERS for c in commands)


def _piped_download(command: Command, argv: list[Word], script: Script) -> str | None:
    program = _program(argv)
    if program is None:
        return None
    kind, word = program
    name = name_of(argv[0])
    if kind == "stdin" and _downloads(command.upstream):
        return f"a download piped into {name}"
    if word is not None and any(_downloads(sub.commands) for sub in word.substitutions):
        return f"a download run by {name}"
    if word is not None and name in ("source", ".", "eval") and not word.literal and word.substitutions:
        return None
    if word is not None and word.literal and _downloaded_files(script) & {_basename(word.value)}:
        return f"a downloaded file ({word.value}) run by {name}"
    return None


def _run_downloaded(command: Command, argv: list[Word], script: Script) -> str | None:
    if argv and "/" in argv[0].value and _downloaded_files(script) & {_basename(argv[0].value)}:
        return f"a downloaded file ({argv[0].value}) run"
    return None


def _basename(value: str) -> str:
    return value.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]


def _downloaded_files(script: Script) -> set[str]:
    """The names of the files the downloaders of ``script`` write (``-o F``, ``-O``, ``> F``, wget's default)."""
    names: set[str] = set()
    for command in script.commands:
        argv = unwrapped(command)
        if not argv or name_of(argv[0]) not in DOWNLOADERS:
            continue
        values = [w.value for w in argv]
        urls = [v for v in values if "://" in v]
        for i, value in enumerate(values):
            if value in ("-o", "--output", "-O", "--output-document") and i + 1 < len(values):
                if not (name_of(argv[0]) == "curl" and value == "-O"):
                    names.add(_basename(values[i + 1]))
            elif value.startswith(("--output=", "--output-document=")) or re.fullmatch(r"-[a-zA-Z]*o\S+", value):
                names.add(_basename(value.split("=", 1)[-1] if "=" in value else value[value.index("o") + 1 :]))
        if (name_of(argv[0]) == "wget" and "-O" not in values) or (
            name_of(argv[0]) == "curl"
            and (
                "-O" in values
                or "--remote-name" in values
                or any(re.fullmatch(r"-[a-zA-Z]*O[a-zA-Z]*", v) for v in values)
            )
        ):
            names.update(_basename(u) for u in urls)
        names.update(_basename(r.target.value) for r in command.redirects if r.op in (">", ">>", ">|"))
    names.discard("-")
    return names


# --- permission changes, force pushes, SQL, cluster-wide deletes ------------------------------------


def _permissions(command: Command, argv: list[Word], script: Script) -> str | None:
    if not argv or name_of(argv[0]) not in ("chmod", "chown", "chgrp", "setfacl", "chattr"):
        return None
    operands = _operands(argv)
    if not any(w.value.startswith("--reference") for w in argv):
        operands = operands[1:]  # the mode or the owner
    recursive = _has_flag(argv, "R", ("--recursive",))
    for word in operands:
        path = target(word)
        if path == "/" or (recursive and (path in SYSTEM_DIRS or path == HOME)):
            return f"{name_of(argv[0])} of {word.value}" + (" (recursive)" if recursive else "")
    return None


def _force_push(command: Command, argv: list[Word], script: Script) -> str | None:
    if len(argv) < 2 or name_of(argv[0]) != "git":
        return None
    words, i = argv[1:], 0
    while i < len(words) and is_option(words[i]):  # git -C dir -c k=v push
        i += 2 if words[i].value in ("-C", "-c", "--git-dir", "--work-tree") else 1
    if i >= len(words) or words[i].value != "push":
        return None
    push = words[i + 1 :]
    values = [w.value for w in push]
    force = any(v in ("--force", "-f") or re.fullmatch(r"-[a-zA-Z]*f[a-zA-Z]*", v) for v in values)
    delete = any(v in ("--delete", "-d") for v in values)
    operands = [w.value for w in push if not is_option(w)]
    refspecs = operands[1:]
    if force and any(v in ("--all", "--mirror") for v in values):
        return "git push --force of every branch"
    for spec in refspecs:
        destination = spec.lstrip("+").split(":")[-1].removeprefix("refs/heads/")
        if PROTECTED_BRANCHES.fullmatch(destination) and (
            force or spec.startswith("+") or delete or spec.startswith(":")
        ):
            return (
                f"force push to {destination}"
                if not (delete or spec.startswith(":"))
                else f"deletes branch {destination}"
            )
    return None


def _sql_texts(command: Command, argv: list[Word]) -> Iterator[str]:
    name = name_of(argv[0])
    options = _SQL_OPTIONS.get(name)
    if options is None:
        return
    for i, word in enumerate(argv[1:], start=1):
        value = word.value
        if value in options and i + 1 < len(argv):
            yield argv[i + 1].value
        for option in options:
            if value.startswith(option + "=") or (len(option) == 2 and value.startswith(option) and len(value) > 2):
                yield value.split("=", 1)[1] if value.startswith(option + "=") else value[2:]
    operands = _operands(argv)
    if name in ("sqlite3", "duckdb") and len(operands) >= 2:
        yield operands[1].value
    if name == "bq" and operands[:1] and operands[0].value == "query":
        yield from (w.value for w in operands[1:])
    if command.stdin is not None:
        yield command.stdin
    for upstream in command.upstream:
        producer = unwrapped(upstream)
        if producer and name_of(producer[0]) in ("echo", "printf"):
            yield " ".join(w.value for w in producer[1:] if not is_option(w))
        if upstream.stdin is not None and producer and name_of(producer[0]) == "cat":
            yield upstream.stdin


def destructive_sql(text: str) -> str | None:
    """The first destructive statement of ``text`` (``DROP …``, ``TRUNCATE …``, ``DELETE`` without
    ``WHERE``), or None."""
    for statement in sqlparse.parse(text):
        kind = statement.get_type()
        words = " ".join(str(statement).split())[:60]
        if kind in ("DROP", "TRUNCATE") or re.match(r"(?i)\s*truncate\b", str(statement)):
            return words
        if kind == "DELETE" and not any(isinstance(t, sql_tokens.Where) for t in statement.tokens):
            return words
    return None


def _sql(command: Command, argv: list[Word], script: Script) -> str | None:
    if not argv:
        return None
    name, values = name_of(argv[0]), [w.value.lower() for w in argv[1:]]
    if name in ("dropdb", "mysqladmin") and (name == "dropdb" or "drop" in values):
        return f"{name} drops a database"
    if name == "redis-cli" and any(v in ("flushall", "flushdb") for v in values):
        return "redis-cli FLUSHALL/FLUSHDB"
    if name in ("mongo", "mongosh") and any(re.search(r"dropdatabase\(|\.drop\(\)", v) for v in values):
        return "mongosh drops a database"
    for text in _sql_texts(command, argv):
        statement = destructive_sql(text)
        if statement:
            return statement
    return None


def _cluster(command: Command, argv: list[Word], script: Script) -> str | None:
    if len(argv) < 2:
        return None
    name, values = name_of(argv[0]), [w.value for w in argv[1:]]
    operands = [w.value for w in argv[1:] if not is_option(w)]
    if name in ("kubectl", "oc") and "delete" in operands:
        after = operands[operands.index("delete") + 1 :]
        kinds = {k for part in after[:1] for k in part.lower().split(",")}
        every = "--all" in values
        across = "-A" in values or "--all-namespaces" in values
        if every and (across or kinds & _CLUSTER_KINDS):
            return f"{name} delete {after[0] if after else ''} --all" + (" across namespaces" if across else "")
        if across and any(v in ("-l", "--selector") or v.startswith(("--selector=", "-l")) for v in values):
            return f"{name} delete across namespaces"
        if kinds & {"ns", "namespace", "namespaces"} and set(after[1:]) & {"kube-system", "default", "kube-public"}:
            return f"{name} deletes a system namespace"
    if name == "terraform" and (operands[:1] == ["destroy"] or (operands[:1] == ["apply"] and "-destroy" in values)):
        return "terraform destroy"
    if name == "gcloud" and operands[:2] == ["projects", "delete"]:
        return "gcloud projects delete"
    return None


def _nested_commands(argv: list[Word]) -> Iterator[str]:
    """Command strings ``argv`` hands to another program (see the module docstring)."""
    if not argv:
        return
    name, values = name_of(argv[0]), [w.value for w in argv]
    if _family(name) == "shell" or name in ("su", "runuser"):
        for i, value in enumerate(values[1:-1], start=1):
            if re.fullmatch(r"-[a-z]*c[a-z]*|--command", value):
                yield values[i + 1]
    elif name == "eval":
        yield " ".join(values[1:])
    elif name in ("ssh", "xargs", "watch", "parallel"):
        operands = _operands(argv)
        skip = 1 if name == "ssh" else 0  # the host
        if len(operands) > skip:
            yield " ".join(w.value for w in operands[skip:])
    elif name == "find":
        for i, value in enumerate(values):
            if value in ("-exec", "-execdir", "-ok"):
                end = next((j for j in range(i + 1, len(values)) if values[j] in (";", "+", "\\;")), len(values))
                yield " ".join(values[i + 1 : end])
    elif name in ("docker", "podman", "kubectl") and "exec" in values:
        rest = values[values.index("--") + 1 :] if "--" in values else values[values.index("exec") + 2 :]
        if rest:
            yield " ".join(rest)


RULES: tuple[tuple[str, Rule], ...] = (
    (DELETION, _rm),
    (DELETION, _find),
    (DELETION, _move_or_wipe),
    (DELETION, _redirects),
    (FILESYSTEM, _filesystem),
    (DOWNLOAD, _piped_download),
    (DOWNLOAD, _run_downloaded),
    (PERMISSIONS, _permissions),
    (FORCE_PUSH, _force_push),
    (SQL, _sql),
    (CLUSTER, _cluster),
)
"""Every category's rules, tried in order on each simple command."""
