"""A shell text parsed into its simple commands: what the secret finders and the command policy read.

The parser is tree-sitter's bash grammar (``tree-sitter-bash``), which accepts any text — a half-typed
line, a notebook cell of Python — and recovers around what it cannot parse, so prose and code parse too
(into commands that match no rule). Each simple command keeps its words with quote removal done
(``"$HOME"/*`` → ``$HOME/*``; ``'DROP TABLE x'`` → ``DROP TABLE x``; ``\\rm`` → ``rm``), expansions kept as
written, and, for each character of a word's value, where it stands in the text, so a finder replaces
exactly a secret's own characters. A command also knows what it reads on standard input when the text says
so: the commands of the pipeline stages before it, a here-document or a here-string.

Command and process substitutions (``$(curl …)``, ``<(wget …)``) and the bodies of functions, loops,
conditionals, subshells and brace groups are parsed too: their commands are in :attr:`Script.commands`
like any other, and a word remembers the substitutions inside it (:attr:`Word.substitutions`).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

_LITERAL_WORDS = frozenset({"word", "number", "raw_string", "ansi_c_string", "string_content"})
_EXPANSIONS = frozenset(
    {"simple_expansion", "expansion", "command_substitution", "process_substitution", "arithmetic_expansion"}
)
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_TRUNCATING = frozenset({">", ">|", "&>", "<>"})
MAX_DEPTH = 64
"""Statements nested deeper than this (subshells, substitutions, bodies) are not parsed into commands."""


@dataclass(frozen=True)
class Word:
    """One shell word: ``value`` after quote removal (expansions as written), ``offsets[i]`` the index in the
    parsed text of ``value[i]``; ``start``/``end`` the word's span in the text, quotes included; ``literal``:
    no expansion in it; ``substitutions``: the scripts of the ``$(…)`` / ``<(…)`` inside it."""

    value: str
    offsets: tuple[int, ...]
    start: int
    end: int
    literal: bool = True
    substitutions: tuple[Script, ...] = ()

    def span(self, i: int = 0, j: int | None = None) -> tuple[int, int]:
        """The text span of ``value[i:j]`` (characters; a quote between two of them is inside it)."""
        j = len(self.value) if j is None else j
        if i >= j:
            return (self.end, self.end)
        return (self.offsets[i], self.offsets[j - 1] + 1)


@dataclass(frozen=True)
class Redirect:
    """``op`` (``>``, ``>>``, ``<``, ``&>``, ``<<<``, …) and its target word."""

    op: str
    target: Word

    @property
    def truncates(self) -> bool:
        """Whether it empties its target before writing (``>``, ``>|``, ``&>``, ``<>``)."""
        return self.op in _TRUNCATING


@dataclass
class Command:
    """A simple command: ``argv`` (the name first; empty for assignments alone), its variable
    ``assignments`` (name, value), its ``redirects``; ``upstream``: the commands of the pipeline stages
    before it (what writes its standard input); ``stdin``: a here-document's body or a here-string's value
    it reads."""

    argv: list[Word] = field(default_factory=list)
    assignments: list[tuple[str, Word]] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    upstream: tuple[Command, ...] = ()
    stdin: str | None = None

    @property
    def name(self) -> str:
        """The command's basename (``/usr/bin/rm`` → ``rm``), or ``""``."""
        return self.argv[0].value.rsplit("/", 1)[-1] if self.argv else ""

    @property
    def args(self) -> list[Word]:
        return self.argv[1:]


@dataclass
class Script:
    """Every simple command of a text, in order, nested ones included; ``functions``: name → body."""

    commands: list[Command] = field(default_factory=list)
    functions: dict[str, Script] = field(default_factory=dict)


@functools.cache
def _parser() -> Parser:
    return Parser(Language(tree_sitter_bash.language()))


def parse(text: str) -> Script:
    """``text`` parsed as bash (see the module docstring); never raises on any text."""
    data = text.encode("utf-8", "surrogatepass")
    tree = _parser().parse(data)
    chars = None if len(data) == len(text) else _byte_to_char(text)
    return _Walker(data, chars).script(tree.root_node)


def _byte_to_char(text: str) -> list[int]:
    """Byte offset → character offset of ``text``'s UTF-8 encoding (one entry per byte, and the end)."""
    out: list[int] = []
    for i, ch in enumerate(text):
        out.extend([i] * len(ch.encode("utf-8", "surrogatepass")))
    out.append(len(text))
    return out


class _Walker:
    def __init__(self, data: bytes, chars: list[int] | None) -> None:
        self._data, self._chars = data, chars
        self._depth = 0

    def _at(self, byte: int) -> int:
        return byte if self._chars is None else self._chars[byte]

    def _text(self, node: Node) -> str:
        return self._data[node.start_byte : node.end_byte].decode("utf-8", "surrogatepass")

    def script(self, node: Node) -> Script:
        """The commands under ``node`` (its children's)."""
        script = Script()
        for child in node.children:
            self._statements(child, script)
        return script

    def _statements(self, node: Node, script: Script) -> list[Command]:
        """Add the commands under ``node`` to ``script``; returns them (in order). Nesting deeper than
        :data:`MAX_DEPTH` is not looked into (hostile input cannot exhaust the stack)."""
        self._depth += 1
        try:
            return [] if self._depth > MAX_DEPTH else self._statement(node, script)
        finally:
            self._depth -= 1

    def _statement(self, node: Node, script: Script) -> list[Command]:
        kind = node.type
        if kind in ("command", "declaration_command", "unset_command"):
            command = self._command(node, script)
            script.commands.append(command)
            return [command]
        if kind == "redirected_statement":
            return self._redirected(node, script)
        if kind == "pipeline":
            return self._pipeline(node, script)
        if kind == "function_definition":
            name, body = node.child_by_field_name("name"), node.child_by_field_name("body")
            if name is not None and body is not None:
                script.functions[self._text(name)] = inner = self.script(body)
                script.commands.extend(inner.commands)
                return inner.commands
            return []
        if kind in _SUBSTITUTIONS:
            inner = self.script(node)
            script.commands.extend(inner.commands)
            script.functions.update(inner.functions)
            return inner.commands
        found: list[Command] = []
        for child in node.children:
            found += self._statements(child, script)
        return found

    def _pipeline(self, node: Node, script: Script) -> list[Command]:
        found: list[Command] = []
        for child in node.named_children:
            stage = self._statements(child, script)
            if stage:
                stage[0].upstream = tuple(found)
            found += stage
        return found

    def _redirected(self, node: Node, script: Script) -> list[Command]:
        body = node.child_by_field_name("body")
        commands = self._statements(body, script) if body is not None else []
        if not commands:  # `> file` alone
            commands = [Command()]
            script.commands.append(commands[0])
        target = commands[0]
        tail: list[Command] = []
        for redirect in node.children_by_field_name("redirect"):
            if redirect.type == "file_redirect":
                op = next((c.type for c in redirect.children if not c.is_named), "")
                dest = redirect.child_by_field_name("destination")
                if dest is not None:
                    target.redirects.append(Redirect(op, self.word(dest, script)))
            elif redirect.type == "herestring_redirect":
                word = next((self.word(c, script) for c in redirect.named_children), None)
                if word is not None:
                    target.redirects.append(Redirect("<<<", word))
                    target.stdin = word.value
            elif redirect.type == "heredoc_redirect":
                body_text = "".join(self._text(c) for c in redirect.named_children if c.type == "heredoc_body")
                target.stdin = body_text
                for child in redirect.named_children:  # `cat <<EOF | psql`: the pipeline after the marker
                    if child.type in ("pipeline", "command", "list", "redirected_statement"):
                        after = self._statements(child, script)
                        if after:
                            after[0].upstream = (target, *after[0].upstream)
                            after[0].stdin = body_text if after[0].stdin is None else after[0].stdin
                        tail += after
        return commands + tail

    def _command(self, node: Node, script: Script) -> Command:
        command = Command()
        for child in node.named_children:
            kind = child.type
            if kind == "variable_assignment":
                name, value = child.child_by_field_name("name"), child.child_by_field_name("value")
                if name is not None:
                    empty = Word("", (), child.end_byte, child.end_byte)
                    command.assignments.append(
                        (self._text(name), self.word(value, script) if value is not None else empty)
                    )
            elif kind == "command_name":
                command.argv.append(self.word(child.named_children[0] if child.named_children else child, script))
            elif kind in ("file_redirect", "herestring_redirect"):
                dest = child.child_by_field_name("destination") or (
                    child.named_children[-1] if child.named_children else None
                )
                op = next((c.type for c in child.children if not c.is_named), "")
                if dest is not None:
                    command.redirects.append(Redirect(op, self.word(dest, script)))
                    if op == "<<<":
                        command.stdin = command.redirects[-1].target.value
            elif (kind in ("variable_name",) and node.type == "declaration_command") or kind != "comment":
                command.argv.append(self.word(child, script))
        if node.type == "declaration_command" and node.children:
            keyword = node.children[0]  # export / declare / local / readonly / typeset
            command.argv.insert(0, self.word(keyword, script))
        elif node.type == "unset_command" and node.children:
            command.argv.insert(0, self.word(node.children[0], script))
        return command

    def word(self, node: Node, script: Script) -> Word:
        """The :class:`Word` of ``node`` (any node that stands for one word); substitutions inside it are
        parsed into ``script`` too."""
        values: list[str] = []
        offsets: list[int] = []
        subs: list[Script] = []
        literal = self._collect(node, values, offsets, subs, script)
        return Word(
            "".join(values), tuple(offsets), self._at(node.start_byte), self._at(node.end_byte), literal, tuple(subs)
        )

    def _collect(self, node: Node, values: list[str], offsets: list[int], subs: list[Script], script: Script) -> bool:
        kind = node.type
        if kind in _EXPANSIONS:
            if kind in _SUBSTITUTIONS:
                inner = self.script(node)
                subs.append(inner)
                script.commands.extend(inner.commands)
            self._raw(node, 0, 0, values, offsets)
            return False
        if kind == "raw_string":
            self._raw(node, 1, 1, values, offsets)
            return True
        if kind == "ansi_c_string":
            self._raw(node, 2, 1, values, offsets)
            return True
        if kind in ("string", "translated_string"):
            literal = True
            start = node.start_byte + (2 if kind == "translated_string" else 1)
            for child in node.named_children:
                self._gap(start, child.start_byte, values, offsets)
                literal = self._collect(child, values, offsets, subs, script) and literal
                start = child.end_byte
            self._gap(start, max(start, node.end_byte - 1), values, offsets)
            return literal
        if kind == "concatenation":
            literal = True
            for child in node.children:
                literal = self._collect(child, values, offsets, subs, script) and literal
            return literal
        if kind == "string_content":
            self._unescape(node, values, offsets, '"\\$`\n')
            return True
        if kind in ("word", "number", "variable_name"):
            self._unescape(node, values, offsets, None)
            return True
        literal = True
        for child in node.named_children:  # anything else: what is in it, as written
            if child.type in _SUBSTITUTIONS:
                literal = self._collect(child, values, offsets, subs, script) and literal
        self._raw(node, 0, 0, values, offsets)
        return False

    def _gap(self, start: int, end: int, values: list[str], offsets: list[int]) -> None:
        """Text inside double quotes between named children (tree-sitter leaves plain runs unnamed)."""
        if end > start:
            self._unescape_bytes(start, end, values, offsets, '"\\$`\n')

    def _raw(self, node: Node, left: int, right: int, values: list[str], offsets: list[int]) -> None:
        start, end = node.start_byte + left, max(node.start_byte + left, node.end_byte - right)
        text = self._data[start:end].decode("utf-8", "surrogatepass")
        base = self._at(start)
        values.append(text)
        offsets.extend(range(base, base + len(text)))

    def _unescape(self, node: Node, values: list[str], offsets: list[int], escapable: str | None) -> None:
        self._unescape_bytes(node.start_byte, node.end_byte, values, offsets, escapable)

    def _unescape_bytes(
        self, start: int, end: int, values: list[str], offsets: list[int], escapable: str | None
    ) -> None:
        """Backslash removal: any escaped character outside quotes (``escapable`` None), only those of
        ``escapable`` inside double quotes; an escaped newline is a line continuation (removed)."""
        text = self._data[start:end].decode("utf-8", "surrogatepass")
        base = self._at(start)
        if "\\" not in text:
            values.append(text)
            offsets.extend(range(base, base + len(text)))
            return
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "\\" and i + 1 < len(text) and (escapable is None or text[i + 1] in escapable):
                if text[i + 1] != "\n":
                    values.append(text[i + 1])
                    offsets.append(base + i + 1)
                i += 2
                continue
            values.append(ch)
            offsets.append(base + i)
            i += 1


def words_of(script: Script) -> list[Word]:
    """Every word of every command of ``script`` but the command names: arguments, assignment values and
    redirect targets (a lone word — an id in a JSON record — parses as a command name, and is not among them)."""
    return list(
        itertools.chain.from_iterable(
            [*c.args, *(w for _, w in c.assignments), *(r.target for r in c.redirects)] for c in script.commands
        )
    )


def is_option(word: Word) -> bool:
    """Whether ``word`` is an option (``-x``, ``--name``, ``--name=value``; not ``-`` or ``--``)."""
    return word.value.startswith("-") and word.value not in ("-", "--")
