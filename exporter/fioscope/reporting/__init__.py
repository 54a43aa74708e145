"""``fioscope report``: diagnosis, performance and comparison reports people read without Grafana.

Every report is one self-contained ``report.html`` (charts embedded as ``data:`` URIs, no
scripts, fonts or stylesheets from the network) plus the same charts as PNG files beside it,
optionally ``report.pdf``. Charts are drawn by matplotlib (Agg backend), pages by Jinja2.
"""


class ReportError(Exception):
    """Bad input for a report: one line naming the flag or file and the problem."""
