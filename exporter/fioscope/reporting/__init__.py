"""``fioscope report``: diagnosis, performance and comparison reports people read without Grafana.

Every report is one self-contained ``report.html`` (charts embedded as ``data:`` URIs, no
scripts, fonts or stylesheets from the network) plus the same charts as PNG files beside it,
optionally ``report.pdf``. Charts are drawn by matplotlib (Agg backend), pages by Jinja2.
"""

from fioscope_mixin.units import UnitError, parse_duration


class ReportError(Exception):
    """Bad input for a report: one line naming the flag or file and the problem."""


def duration_flag(value: str, flag: str) -> float:
    """A duration flag (``--last 1d``, ``--latency-target 5ms``) by the one duration parser; ReportError naming the flag."""
    try:
        return parse_duration(value)
    except UnitError as exc:
        raise ReportError(f"{flag}: {exc}") from None
