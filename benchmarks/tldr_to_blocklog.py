"""Turn tldr pages into learnerd block logs: one block per tldr example.

Each example of a page (``- description:`` then a backquoted command line) becomes a block whose
context is two markdown cells — the page's title and summary, then the example's description —
and whose executed cell is the command (``bash``, exit code 0). Two events per block (``context``
then ``executed``) so the analyzer's merging is exercised too. Output is deterministic: pages in
sorted order, block ids ``tldr/<platform>/<page>/<n>``, event times counting up from a fixed epoch,
at most ``--per-file`` blocks per ``.jsonl`` file.

    python benchmarks/tldr_to_blocklog.py ../shared/peer-data/tldr OUT_DIR [--limit N]

``--limit N`` takes whole pages, in order, until at least N blocks: the tests' fixed subset is
``--limit 1000``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learnerd.analyzer.blocklog import event_line
from learnerd.store.blocks import Cell

EPOCH = 1_700_000_000.0
_EXAMPLE = re.compile(r"^- (?P<desc>.+?)\s*$")
_COMMAND = re.compile(r"^`(?P<cmd>.+)`\s*$")


@dataclass(frozen=True)
class TldrBlock:
    block_id: str
    header: str
    description: str
    command: str


def parse_page(path: Path, platform: str) -> list[TldrBlock]:
    """The examples of one tldr page, in page order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    title = next((line[2:].strip() for line in lines if line.startswith("# ")), path.stem)
    summary = [line[1:].strip() for line in lines if line.startswith(">") and "More information" not in line]
    header = "\n".join([f"# {title}", "", *summary]).strip()
    blocks: list[TldrBlock] = []
    description: str | None = None
    for line in lines:
        if m := _EXAMPLE.match(line):
            description = m["desc"].rstrip(":")
        elif (m := _COMMAND.match(line)) and description is not None:
            blocks.append(TldrBlock(f"tldr/{platform}/{path.stem}/{len(blocks)}", header, description, m["cmd"]))
            description = None
    return blocks


def iter_blocks(tldr_dir: Path, limit: int | None = None) -> Iterator[TldrBlock]:
    """Every example of every page under ``tldr_dir/{common,linux}``; with ``limit``, whole pages until
    at least ``limit`` blocks."""
    count = 0
    for platform in ("common", "linux"):
        for page in sorted((tldr_dir / platform).glob("*.md")):
            if limit is not None and count >= limit:
                return
            for block in parse_page(page, platform):
                count += 1
                yield block


def block_lines(block: TldrBlock, seq: int) -> str:
    """The two block-log lines (context, executed) of ``block``; ``seq`` orders event times."""
    t = EPOCH + 2 * seq
    return event_line(
        "context", block.block_id, t, cells=[Cell("markup", block.header), Cell("markup", block.description)]
    ) + event_line("executed", block.block_id, t + 1, cell=Cell("code", block.command, "bash"), exit_code=0)


def convert(tldr_dir: Path, out_dir: Path, limit: int | None = None, per_file: int = 5000) -> int:
    """Write the block logs into ``out_dir``; return the number of blocks."""
    out_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    out = None
    try:
        for n, block in enumerate(iter_blocks(tldr_dir, limit), start=1):
            if (n - 1) % per_file == 0:
                if out is not None:
                    out.close()
                out = open(out_dir / f"tldr-{(n - 1) // per_file:03d}.jsonl", "w", encoding="utf-8")  # noqa: SIM115
            out.write(block_lines(block, n))
    finally:
        if out is not None:
            out.close()
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tldr_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--limit", type=int, default=None, help="stop after the page that reaches N blocks")
    parser.add_argument("--per-file", type=int, default=5000)
    args = parser.parse_args()
    n = convert(args.tldr_dir, args.out_dir, args.limit, args.per_file)
    print(f"wrote {n} blocks ({2 * n} events) to {args.out_dir}")


if __name__ == "__main__":
    main()
