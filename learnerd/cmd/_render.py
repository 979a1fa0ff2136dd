"""Readable rich tables of the admin API's answers (``learnerd ctl``; ``--json`` prints them raw)."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from learnerd.runtime.progress import MEASURES

_ANALYZER_ROWS = (
    ("files_tracked", "log files tracked"),
    ("lines_read", "lines read"),
    ("bytes_read", "bytes read"),
    ("blocks_changed", "blocks changed"),
    ("traces_joined", "foyle traces joined"),
    ("pending_traces", "foyle traces pending"),
    ("malformed_lines", "malformed lines skipped"),
    ("unknown_events", "unknown events skipped"),
    ("oversized_lines", "oversized lines skipped"),
    ("refused_events", "block events refused"),
    ("foreign_lines", "foreign lines skipped"),
    ("truncations", "truncations"),
    ("rotations", "rotations"),
    ("errors", "errors (retried)"),
)


def rejected_rows(analyzer: Mapping[str, Any]) -> list[tuple[str, int]]:
    """``(label, count)`` rows of the rejected attempts and rejected suggestions per format in the analyzer's
    counters (the fields of an :class:`~learnerd.analyzer.stats.AnalyzerStats`), formats sorted; none when
    there are none."""
    rows = []
    for key, label in (("rejected_attempts", "rejected attempts"), ("rejected_suggestions", "rejected suggestions")):
        counts = analyzer.get(key, {})
        rows += [(f"{label} ({name})", n) for name, n in sorted(counts.items())]
    return rows


def console():
    """A console for stdout; wide enough for the tables when stdout is not a terminal."""
    from rich.console import Console

    out = Console(highlight=False)
    return out if out.is_terminal else Console(highlight=False, width=140)


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, ensure_ascii=False, indent=2)
    print()


def metrics_json(text: str) -> dict[str, Any]:
    """Prometheus text exposition (format 0.0.4) as JSON-able data, parsed by ``prometheus_client``'s own
    parser: metric family name -> ``{"type", "help", "samples": [{"name", "labels", "value"}]}``; a value
    that is not finite becomes the string Prometheus writes for it (``"NaN"``, ``"+Inf"``, ``"-Inf"``).

    Raises:
        ValueError: ``text`` is not in the exposition format.
    """
    import math

    from prometheus_client.parser import text_string_to_metric_families

    def value(v: float) -> float | str:
        return v if math.isfinite(v) else ("NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf"))

    return {
        family.name: {
            "type": family.type,
            "help": family.documentation,
            "samples": [{"name": x.name, "labels": dict(x.labels), "value": value(x.value)} for x in family.samples],
        }
        for family in text_string_to_metric_families(text)
    }


def duration(seconds: float) -> str:
    """``93784`` → ``"1d 2h 3m"``; under a minute: ``"42s"``."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [f"{days}d"] if days else []
    if days or hours:
        parts.append(f"{hours}h")
    parts.append(f"{minutes}m")
    return " ".join(parts)


def pace(seconds: float) -> str:
    """Seconds per step, to two figures: ``2.137`` → ``"2.1"``, ``0.04912`` → ``"0.049"``, ``31.4`` → ``"31"``."""
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"


PHASE_KEYS = ("phase", "unit")
"""A progress entry's phase (``base answers``, ``training step``, ``evaluating``) and the unit it counts in."""
USAGE_KEYS = ("cpu_share", "rss_mb", "peak_rss_mb")
"""A progress entry's process usage (:class:`learnerd.training.runner.ProcessUsage`)."""


def describe_fields(fields: dict[str, Any]) -> list[str]:
    """``{"loss": "0.41", "after": None}`` → ``["loss 0.41"]`` (underscores in names become spaces); the phase and
    usage keys are left out (:func:`describe_usage` shows the latter)."""
    shown = {k: v for k, v in fields.items() if k not in (*PHASE_KEYS, *USAGE_KEYS)}
    return [f"{name.replace('_', ' ')} {value}" for name, value in shown.items() if value is not None]


def mebibytes(mb: float) -> str:
    """``850.2`` → ``"850 MiB"``, ``1536`` → ``"1.5 GiB"``."""
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.0f} MiB"


def describe_usage(fields: dict[str, Any]) -> list[str]:
    """A process's usage among ``fields``: ``["cpu 97%", "rss 1.2 GiB (peak 1.5 GiB)"]`` (a CPU share of 1.0 is one
    core, 100 %, as ``top`` counts)."""
    parts = []
    if fields.get("cpu_share") is not None:
        parts.append(f"cpu {fields['cpu_share'] * 100:.0f}%")
    if fields.get("rss_mb") is not None:
        peak = f" (peak {mebibytes(fields['peak_rss_mb'])})" if fields.get("peak_rss_mb") is not None else ""
        parts.append(f"rss {mebibytes(fields['rss_mb'])}{peak}")
    return parts


def progress_line(progress: dict[str, Any], unit: str = "step", ending: str | None = None) -> str:
    """One piece of work's progress, as :class:`~learnerd.runtime.progress.StepProgress`'s ``to_json()`` and
    its fields say: ``"training step 40/96 · 2.1 s/step · loss 0.41 · cpu 97% · rss 1.2 GiB · ETA 2m"`` — the
    phase (its ``phase`` field, else ``unit``; the field ``unit`` overrides ``unit``) and its steps (once one is
    done or the total is known), the pace (once known), the fields, the process's usage, then ``ending`` or else
    the time left (once known); ``"starting"`` when there is nothing else to say."""
    step, total, seconds, eta = (progress[k] for k in ("step", "total", "s_per_step", "eta_s"))
    unit = progress.get("unit") or unit
    label = progress.get("phase") or unit
    parts = []
    if step or total is not None:
        parts.append(f"{label} {step}/{total}" if total is not None else f"{label} {step}")
    elif progress.get("phase"):
        parts.append(label)
    if seconds is not None:
        parts.append(f"{pace(seconds)} s/{unit}")
    fields = {k: v for k, v in progress.items() if k not in MEASURES}
    parts.extend(describe_fields(fields))
    parts.extend(describe_usage(fields))
    if ending is not None:
        parts.append(ending)
    elif eta is not None:
        parts.append(f"ETA {duration(eta)}")
    return " · ".join(parts) or "starting"


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "—"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _last_error(error: dict[str, Any] | None) -> str:
    if not error:
        return ""
    message = error["message"] if len(error["message"]) <= 60 else error["message"][:59] + "…"
    return f"{error['key']}: {message} ({_when(error['at'])})"


def _line_problem(problem: dict[str, Any]) -> str:
    """``file:line: reason (when)`` for the analyzer's last malformed line or failing file."""
    return f"{problem['file']}:{problem['line']}: {problem['reason']} ({_when(problem['at'])})"


def _openai_access(url: str | None, access: dict[str, Any] | None) -> str:
    """The OpenAI endpoint's status row: its URL and who it serves (rich markup)."""
    from rich.markup import escape

    if not url:
        return "— (--listen-openai)"
    if access is None:
        return escape(url)
    if access["insecure_no_token"]:
        return f"{escape(url)} · [bold red]INSECURE[/]: learned adapters served without the token (--insecure-no-token)"
    if access["token"] is None:
        return f"{escape(url)} · no token: base models only (learnerd init writes one)"
    anyone = "; base models without it on loopback" if access["without_token"] == "bases" else ""
    return f"{escape(url)} · token from {escape(access['token'])}{anyone}"


def print_status(status: dict[str, Any]) -> None:
    """The daemon's status: a summary, the controllers, the analyzer's counters, the last backfill, and
    the warnings an operator must act on (e.g. a foyle export foyle will refuse)."""
    from rich.markup import escape
    from rich.table import Table

    out = console()
    counts = status["counts"]
    embedder = status["embedder"]
    endpoints = status["endpoints"]
    summary = Table(
        title=f"learnerd {status['version']} — {status['state']}, pid {status['pid']}, "
        f"up {duration(status['uptime_s'])}",
        show_header=False,
        title_justify="left",
    )
    summary.add_column(style="bold")
    summary.add_column()
    for name, value in (
        ("config", status["config_path"] or "(defaults: no config file)"),
        ("state dir", status["state_dir"]),
        ("admin socket", endpoints.get("admin_socket") or "—"),
        ("metrics", endpoints.get("metrics") or "— (--metrics-addr)"),
        ("search", endpoints.get("search") or "— (--listen-search)"),
        ("openai", _openai_access(endpoints.get("openai"), status.get("openai_access"))),
        ("log level", status["log_level"]),
        ("embedder", f"{embedder['name']} ({'loaded' if embedder['loaded'] else 'loading'})"),
        (
            "store",
            f"{counts['blocks']} blocks · {counts['examples']} examples · {counts['vectors']} vectors "
            f"({counts['indexed']} indexed) · {counts['adapters']} adapters",
        ),
    ):
        summary.add_row(name, str(value))
    out.print(summary)

    controllers = Table(title="controllers", title_justify="left")
    for column in ("controller", "state", "workers", "depth", "delayed", "in flight", "reconciles", "retries"):
        controllers.add_column(column, justify="left" if column in ("controller", "state") else "right")
    controllers.add_column("failures / dropped / terminal", justify="right")
    controllers.add_column("last error")
    for name, c in status["controllers"].items():
        controllers.add_row(
            name,
            "[yellow]paused[/]" if c["paused"] else "running",
            str(c["workers"]),
            str(c["queue_depth"]),
            str(c["waiting"]),
            str(len(c["in_flight"])),
            str(c["reconciles"]),
            str(c["retries"]),
            f"{c['failures']} / {c['dropped']} / {c['terminal']}",
            _last_error(c["last_error"]),
        )
    out.print(controllers)
    flights = _in_flight(status["controllers"])
    if flights.row_count:
        out.print(flights)
    if status.get("documents"):
        out.print(_documents(status["documents"]))
    if status.get("suggestions"):
        out.print(_suggestions(status["suggestions"]))

    analyzer = status["analyzer"]
    table = Table(title="analyzer", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for key, label in _ANALYZER_ROWS:
        table.add_row(label, str(analyzer[key]))
    unjoinable = sum(analyzer.get("unjoinable_traces", {}).values())
    table.add_row("unjoinable foyle traces", str(unjoinable))
    for label, per_format in rejected_rows(analyzer):
        table.add_row(label, str(per_format))
    for key, label in (("last_malformed", "last malformed line"), ("last_error", "last file error")):
        if analyzer.get(key):
            table.add_row(label, _line_problem(analyzer[key]))
    out.print(table)
    if status.get("privacy"):
        out.print(_privacy(status["privacy"]))

    if status.get("fleet"):
        print_fleet(status["fleet"])

    if status.get("backfill"):
        out.print(backfill_line(status["backfill"]))

    for warning in status.get("warnings", ()):
        out.print(f"[bold yellow]warning[/]: {escape(warning)}")


def _privacy(privacy: dict[str, Any]) -> Any:
    """Secrets redacted by kind, blocks refused by the command policy by reason, and the tombstones
    (docs/privacy.md)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="privacy", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for kind, n in sorted(privacy.get("redacted", {}).items()):
        table.add_row(escape(f"secrets redacted: <{kind}>"), str(n))
    for reason, n in sorted(privacy.get("refused", {}).items()):
        table.add_row(escape(reason), str(n))
    table.add_row("tombstones (learnerd forget --list)", str(privacy.get("tombstones", 0)))
    return table


IN_FLIGHT_KEYS_SHOWN = 5
"""Keys in flight listed for a controller without progress (an embeddings batch holds dozens)."""


def _in_flight(controllers: dict[str, Any]) -> Any:
    """What each controller has in flight: a row per key with its progress (step of total, pace, time left,
    the reconciler's fields), or — for a controller whose reconciler reports none — one row of its keys."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="in flight", title_justify="left")
    for column in ("controller", "key", "progress"):
        table.add_column(column)
    for name, c in controllers.items():
        keys, progress = c["in_flight"], c.get("progress")
        if progress is None and keys:
            shown = ", ".join(keys[:IN_FLIGHT_KEYS_SHOWN])
            more = f" … (+{len(keys) - IN_FLIGHT_KEYS_SHOWN})" if len(keys) > IN_FLIGHT_KEYS_SHOWN else ""
            table.add_row(name, escape(shown + more), "—")
        for key in keys if progress is not None else ():
            p = progress.get(key)
            fields = {k: v for k, v in p.items() if k != "doc_key"} if p is not None else None
            table.add_row(name, escape(key), escape(progress_line(fields)) if fields is not None else "starting")
    return table


def _documents(documents: dict[str, Any]) -> Any:
    """Per document: the version served, the candidates in training and evaluation, the last score, and the
    candidate the promotion gate rejected (with why)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="documents", title_justify="left")
    for column in ("document", "served", "training", "evaluation", "last score", "rejected"):
        table.add_column(column)
    for path, d in documents.items():
        training, evaluation, last = d["training"], d["evaluation"], d["last_score"]

        def candidate(progress: dict[str, Any] | None) -> str:
            if progress is None:
                return "—"
            shown = {k: v for k, v in progress.items() if k not in ("doc_key", "version")}
            return escape(f"{progress['version']}: {progress_line(shown)}")

        table.add_row(
            escape(Path(path).name),
            escape(f"error: {d['error']}") if "error" in d else d["served"] or "—",
            candidate(training),
            candidate(evaluation),
            f"{last['score']:.3f} ({last['band']}, {last['version']})" if last else "—",
            _rejected(d.get("rejected")),
        )
    return table


def _suggestions(totals: dict[str, dict[str, dict[str, int]]]) -> Any:
    """Per served adapter version (document ``dlm_id`` and version): answers served, and how many of them
    were run as suggested, edited, or failed (docs/operations.md, "Suggestions")."""
    from rich.markup import escape
    from rich.table import Table

    from learnerd.store.suggestions import OUTCOMES

    table = Table(title="suggestions (served answers)", title_justify="left")
    table.add_column("document")
    table.add_column("version")
    for outcome in OUTCOMES:
        table.add_column(outcome, justify="right")
    for document, versions in totals.items():
        for version, n in versions.items():
            table.add_row(escape(document), version, *(str(n.get(o, 0)) for o in OUTCOMES))
    return table


def _rejected(rejected: dict[str, Any] | None) -> str:
    from rich.markup import escape

    if rejected is None:
        return "—"
    return escape(f"{rejected['version']}: " + "; ".join(rejected["reasons"]))


def print_fleet(fleet: dict[str, Any]) -> None:
    """The replicas of the fleet (docs/fleet.md): leases, roles and the block keys each owns."""
    from rich.table import Table

    table = Table(
        title=f"fleet — this replica {fleet['replica']} (lease {fleet['lease_ttl_s']:g} s)", title_justify="left"
    )
    for column in ("replica", "host", "pid", "roles", "lease renewed", "block keys owned"):
        table.add_column(column, justify="right" if column in ("pid", "block keys owned") else "left")
    owned = fleet["block_keys_per_owner"]
    for r in fleet["replicas"]:
        renewed = time.strftime("%H:%M:%S", time.localtime(r["renewed"]))
        table.add_row(r["id"], r["host"], str(r["pid"]), ",".join(r["roles"]), renewed, str(owned.get(r["id"], 0)))
    console().print(table)


def backfill_line(job: dict[str, Any]) -> str:
    """One line about a backfill job."""
    changes = ", ".join(
        f"{controller} {change.replace('_', ' ')} {n}"
        for controller, counts in sorted(job["changes"].items())
        for change, n in sorted(counts.items())
    )
    return (
        f"backfill #{job['id']} since {_when(job['since'])}: {job['state']}, {job['done']}/{job['blocks']} blocks"
        + (f"; changed: {changes}" if changes else "; nothing changed")
    )


def print_paused(answer: dict[str, Any]) -> None:
    for name, paused in answer["paused"].items():
        print(f"{name}: {'paused' if paused else 'running'}")


def print_requeued(answer: dict[str, Any]) -> None:
    print(f"requeued {answer['key']!r} on {answer['controller']} (queue depth {answer['queue_depth']})")


def print_backfill(job: dict[str, Any]) -> None:
    print(backfill_line(job))


def print_drain(answer: dict[str, Any]) -> None:
    if answer["state"] == "exited":
        print("the daemon drained and exited")
    else:
        print(f"the daemon is draining: in-flight work gets {answer['drain_timeout_s']:g} s, then it exits")


def print_log_level(answer: dict[str, Any]) -> None:
    print(f"{answer['level']} (was {answer['previous']})" if "previous" in answer else answer["level"])


def print_reload(answer: dict[str, Any]) -> None:
    """What a reload changed, applied, and left for a restart."""
    from rich.table import Table

    out = console()
    if not answer["changed"]:
        out.print(f"reloaded {answer['config_path']}: nothing changed (log level {answer['log_level']})")
        return
    table = Table(title=f"reloaded {answer['config_path']}", title_justify="left")
    for column in ("setting", "was", "now", "effect"):
        table.add_column(column)
    for key, (old, new) in answer["changed"].items():
        effect = "[green]applied[/]" if key in answer["applied"] else "[yellow]needs a restart[/]"
        table.add_row(key, json.dumps(old), json.dumps(new), effect)
    out.print(table)
