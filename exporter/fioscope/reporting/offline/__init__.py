"""Offline diagnosis from ``iostat -x -t -o JSON`` files (+ optional fio result files).

Design: the verdicts must come from the project's own rules, not from a second heuristic
written in Python. So the iostat samples become what the rules read and Prometheus evaluates
them:

One module per step: ``load`` (iostat files, fio results), ``counters`` (the series backfilled), ``tsdb`` (OpenMetrics,
promtool, the temporary Prometheus), ``rules`` (recording and alert rules evaluated), ``pipeline`` (the pass, to one
``DiagnosisInput`` and the pure ``diagnosis.diagnose``).

1. Counters are built once. ``fioscope capture`` read the kernel's counters and hands them over (``kernel``; a report
   on a bundle reads them from its ``samples/diskstats.jsonl``): they are backfilled as counted, at the instants
   below. Only a plain iostat file, which has rates and no counters, has each interval turned back into the
   node_exporter counters it was computed from (``r/s`` x interval -> reads completed, ``r_await`` x ``r/s`` -> time
   reading, ``aqu-sz`` -> weighted time in flight, ``%util`` -> time busy, avg-cpu -> CPU seconds per mode: fioscope_mixin.columns), with
   ``job="node"``, ``instance="iostat:<nodename>"`` and ``host=<nodename>``; a rate is
   constant within an interval, so an interval longer than ``MAX_SAMPLE_GAP`` gets
   interpolated counter samples at each evaluation instant in it and half a rate window
   before (the rules' ``rate(...[1m])`` always see two). fio result files add
   ``fio_run_running`` (1 while the run lasted) and the fdatasync p99
   (``fio_run_latency_seconds``) the fsync alert reads.
   Hostile input is bounded while loading (``load_iostat``, ``check_bounds``): file size,
   devices, time span, stretches between gaps; a gap in time is left empty, never filled;
   a value that is not a rate leaves its device's sample out, counted per reason; a large
   capture has consecutive reports merged (the counters end exactly where they would have).
2. The series are written as OpenMetrics, as they are produced, and backfilled into a
   temporary TSDB with ``promtool tsdb create-blocks-from openmetrics`` (one block for the
   whole capture: promtool reads its input once per block); a temporary Prometheus
   (loopback, free port) serves it.
3. The recording rules of alerts/recording.rules.yaml are evaluated by that Prometheus as
   range queries of their ``expr`` on the evaluation grid (the stack's evaluation interval;
   a multiple of it for long captures, see ``evaluation_grid``) over the stretches that
   have data, and their output is backfilled the same way, one dependency level at a time (a rule that
   reads another rule's output needs that output in the TSDB first; Prometheus restarts in
   between to load the new blocks). ``promtool tsdb create-blocks-from rules`` would do the
   same but stamps samples off the grid, so rules of different levels would not line up.
4. Every alert of alerts/alerts.rules.yaml is evaluated as a range query of its own ``expr``
   at the evaluation interval; an alert *fired* where its condition held for its ``for:``
   duration — the pending/firing state machine of Prometheus' rule manager.
5. ``diagnosis.diagnose`` then judges what that Prometheus gives exactly as it judges a live one's.

Timestamps: ``S_TIME_FORMAT=ISO`` iostat output carries its UTC offset; the locale format
(``11/22/26 20:26:41``) does not and is read as UTC (the report says so).
"""
