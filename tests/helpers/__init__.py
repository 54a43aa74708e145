"""What the tests (and bench/) share; test modules import these, never each other or conftest.

paths       REPO, FIXTURES, FIO_OUTPUTS, and the environment that runs this checkout's code
net         free_port, http_get, wait_for
binaries    require (skip, or fail under CI, when a tool is missing), first_installed
cli         run (any command), fioscope (``python -m fioscope ...``), fioscope_command (its argv)
exposition  parse_exposition, sample (one series, identity labels required), promtool_check_metrics
results     settle (age hand-dropped result files), result_docs, config_with_schedule, config_with_targets
processes   Exporter (``fioscope serve``), NodeExporter
prometheus  Prometheus (the one way tests start it), PromClient (its HTTP API)
histogram   histogram_quantile (Prometheus' bucketQuantile in Python)
native_stack NativeStack (fioscope_mixin.native), write_stack_files (the generated configuration in a scratch root)
lab         require_root_lab, lab_lock, Webhook, e2e_overrides, lab_stack, E2E_SETTINGS, THROTTLE
fleet       fleet_overrides, run_hosts (python -m fioscope_mixin.hosts ARGS)
iostat      the iostat -x agreement of the recording rules (sample_agreement, agree, print_table)
report_page rendered (a report opened in headless Chromium), Verdicts
corpus      the hostile corpus of fio outputs
"""
