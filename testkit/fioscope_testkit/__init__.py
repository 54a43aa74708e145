"""What the tests and bench/ share (issue 54 item 6): a package both import by name, installed as the exporter and the
mixin are (scripts/setup.sh), so no bench script edits its path. What only the tests share stays in tests/helpers.

paths       REPO, FIXTURES, FIO_OUTPUTS, and the environment that runs this checkout's code
net         free_port, http_get, wait_for
binaries    require (skip, or fail under CI, when a tool is missing), first_installed
cli         run (any command), fioscope (``python -m fioscope ...``), fioscope_command (its argv)
prometheus  Prometheus (the one way tests start it), PromClient (its HTTP API)
histogram   histogram_quantile (Prometheus' bucketQuantile in Python)
native_stack NativeStack (fioscope_mixin.native), write_stack_files (the generated configuration in a scratch root)
dashboard_queries the generated dashboards' panel queries as Grafana asks them
corpus      the hostile corpus of fio outputs
"""
