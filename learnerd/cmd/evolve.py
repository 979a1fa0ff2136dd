"""``learnerd evolve DOC``: tune per-cluster logit deltas so the document's model answers shorter without
answering worse (:mod:`learnerd.steering`).

The model is the document's base with its current adapter (``--adapter``); the pool is the document's
probes, or ``--pool FILE.jsonl``. The run directory (``--run-dir``, default
``<state_dir>/steering/runs/<doc key>``) receives ``history.json``, ``deltas_current.json``,
``deltas_best.json``, ``reflector_message_NNN.txt`` and ``evolution.png`` after every iteration; running
the command again on the same directory continues the run up to ``--iterations`` in all. The first
SIGINT or SIGTERM stops at the next token (or when a reflector request in flight returns), keeps every
finished iteration and the best deltas on disk and exits 0; a second SIGINT stops at once (exit 130).

``--apply-best`` generates instead: every pool question answered with the run's best deltas (or the
steering file ``--steering`` names) and without steering, judged and scored both ways; the results are
printed and written to ``apply_best.json`` in the run directory.

With ``[steering.server] start`` set, every iteration is answered through an external inference server
that evolve restarts with the iteration's deltas (``{steering}`` in the command), waiting for its
``health_url`` (:mod:`learnerd.steering.server`).

Settings come from ``[steering]`` in the config file; the flags below override them.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from learnerd.cmd._common import CommandError, add_common_options, apply_logging, load_config_from_args, plain
from learnerd.cmd._generation import add_generation_options, load_document_model, load_steering_processor, read_dlm

if TYPE_CHECKING:
    from learnerd.daemon.config import Config
    from learnerd.steering.settings import SteeringConfig

# flag dest -> [steering] key; a flag left out keeps the config's value
_OVERRIDES = (
    "iterations",
    "minibatch_size",
    "clusters",
    "scale",
    "delta_bound",
    "offline_step",
    "max_new_tokens",
    "seed",
    "pool",
    "reflector",
    "reflector_model",
    "reflector_base_url",
    "judge",
    "judge_model",
    "judge_base_url",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evolve",
        help="tune per-cluster logit deltas: shorter answers, as correct (decode-time steering)",
        description=plain(__doc__),
    )
    p.add_argument("doc", metavar="DOC", type=Path, help="the .dlm document (model, adapter, probes)")
    p.add_argument("--run-dir", type=Path, metavar="DIR", help="run directory (default: <state_dir>/steering/runs/KEY)")
    p.add_argument("--iterations", type=int, metavar="N", help="iterations in all (a resumed run continues to N)")
    p.add_argument("--minibatch-size", type=int, metavar="N", help="pool questions per iteration")
    p.add_argument("--clusters", type=int, metavar="K", help="k-means clusters of the vocabulary (besides 0 and 1)")
    p.add_argument("--scale", type=float, metavar="TOKENS", help="shortness = 1 / (1 + mean_len / scale)")
    p.add_argument("--delta-bound", type=float, metavar="B", help="every delta within [-B, B] logits")
    p.add_argument("--offline-step", type=float, metavar="S", help="initial step size of the offline and cma searches")
    p.add_argument(
        "--cluster-bound",
        action="append",
        metavar="ID=LOW,HIGH",
        help="cluster ID's deltas within [LOW, HIGH] logits instead (repeatable; e.g. 0=0,10: EOS only up)",
    )
    p.add_argument("--max-new-tokens", type=int, metavar="N", help="longest answer generated")
    p.add_argument("--seed", type=int, help="seed of k-means, minibatches and the offline reflector")
    p.add_argument("--pool", metavar="JSONL", help="questions: a JSONL file of {question, answer} rows")
    p.add_argument("--reflector", choices=("offline", "openai", "cma"), help="who proposes the next deltas")
    p.add_argument("--reflector-model", metavar="NAME", help="chat model of the openai reflector")
    p.add_argument("--reflector-base-url", metavar="URL", help="OpenAI-compatible endpoint of the reflector")
    p.add_argument("--judge", choices=("match", "llm"), help="who decides whether an answer is correct")
    p.add_argument("--judge-model", metavar="NAME", help="chat model of the llm judge")
    p.add_argument("--judge-base-url", metavar="URL", help="OpenAI-compatible endpoint of the judge")
    p.add_argument("--apply-best", action="store_true", help="answer the pool with the best deltas; no evolution")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the outcome as JSON on stdout (the run: status, iterations, best; --apply-best: apply_best.json)",
    )
    add_generation_options(p)
    add_common_options(p)
    p.set_defaults(func=run)


def steering_settings(cfg_steering: SteeringConfig, args: argparse.Namespace) -> SteeringConfig:
    """``[steering]`` with the flags given applied. Raises :class:`CommandError` (exit 2) for a bad value."""
    from learnerd.daemon.config import config_from_dict
    from learnerd.sections import ConfigError

    changes = {name: getattr(args, name) for name in _OVERRIDES if getattr(args, name, None) is not None}
    if changes.get("pool"):
        changes["pool"] = str(Path(changes["pool"]).expanduser().resolve())
    if getattr(args, "cluster_bound", None):
        changes["cluster_bounds"] = {**cfg_steering.cluster_bounds, **_cluster_bounds(args.cluster_bound)}
    try:
        return config_from_dict({"steering": {**cfg_steering.model_dump(), **changes}}, base=None).steering
    except ConfigError as exc:
        raise CommandError(str(exc), exit_code=2) from None


def _cluster_bounds(flags: list[str]) -> dict[int, tuple[float, float]]:
    """``--cluster-bound ID=LOW,HIGH`` flags as ``{id: (low, high)}``; :class:`CommandError` (exit 2) if malformed."""
    bounds = {}
    for flag in flags:
        try:
            cid, interval = flag.split("=", 1)
            low, high = interval.split(",")
            bounds[int(cid)] = (float(low), float(high))
        except ValueError:
            raise CommandError(f"--cluster-bound {flag!r}: expected ID=LOW,HIGH, e.g. 0=0,10", exit_code=2) from None
    return bounds


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    cfg = load_config_from_args(args)
    settings = steering_settings(cfg.steering, args)
    if args.steering is not None and not args.apply_best:
        raise CommandError("--steering PATH goes with --apply-best (an evolution starts from zero deltas)", exit_code=2)
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    document = read_dlm(args.doc)
    pool = _load_pool(settings, document)
    loaded = load_document_model(cfg, document, args.adapter, args.doc_key, args.device)
    run_dir = (args.run_dir or cfg.layout.steering_dir / "runs" / loaded.doc_key).expanduser().resolve()
    from learnerd.steering.evolve import PoolModel, SteeredModel

    model: PoolModel = SteeredModel(
        loaded.model, loaded.tokenizer, loaded.document.frontmatter.system_prompt, settings.max_new_tokens
    )
    if settings.server.start and not args.apply_best:
        from learnerd.steering.chat import make_client
        from learnerd.steering.server import ServedModel

        client = make_client(settings.server.chat_base_url(), settings.api_key_env)
        model = ServedModel(client, settings.server.model, model.tokenizer, model.system, model.max_new_tokens)
    judge = _make_judge(settings)
    if args.apply_best:
        return _apply_best(
            console, args.steering or run_dir / "deltas_best.json", run_dir, model, pool, judge, settings, args.json
        )
    clusters = _clusters(console, cfg, settings, loaded, args.json)
    return _evolve(console, args, cfg, run_dir, model, clusters, pool, judge, settings, loaded.describe())


def _load_pool(settings: SteeringConfig, document: Any) -> list:
    from learnerd.steering.pool import PoolError, pool_from_document, read_pool_jsonl
    from learnerd.store.dlm import DocumentError

    try:
        return read_pool_jsonl(settings.pool) if settings.pool else pool_from_document(document)
    except (PoolError, DocumentError) as exc:
        raise CommandError(str(exc)) from None


def _make_judge(settings: SteeringConfig) -> Any:
    from learnerd.steering.chat import make_client
    from learnerd.steering.judges import LLMJudge, MatchJudge

    if settings.judge == "llm":
        client = make_client(settings.judge_base_url, settings.api_key_env)
        return LLMJudge(client, settings.judge_model, settings.reflector_max_attempts)
    return MatchJudge(settings.numeric_tolerance)


def _make_reflector(settings: SteeringConfig) -> Any:
    from learnerd.steering.chat import make_client
    from learnerd.steering.reflectors import CMAReflector, OfflineReflector, OpenAIReflector

    if settings.reflector == "openai":
        client = make_client(settings.reflector_base_url, settings.api_key_env)
        return OpenAIReflector(client, settings.reflector_model, settings.reflector_max_attempts)
    if settings.reflector == "cma":
        try:
            return CMAReflector(settings.offline_step, settings.seed, settings.cma_popsize)
        except ImportError:
            raise CommandError("--reflector cma needs the cma library: pip install cma", exit_code=2) from None
    return OfflineReflector(settings.offline_step, settings.seed)


def _clusters(console: Any, cfg: Config, settings: SteeringConfig, loaded: Any, as_json: bool) -> Any:
    from learnerd.cmd._progress import progress_display
    from learnerd.ml.embedders import EmbedderError, embedder_name, make_embedder
    from learnerd.steering.clusters import ClusterError, eos_token_ids, load_or_build_clusters

    with progress_display(console, lines=not as_json, transient=True) as display:
        try:
            return load_or_build_clusters(
                loaded.tokenizer,
                embedder_name=embedder_name(cfg.embeddings),
                make_embedder=lambda: make_embedder(cfg.embeddings),
                k=settings.clusters,
                seed=settings.seed,
                eos_ids=eos_token_ids(loaded.tokenizer, loaded.model.generation_config),
                cache_root=cfg.layout.steering_dir / "clusters",
                pca_dim=settings.pca_dim,
                on_progress=lambda done, total: display.update("embedding the vocabulary", done, total, unit="text"),
            )
        except (ClusterError, EmbedderError) as exc:
            raise CommandError(f"vocabulary clusters: {exc}") from None


def _evolve(console, args, cfg, run_dir: Path, model, clusters, pool, judge, settings: SteeringConfig, describe) -> int:
    from learnerd.cmd._progress import progress_display
    from learnerd.steering.evolve import EvolutionError, run_evolution
    from learnerd.steering.judges import JudgeError
    from learnerd.steering.reflectors import ReflectorError
    from learnerd.steering.server import LOG_FILE, ExternalServer, ServerError

    stop = threading.Event()
    server = ExternalServer(settings.server, run_dir / LOG_FILE) if settings.server.start else None
    previous = {}

    def on_signal(signum: int, frame: Any) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        console.print(f"{signal.Signals(signum).name}: stopping; the best deltas stay in {run_dir}")
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, on_signal)
    try:
        with progress_display(console, lines=not args.json, redirect_stderr=True) as display:
            apply_logging(args, cfg)  # log lines through the progress display

            def on_answer(iteration: int, done: int, total: int) -> None:
                display.update(
                    "evolve",
                    iteration * total + done,
                    settings.iterations * total,
                    unit="answer",
                    iteration=f"{iteration + 1}/{settings.iterations}",
                )

            def on_iteration(entry: dict) -> None:
                console.print(
                    f"iteration {entry['iteration']}: composite {entry['composite']:.4f}, correctness "
                    f"{entry['correctness']:.3f}, mean length {entry['mean_len']:.1f} tokens"
                )
                if "reflection_skipped" in entry:
                    console.print(f"  reflection skipped, the same deltas again: {entry['reflection_skipped']}")

            try:
                outcome = run_evolution(
                    run_dir,
                    model=model,
                    clusters=clusters,
                    pool=pool,
                    judge=judge,
                    reflector=_make_reflector(settings),
                    settings=settings,
                    extra_parameters={**describe, **({"server": settings.server.start} if server else {})},
                    stop=stop,
                    on_answer=on_answer,
                    on_iteration=on_iteration,
                    on_deltas=(lambda file: server.restart(file, stop)) if server is not None else None,
                )
            except (EvolutionError, ReflectorError, JudgeError, ServerError) as exc:
                raise CommandError(f"{exc} (finished iterations and the best deltas are in {run_dir})") from None
    finally:
        if server is not None:
            server.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        apply_logging(args, cfg)
    best = outcome.best
    if args.json:
        import json

        summary = {
            "status": outcome.status,
            "iterations": len(outcome.history),
            "of": settings.iterations,
            "run_dir": str(run_dir),
            "best": best,
        }
        print(json.dumps(summary, indent=2, ensure_ascii=False, default=str))
    verb = "finished" if outcome.status == "finished" else "stopped after"
    console.print(f"{verb} {len(outcome.history)} of {settings.iterations} iterations in {run_dir}")
    if best is not None:
        console.print(
            f"best: iteration {best['iteration']}, composite {best['composite']:.4f} "
            f"(correctness {best['correctness']:.3f}, mean length {best['mean_len']:.1f} tokens) → "
            f"{run_dir / 'deltas_best.json'}"
        )
    if outcome.status == "stopped":
        console.print("run the same command again to continue")
    return 0


def _apply_best(
    console, steering_path: Path, run_dir: Path, model, pool, judge, settings: SteeringConfig, as_json: bool = False
) -> int:
    import json

    from rich.console import Console
    from rich.table import Table

    from learnerd.steering.evolve import answer_items, score
    from learnerd.steering.judges import JudgeError
    from learnerd.store.atomic import atomic_write_text

    if not steering_path.exists():
        raise CommandError(f"{steering_path} does not exist: run `learnerd evolve` first (or pass --steering PATH)")
    processor = load_steering_processor(steering_path, model.tokenizer)
    results = {}
    for label, proc in (("steered", processor), ("unsteered", None)):
        try:
            records = answer_items(model, proc, pool, judge)
        except JudgeError as exc:
            raise CommandError(str(exc)) from None
        assert records is not None  # None only when a stop event is set, and none is passed
        scores = score([r.tokens for r in records], [r.correct for r in records], settings.scale)
        results[label] = {**dataclasses.asdict(scores), "answers": [dataclasses.asdict(r) for r in records]}
    table = Table(title=f"{len(pool)} pool question(s) with {steering_path}", show_lines=True)
    for column in ("question", "steered answer", "ok", "unsteered answer", "ok"):
        table.add_column(column, overflow="fold")
    mark = {True: "✓", False: "✗"}
    for steered, unsteered in zip(results["steered"]["answers"], results["unsteered"]["answers"], strict=True):
        table.add_row(
            steered["question"],
            steered["response"],
            mark[steered["correct"]],
            unsteered["response"],
            mark[unsteered["correct"]],
        )
    out = Console(highlight=False, stderr=as_json)  # --json: stdout carries the JSON only
    out.print(table)
    for label in ("steered", "unsteered"):
        r = results[label]
        out.print(
            f"{label}: composite {r['composite']:.4f}, correctness {r['correctness']:.3f}, "
            f"mean length {r['mean_len']:.1f} tokens"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    payload = {"steering": str(steering_path), "scale": settings.scale, **results}
    atomic_write_text(run_dir / "apply_best.json", json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    if as_json:
        print(json.dumps(payload, indent=2, ensure_ascii=False))
    return 0
