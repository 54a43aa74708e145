"""What only the tests share; test modules import these, never each other or conftest. What the tests share with
bench/ (paths, net, binaries, cli, prometheus, histogram, native_stack, dashboard_queries, corpus) is the installed
package fioscope_testkit (testkit/).

exposition  parse_exposition, sample (one series, identity labels required), promtool_check_metrics
results     settle (age hand-dropped result files), result_docs, config_with_schedule, config_with_targets
processes   Exporter (``fioscope serve``), NodeExporter
lab         require_root_lab, lab_lock, Webhook, e2e_overrides, lab_stack, E2E_SETTINGS, THROTTLE
fleet       fleet_overrides, run_hosts (python -m fioscope_mixin.hosts ARGS)
iostat      the iostat -x agreement of the recording rules (sample_agreement, agree, print_table)
report_page rendered (a report opened in headless Chromium), Verdicts
"""
