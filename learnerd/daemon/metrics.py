"""learnerd's own Prometheus metrics, beside the workqueue and controller families.

* ``learnerd_build_info{version, python}`` (gauge, 1): the running build;
* ``process_*``, ``python_info``, ``python_gc_*``: prometheus-client's process, platform and GC collectors;
* ``learnerd_training_cycles_total{outcome}``: training cycles, ``committed`` or ``nothing to train``;
* ``learnerd_training_cycle_duration_seconds``: wall seconds of each trained cycle (histogram);
* ``learnerd_training_loss_nats{document}``: final training loss, nats per token, of each document's last cycle;
* ``learnerd_adapter_version{document}``: the current adapter version of each document — the ones current at
  start-up, then each one promoted (a committed candidate is not current until the promotion gate passes it);
* ``learnerd_promotions_total{outcome}``: the promotion gate's decisions, ``promoted`` or ``rejected``;
* ``learnerd_training_progress{document}``, ``learnerd_training_steps_done{document}``,
  ``learnerd_training_steps_planned{document}``: each training cycle in flight — optimizer steps done / planned
  (in [0, 1]), steps done, steps planned (from the start of its training process, until it ends);
* ``learnerd_evaluation_progress{document}``, ``learnerd_evaluation_steps_done{document}``,
  ``learnerd_evaluation_steps_planned{document}``: the same for each evaluation in flight, in the steps of
  :func:`learnerd.eval.suite.total_steps`;
* ``learnerd_evaluations_total``, ``learnerd_evaluation_duration_seconds`` (histogram): evaluations written;
* ``learnerd_evaluation_failures_total{document}``: failed evaluation attempts (every probe errored, or the
  evaluation raised), each retried with backoff and never written as a report;
* ``learnerd_evaluation_score{document}``: sway's overall score of the document's last evaluation, in [0, 1];
* ``learnerd_probe_pass_rate{document}``: passing / judged ``probe_recall`` probes of that evaluation;
* ``learnerd_search_duration_seconds``: seconds per ``POST /search`` answered from the live index (histogram);
* ``learnerd_suggestions_total{document, version, outcome}``: answers served (``outcome="served"``) and how
  they were resolved (``accepted``, ``edited``, ``failed``) per adapter version, read from the store at each
  scrape (:func:`learnerd.store.suggestions.counts`: totals kept in the database, so they survive restarts;
  every replica of a fleet reports the same totals). Here ``document`` is the ``dlm_id``, as in the answers'
  ``system_fingerprint``.
* ``learnerd_vllm_export_failures_total{server}``: failed calls to a vLLM server of ``[export.vllm] servers``
  (each retried with backoff; :mod:`learnerd.reconcilers.vllm_export`).

The ``document`` label is the document's path, as the training and evaluation keys are.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from learnerd import __version__
from learnerd.analyzer.ingest import STORE_ERRORS
from learnerd.eval.report import Report
from learnerd.eval.score import recall_counts
from learnerd.reconcilers.training import CycleReport
from learnerd.store.adapters import GateVerdict

#: Training cycles last seconds to hours.
CYCLE_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
#: A search is milliseconds; a loaded machine makes it seconds.
SEARCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


#: Controller → its keys in flight → their progress (:meth:`learnerd.daemon.app.Daemon.progress`).
ProgressSource = Callable[[], Mapping[str, Mapping[str, Mapping[str, Any]]]]


class ProgressCollector:
    """``learnerd_<controller>_progress``, ``…_steps_done`` and ``…_steps_planned`` by ``document``, read from
    ``source`` at each scrape, for each controller ``source`` names (those whose reconciler reports progress;
    a family without samples while nothing is in flight)."""

    def __init__(self, source: ProgressSource) -> None:
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for controller, keys in self._source().items():
            ratio = GaugeMetricFamily(
                f"learnerd_{controller}_progress",
                f"Steps done / planned of each {controller} in flight, in [0, 1].",
                labels=["document"],
            )
            done = GaugeMetricFamily(
                f"learnerd_{controller}_steps_done", f"Steps done by each {controller} in flight.", labels=["document"]
            )
            planned = GaugeMetricFamily(
                f"learnerd_{controller}_steps_planned",
                f"Steps planned for each {controller} in flight (once known).",
                labels=["document"],
            )
            for key, progress in keys.items():
                step, total = progress["step"], progress["total"]
                done.add_metric([key], step)
                if total is not None:
                    planned.add_metric([key], total)
                    ratio.add_metric([key], min(1.0, step / total) if total > 0 else 1.0)
            yield from (ratio, done, planned)


#: Document → version → outcome → count (:func:`learnerd.store.suggestions.counts`).
SuggestionCounts = Callable[[], Mapping[str, Mapping[str, Mapping[str, int]]]]


class SuggestionsCollector:
    """``learnerd_suggestions_total{document, version, outcome}``, read from ``source`` at each scrape; a
    store failure is logged and the family is left out of that scrape."""

    def __init__(self, source: SuggestionCounts, errors: tuple[type[BaseException], ...]) -> None:
        self._source, self._errors = source, errors

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "learnerd_suggestions",
            "Answers served (outcome=served) and their outcomes (accepted, edited, failed), per adapter version.",
            labels=["document", "version", "outcome"],
        )
        try:
            totals = self._source()
        except self._errors as exc:
            structlog.get_logger(__name__).warning("suggestion counts unreadable", error=str(exc))
            return
        for document, versions in totals.items():
            for version, outcomes in versions.items():
                for outcome, n in outcomes.items():
                    family.add_metric([document, version, outcome], n)
        yield family


class DaemonMetrics:
    """The families above, registered on ``registry`` (one per registry: a second raises ``ValueError``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        Gauge(
            "learnerd_build_info", "The running learnerd build (always 1).", ["version", "python"], registry=registry
        ).labels(__version__, platform.python_version()).set(1)
        self.training_cycles = Counter(
            "learnerd_training_cycles", "Training cycles by outcome.", ["outcome"], registry=registry
        )
        self.training_duration = Histogram(
            "learnerd_training_cycle_duration_seconds",
            "Wall seconds of each trained cycle.",
            buckets=CYCLE_BUCKETS,
            registry=registry,
        )
        self.training_loss = Gauge(
            "learnerd_training_loss_nats",
            "Final training loss (nats per token) of the document's last trained cycle.",
            ["document"],
            registry=registry,
        )
        self.adapter_version = Gauge(
            "learnerd_adapter_version",
            "The document's current adapter version (current at start-up, or promoted since).",
            ["document"],
            registry=registry,
        )
        self.promotions = Counter(
            "learnerd_promotions",
            "The promotion gate's decisions on candidate adapter versions, by outcome (promoted, rejected).",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("promoted", "rejected"):
            self.promotions.labels(outcome)
        self.evaluations = Counter("learnerd_evaluations", "Evaluation reports written.", registry=registry)
        self.evaluation_failures = Counter(
            "learnerd_evaluation_failures",
            "Failed evaluation attempts (retried, never a report), by document.",
            ["document"],
            registry=registry,
        )
        self.evaluation_duration = Histogram(
            "learnerd_evaluation_duration_seconds",
            "Wall seconds of each evaluation.",
            buckets=CYCLE_BUCKETS,
            registry=registry,
        )
        self.evaluation_score = Gauge(
            "learnerd_evaluation_score",
            "sway's overall score of the document's last evaluation, in [0, 1].",
            ["document"],
            registry=registry,
        )
        self.probe_pass_rate = Gauge(
            "learnerd_probe_pass_rate",
            "Passing / judged probe_recall probes of the document's last evaluation.",
            ["document"],
            registry=registry,
        )
        self.search_duration = Histogram(
            "learnerd_search_duration_seconds",
            "Seconds per search answered from the live index.",
            buckets=SEARCH_BUCKETS,
            registry=registry,
        )

        self.vllm_export_failures = Counter(
            "learnerd_vllm_export_failures",
            "Failed calls to a vLLM server of [export.vllm] servers (retried with backoff), by server URL.",
            ["server"],
            registry=registry,
        )

    def watch_progress(self, source: ProgressSource) -> None:
        """Export the progress ``source`` reports (:class:`ProgressCollector`); call it once."""
        self._registry.register(ProgressCollector(source))

    def watch_suggestions(self, source: SuggestionCounts) -> None:
        """Export the suggestion totals ``source`` reads (:class:`SuggestionsCollector`); call it once."""
        self._registry.register(SuggestionsCollector(source, STORE_ERRORS))

    def current_adapters(self, versions: Mapping[str, int]) -> None:
        """``learnerd_adapter_version`` of the versions current at start-up: document path → version number."""
        for document, number in versions.items():
            self.adapter_version.labels(document).set(number)

    def cycle(self, report: CycleReport) -> None:
        """The training reconciler's ``on_cycle`` hook."""
        outcome, result = report.outcome, report.outcome.result
        trained = outcome.version is not None and result is not None
        self.training_cycles.labels("committed" if trained else "nothing to train").inc()
        if trained and result is not None:
            document = str(report.path)
            self.training_duration.observe(report.duration_s)
            self.training_loss.labels(document).set(result.final_loss)

    def promoted(self, document: str, number: int) -> None:
        """``learnerd_adapter_version`` of a document whose version ``number`` was promoted."""
        self.adapter_version.labels(document).set(number)

    def gate_verdict(self, path: Path, verdict: GateVerdict) -> None:
        """The evaluation reconciler's ``on_verdict`` hook."""
        self.promotions.labels(verdict.outcome).inc()

    def evaluation_failed(self, path: Path) -> None:
        """The evaluation reconciler's ``on_failure`` hook."""
        self.evaluation_failures.labels(str(path)).inc()

    def vllm_export_failed(self, server: str) -> None:
        """The vLLM export reconciler's ``on_failure`` hook."""
        self.vllm_export_failures.labels(server).inc()

    def evaluated(self, path: Path, report: Report) -> None:
        """The evaluation reconciler's ``on_report`` hook."""
        document = str(path)
        self.evaluations.inc()
        self.evaluation_duration.observe(report.wall_seconds)
        self.evaluation_score.labels(document).set(report.score.overall)
        passed, judged = recall_counts(report.probes)
        if judged:
            self.probe_pass_rate.labels(document).set(passed / judged)
