"""A report as JUnit XML, the way sway 0.1.0 writes it (``suite/report.py`` ``to_junit``), for CI dashboards.

One ``<testsuite name="sway">`` with ``tests`` / ``failures`` / ``errors`` / ``skipped`` counts and
``time`` (the report's wall seconds, 3 decimals); ``<properties>`` with ``overall`` and ``band`` and one
``component.<category>`` per score component (4 decimals); one ``<testcase classname=KIND name=NAME
time=SECONDS>`` per probe, holding ``<failure message=…>``, ``<error message=…>`` or ``<skipped
message=…>`` by verdict (a pass or a warn holds nothing). Written with :mod:`xml.etree.ElementTree`, as sway
does, so attribute values are escaped.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from learnerd.eval.report import Report, Verdict
from learnerd.store.atomic import atomic_write_text

_CHILD = {
    Verdict.FAIL: ("failure", "failed"),
    Verdict.ERROR: ("error", "errored"),
    Verdict.SKIP: ("skipped", "skipped"),
}


def to_junit(report: Report) -> str:
    """The JUnit XML text of ``report`` (no XML declaration, as sway's)."""
    probes = report.probes
    suite = ET.Element(
        "testsuite",
        {
            "name": "sway",
            "tests": str(len(probes)),
            "failures": str(sum(p.verdict == Verdict.FAIL for p in probes)),
            "errors": str(sum(p.verdict == Verdict.ERROR for p in probes)),
            "skipped": str(sum(p.verdict == Verdict.SKIP for p in probes)),
            "time": f"{report.wall_seconds:.3f}",
        },
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", {"name": "overall", "value": f"{report.score.overall:.4f}"})
    ET.SubElement(props, "property", {"name": "band", "value": report.score.band})
    for category, value in report.score.components.items():
        ET.SubElement(props, "property", {"name": f"component.{category}", "value": f"{value:.4f}"})
    for p in probes:
        case = ET.SubElement(suite, "testcase", {"classname": p.kind, "name": p.name, "time": f"{p.duration_s:.3f}"})
        if p.verdict in _CHILD:
            tag, default = _CHILD[p.verdict]
            ET.SubElement(case, tag, {"message": p.message or default})
    return ET.tostring(suite, encoding="unicode")


def write_junit(path: str | Path, report: Report) -> None:
    """Write :func:`to_junit` to ``path`` atomically.

    Raises:
        OSError: ``path`` cannot be written.
    """
    atomic_write_text(path, to_junit(report))
