"""Every recorded-rule name, alert name and dashboard uid: the one place they are spelled.

The rule modules define their rules under these names; the dashboards, the reports' offline
diagnosis and the rule-test scenarios import them. tests/test_rules.py checks that the generated
rule files hold exactly these names, so a rule added or renamed without this module fails there.
"""

from __future__ import annotations

# ---- the rule files, relative to the repository (and to a native stack's generated config root)
RULE_FILES = ("alerts/recording.rules.yaml", "alerts/alerts.rules.yaml")

# ---- recorded series: iostat -x columns per device (docs/metrics.md)
DISK_READ_IOPS = "fioscope:disk_read_iops"
DISK_WRITE_IOPS = "fioscope:disk_write_iops"
DISK_DISCARD_IOPS = "fioscope:disk_discard_iops"
DISK_FLUSH_IOPS = "fioscope:disk_flush_iops"
DISK_READ_BYTES_PER_SECOND = "fioscope:disk_read_bytes_per_second"
DISK_WRITE_BYTES_PER_SECOND = "fioscope:disk_write_bytes_per_second"
DISK_DISCARD_BYTES_PER_SECOND = "fioscope:disk_discard_bytes_per_second"
DISK_READ_MERGES_PER_SECOND = "fioscope:disk_read_merges_per_second"
DISK_WRITE_MERGES_PER_SECOND = "fioscope:disk_write_merges_per_second"
DISK_READ_MERGES_RATIO = "fioscope:disk_read_merges_ratio"
DISK_WRITE_MERGES_RATIO = "fioscope:disk_write_merges_ratio"
DISK_READ_TIME_SECONDS_RATE = "fioscope:disk_read_time_seconds:rate"
DISK_WRITE_TIME_SECONDS_RATE = "fioscope:disk_write_time_seconds:rate"
DISK_DISCARD_TIME_SECONDS_RATE = "fioscope:disk_discard_time_seconds:rate"
DISK_READ_AWAIT_SECONDS = "fioscope:disk_read_await_seconds"
DISK_WRITE_AWAIT_SECONDS = "fioscope:disk_write_await_seconds"
DISK_DISCARD_AWAIT_SECONDS = "fioscope:disk_discard_await_seconds"
DISK_FLUSH_AWAIT_SECONDS = "fioscope:disk_flush_await_seconds"
DISK_READ_REQUEST_SIZE_BYTES = "fioscope:disk_read_request_size_bytes"
DISK_WRITE_REQUEST_SIZE_BYTES = "fioscope:disk_write_request_size_bytes"
DISK_QUEUE_SIZE = "fioscope:disk_queue_size"
DISK_UTIL_RATIO = "fioscope:disk_util_ratio"
CPU_MODE_SECONDS_RATE = "fioscope:cpu_mode_seconds:rate"
CPU_SECONDS_RATE = "fioscope:cpu_seconds:rate"  # over every mode and CPU: the host's CPU count, as the ratios' divisor
CPU_USER_RATIO = "fioscope:cpu_user_ratio"
CPU_NICE_RATIO = "fioscope:cpu_nice_ratio"
CPU_SYSTEM_RATIO = "fioscope:cpu_system_ratio"
CPU_IOWAIT_RATIO = "fioscope:cpu_iowait_ratio"
CPU_STEAL_RATIO = "fioscope:cpu_steal_ratio"
CPU_IDLE_RATIO = "fioscope:cpu_idle_ratio"

# ---- recorded series the alerts build on
DISK_IOPS = "fioscope:disk_iops"
DISK_BYTES_PER_SECOND = "fioscope:disk_bytes_per_second"
DISK_AWAIT_SECONDS = "fioscope:disk_await_seconds"
DISK_READ_IOPS_IRATE = "fioscope:disk_read_iops:irate"
DISK_WRITE_IOPS_IRATE = "fioscope:disk_write_iops:irate"
DISK_IOPS_IRATE = "fioscope:disk_iops:irate"
DISK_READ_BYTES_PER_SECOND_IRATE = "fioscope:disk_read_bytes_per_second:irate"
DISK_WRITE_BYTES_PER_SECOND_IRATE = "fioscope:disk_write_bytes_per_second:irate"
DISK_BYTES_PER_SECOND_IRATE = "fioscope:disk_bytes_per_second:irate"
DISK_UTIL_RATIO_IRATE = "fioscope:disk_util_ratio:irate"
# the per-scrape rates while the device is busy (util per scrape at least half the saturated bound; absent otherwise):
# the envelope's windows read these, so a fleet's idle and lightly loaded devices cost its envelope rules nothing
DISK_BUSY_READ_IOPS_IRATE = "fioscope:disk_busy_read_iops:irate"
DISK_BUSY_WRITE_IOPS_IRATE = "fioscope:disk_busy_write_iops:irate"
DISK_BUSY_IOPS_IRATE = "fioscope:disk_busy_iops:irate"
DISK_BUSY_READ_BYTES_PER_SECOND_IRATE = "fioscope:disk_busy_read_bytes_per_second:irate"
DISK_BUSY_WRITE_BYTES_PER_SECOND_IRATE = "fioscope:disk_busy_write_bytes_per_second:irate"
DISK_BUSY_BYTES_PER_SECOND_IRATE = "fioscope:disk_busy_bytes_per_second:irate"
DISK_BUSY_UTIL_RATIO_IRATE = "fioscope:disk_busy_util_ratio:irate"  # util per scrape, in the busy scrapes (the gate)
DISK_AWAIT_UNSATURATED_SECONDS = "fioscope:disk_await_unsaturated_seconds"
DISK_AWAIT_BASELINE_SECONDS = "fioscope:disk_await_baseline_seconds"
# each direction's own normal: the reads' await is judged against the reads' normal (a write-back of large requests
# sets a normal that 4 KiB reads never had)
DISK_READ_AWAIT_UNSATURATED_SECONDS = "fioscope:disk_read_await_unsaturated_seconds"
DISK_WRITE_AWAIT_UNSATURATED_SECONDS = "fioscope:disk_write_await_unsaturated_seconds"
DISK_READ_AWAIT_BASELINE_SECONDS = "fioscope:disk_read_await_baseline_seconds"
DISK_WRITE_AWAIT_BASELINE_SECONDS = "fioscope:disk_write_await_baseline_seconds"
DISK_FIO_LOAD = "fioscope:disk_fio_load"
# a running fio job's write rate where it fell off a cliff (FioscopeWriteThroughputCliff, the write-back cliff's alerts)
FIO_WRITE_CLIFF_BYTES_PER_SECOND = "fioscope:fio_write_cliff_bytes_per_second"
# aqu-sz, and each direction's await, while the device is saturated (absent otherwise): what the slow awaits read
DISK_SATURATED_QUEUE_SIZE = "fioscope:disk_saturated_queue_size"
DISK_SATURATED_AWAIT_SECONDS = "fioscope:disk_saturated_await_seconds"
DISK_SLOW_SATURATED_AWAIT_SECONDS = "fioscope:disk_slow_saturated_await_seconds"
DISK_CEILING = "fioscope:disk_ceiling"
DISK_CEILING_BELOW = "fioscope:disk_ceiling_below"
# how many ceilings a device has in a window's evaluation (absent: none): a ceiling held over evaluations is counted
# per device, not per dimension (a dual cap names reads in one phase, read throughput in the next)
DISK_CEILING_COUNT = "fioscope:disk_ceiling:count"
DISK_STEP_DOWN_RATIO = "fioscope:disk_step_down_ratio"
# each step-down rate's maximum over the last two minutes, recorded once a minute: the step-down's and the stall's
# 15-minute peaks and the write-back cliff's 10-minute one read these (15 samples a device, not 60 scrapes': those
# peaks were 45 % of the rules' samples at 2,000 hosts)
DISK_READ_IOPS_MAX2M = "fioscope:disk_read_iops:max2m"
DISK_WRITE_IOPS_MAX2M = "fioscope:disk_write_iops:max2m"
DISK_IOPS_MAX2M = "fioscope:disk_iops:max2m"
DISK_READ_BYTES_PER_SECOND_MAX2M = "fioscope:disk_read_bytes_per_second:max2m"
DISK_WRITE_BYTES_PER_SECOND_MAX2M = "fioscope:disk_write_bytes_per_second:max2m"
DISK_BYTES_PER_SECOND_MAX2M = "fioscope:disk_bytes_per_second:max2m"
# aqu-sz where the queue is long and costly (await far above normal, no more IOPS): FioscopeDiskQueueExploding's value
DISK_COSTLY_QUEUE_SIZE = "fioscope:disk_costly_queue_size"
# requests in flight on average while the device is stalled (absent otherwise): FioscopeDiskStalled's value
DISK_STALLED_IN_FLIGHT = "fioscope:disk_stalled_in_flight"
# the envelope: each window's IOPS and bytes/s peaks and each scrape's place against them (docs/runbook.md)
DISK_ENVELOPE_IOPS_RATIO = "fioscope:disk_envelope_iops_ratio"
DISK_ENVELOPE_BYTES_RATIO = "fioscope:disk_envelope_bytes_ratio"
DISK_ENVELOPE_RATIO = "fioscope:disk_envelope_ratio"
DISK_AT_ENVELOPE_AWAIT_SECONDS = "fioscope:disk_at_envelope_await_seconds"
# the scrapes in an envelope window (label window) where it holds enough of them and util is saturated in nearly all
DISK_SATURATED_WINDOW_SCRAPES = "fioscope:disk_saturated_window_scrapes"
# the window's mean rate (label rate="iops" or "bytes") where a direction holds its envelope with that rate flat: the
# ceilings read it (each computed the flatness again: 28 range functions per direction and window)
DISK_HELD_FLAT_MEAN = "fioscope:disk_held_flat_mean"
# each direction's per-scrape IOPS and bytes/s peak (label rate) over peak_lookback, busy scrapes or not, recorded for a
# device busy within the envelope's window (a ceiling needs that): a ceiling is at it
# each direction's lowest per-scrape IOPS and bytes/s over throttle.short_burst and two scrapes (label rate), for a
# device not idle: the level it held; the recent peak is its highest
DISK_HELD_LEVEL = "fioscope:disk_held_level"
DISK_RECENT_PEAK = "fioscope:disk_recent_peak"
# each direction's spread of its busy per-scrape IOPS over peak_lookback (label ddir): the upper over the lower
# throttle.held_quantile (the whole range while the lookback holds few scrapes): a cap holds it within its jitter
# each direction's per-scrape IOPS in the scrapes where util per scrape reached throttle.util_min_ratio (label ddir):
# what the held test's spread reads (a pause's or a ramp's partly busy scrape is no sample of a cap)
DISK_SATURATED_IOPS_IRATE = "fioscope:disk_saturated_iops:irate"
# each direction's median of its saturated per-scrape IOPS and bytes/s over peak_lookback (label rate), and the time of
# its first saturated scrape within held_tolerance over that median: the held test's samples start there (a token
# bucket's burst at a load's start, above it, is no sample of the cap)
DISK_SATURATED_MEDIAN = "fioscope:disk_saturated_median"
DISK_HELD_BAND_START = "fioscope:disk_held_band_start_timestamp_seconds"
# ... and the scrapes from there (label stat): samples, max, min, upper and lower (the held quantiles), and before (how
# many came before it): what the spread reads
DISK_HELD_BAND = "fioscope:disk_held_band"
DISK_IOPS_SPREAD_RATIO = "fioscope:disk_iops_spread_ratio"
# ... the same of the bytes/s: an IOPS ceiling whose bytes/s held while the request size moved (a bandwidth cap's
# first window inside one phase of small requests) is held at its level
DISK_SATURATED_BYTES_PER_SECOND_IRATE = "fioscope:disk_saturated_bytes_per_second:irate"
DISK_BYTES_SPREAD_RATIO = "fioscope:disk_bytes_spread_ratio"
DISK_REQUEST_SIZE_BYTES_IRATE = "fioscope:disk_request_size_bytes:irate"
DISK_PHYSICAL_DEVICE = "fioscope:disk_physical_device"  # local hardware (sysfs model/vendor, or the per-device override)
DISK_DECLARED_LIMIT_RATIO = "fioscope:disk_declared_limit_ratio"  # only with thresholds.disk_limits
FIO_FSYNC_LATENCY_SECONDS_P99 = "fioscope:fio_fsync_latency_seconds:p99"

# ---- alerts (docs/runbook.md has a section per alert)
ALERT_FSYNC_TOO_SLOW_FOR_ETCD = "FioscopeFsyncTooSlowForEtcd"
ALERT_FSYNC_NEAR_ETCD_LIMIT = "FioscopeFsyncNearEtcdLimit"
ALERT_FSYNC_HISTOGRAM_TOO_SLOW_FOR_ETCD = "FioscopeFsyncHistogramTooSlowForEtcd"
ALERT_ETCD_WAL_FSYNC_SLOW = "FioscopeEtcdWalFsyncSlow"
ALERT_ETCD_BACKEND_COMMIT_SLOW = "FioscopeEtcdBackendCommitSlow"
ALERT_DISK_THROTTLED_UNDER_FIO_LOAD = "FioscopeDiskThrottledUnderFioLoad"
ALERT_DISK_THROTTLED = "FioscopeDiskThrottled"
ALERT_DISK_THROTTLED_AFTER_BURST = "FioscopeDiskThrottledAfterBurst"
ALERT_DISK_AT_PHYSICAL_MAXIMUM = "FioscopeDiskAtPhysicalMaximum"  # info: a local device at its own maximum
ALERT_DISK_SATURATED = "FioscopeDiskSaturated"
ALERT_DISK_LATENCY_ABOVE_SLA = "FioscopeDiskLatencyAboveSla"
ALERT_DISK_QUEUE_EXPLODING = "FioscopeDiskQueueExploding"
ALERT_DISK_STALLED = "FioscopeDiskStalled"  # critical: requests in flight, (almost) none completing
ALERT_DISK_AT_PROVISIONED_LIMIT = "FioscopeDiskAtProvisionedLimit"  # only with thresholds.disk_limits
ALERT_HIGH_IOWAIT_IDLE_CPU = "FioscopeHighIowaitIdleCpu"
ALERT_WRITE_THROUGHPUT_CLIFF = "FioscopeWriteThroughputCliff"
ALERT_FIO_AT_PROMISED_IOPS = "FioscopeFioAtPromisedIops"
ALERT_FIO_RUN_FAILED = "FioscopeFioRunFailed"
ALERT_FIO_RESULTS_STALE = "FioscopeFioResultsStale"
ALERT_EXPORTER_DOWN = "FioscopeExporterDown"
ALERT_RESULT_SCAN_STALLED = "FioscopeResultScanStalled"
ALERT_SCHEDULER_STOPPED = "FioscopeSchedulerStopped"
ALERT_WEB_CONFIG_RELOAD_FAILED = "FioscopeWebConfigReloadFailed"
ALERT_NODE_EXPORTER_DOWN = "FioscopeNodeExporterDown"
ALERT_RULE_EVALUATION_SLOW = "FioscopeRuleEvaluationSlow"  # the Prometheus evaluating these rules falling behind

# the alerts that say "this disk is throttled" (the dashboards' verdict, the offline diagnosis)
THROTTLING_ALERTS = (ALERT_DISK_THROTTLED_UNDER_FIO_LOAD, ALERT_DISK_THROTTLED, ALERT_DISK_THROTTLED_AFTER_BURST)
FSYNC_ALERTS = (ALERT_FSYNC_TOO_SLOW_FOR_ETCD, ALERT_FSYNC_HISTOGRAM_TOO_SLOW_FOR_ETCD, ALERT_ETCD_WAL_FSYNC_SLOW)
SLA_ALERTS = (ALERT_DISK_LATENCY_ABOVE_SLA,)
IOWAIT_ALERTS = (ALERT_HIGH_IOWAIT_IDLE_CPU,)

# ---- dashboards: uid by the key an alert's `dashboard` names
DASHBOARD_DISK = "fioscope-disk"
DASHBOARD_FIO = "fioscope-fio"
DASHBOARD_CURVE = "fioscope-curve"
DASHBOARD_UIDS = {"disk": DASHBOARD_DISK, "fio": DASHBOARD_FIO, "curve": DASHBOARD_CURVE}

# ---- why a disk is slow: one cause per slow episode (fioscope_mixin.cause;
# docs/runbook.md#why-is-this-disk-slow-the-cause-of-a-slow-episode)
DISK_SLOW_AWAIT_RATIO = "fioscope:disk_slow_await_ratio"  # await / the device's normal, where well above it
DISK_SLOW_CAUSE = "fioscope:disk_slow_cause"  # 1, label cause: exactly one per slow device
DISK_NORMAL_IOPS = "fioscope:disk_normal_iops"  # the load asked while the device ran at its normal latency
DISK_NORMAL_BYTES_PER_SECOND = "fioscope:disk_normal_bytes_per_second"
# their means over the demand lookback (1h), recorded once a minute
DISK_NORMAL_IOPS_MEAN = "fioscope:disk_normal_iops:mean"
DISK_NORMAL_BYTES_PER_SECOND_MEAN = "fioscope:disk_normal_bytes_per_second:mean"
# 1, label cause: where the test a cause runs over every device holds, before the slow episode and the precedence
DISK_CAUSE_CONDITION = "fioscope:disk_cause_condition"
DISK_STALL_IN_FLIGHT = "fioscope:disk_stall_in_flight"  # requests in flight on a stalled device
DISK_CAUSE_CEILING = "fioscope:disk_cause_ceiling"  # 1 where the device is at a ceiling held as the causes judge it
DISK_NEAR_STALL = "fioscope:disk_near_stall"  # 1 while a stall starts, or within its window after one: no other cause
CPU_PRESSURE_RATIO = "fioscope:cpu_pressure_ratio"  # PSI cpu "some"
IO_PRESSURE_RATIO = "fioscope:io_pressure_ratio"  # PSI io "some"
FIO_CLAT_P50_SECONDS = "fioscope:fio_clat_p50_seconds"  # the running fio jobs' median completion latency per device
ALERT_DISK_CAUSE_STALL = "FioscopeDiskCauseStall"
ALERT_DISK_CAUSE_WRITEBACK_CLIFF = "FioscopeDiskCauseWritebackCliff"
ALERT_DISK_CAUSE_PROVIDER_CAP = "FioscopeDiskCauseProviderCap"
ALERT_DISK_CAUSE_DEVICE_MAX = "FioscopeDiskCauseDeviceMaximum"
ALERT_DISK_CAUSE_NOISY_NEIGHBOUR = "FioscopeDiskCauseNoisyNeighbour"
ALERT_DISK_CAUSE_WAIT_ABOVE_DISK = "FioscopeDiskCauseWaitAboveDisk"
# ---- the machine's own disk limit across its volumes, and the provider's counters (fioscope_mixin.instance_limit)
# a host's busy provider volumes' summed per-scrape rate (label rate="iops" or "bytes"), where it has min_volumes of them
HOST_VOLUMES_RATE_IRATE = "fioscope:host_volumes_rate:irate"
DISK_VOLUME_RATE_IRATE = "fioscope:disk_volume_rate:irate"  # each busy provider volume's per-scrape rate (label rate)
HOST_VOLUMES_HELD_SUM = "fioscope:host_volumes_held_sum"  # its mean over the window, where the sum held (label rate)
# the most and least (label bound="max"|"min") the host's sum and each volume's rate were over each window the sum held
# (label rate): the moves are measured over held scrapes alone (a load's first scrape, part of an interval, would count
# as the sum moving for all of share_window)
HOST_VOLUMES_HELD_RATE_BOUND = "fioscope:host_volumes_held_rate_bound"
DISK_VOLUME_HELD_RATE_BOUND = "fioscope:disk_volume_held_rate_bound"
# how far a volume's own rate moved over share_window, a share of its host's held sum (label rate): the split moving
DISK_VOLUME_SHARE_RANGE_RATIO = "fioscope:disk_volume_share_range_ratio"
# 1 while the provider's time-over-limit counter grows (label limit="volume" or "instance"), 0 while not; absent: no counters
DISK_PROVIDER_OVER_LIMIT = "fioscope:disk_provider_over_limit"
ALERT_INSTANCE_DISK_LIMIT = "FioscopeInstanceDiskLimit"  # one per host
CAUSE_ALERTS = (ALERT_DISK_CAUSE_STALL, ALERT_DISK_CAUSE_WRITEBACK_CLIFF, ALERT_DISK_CAUSE_PROVIDER_CAP,
                ALERT_DISK_CAUSE_DEVICE_MAX, ALERT_DISK_CAUSE_NOISY_NEIGHBOUR, ALERT_DISK_CAUSE_WAIT_ABOVE_DISK)

# ---- one notification per episode (Alertmanager's inhibit_rules: fioscope_mixin.stack; docs/runbook.md "One notification
# per episode"): on one device, the alert that names the episode silences the alerts that only describe it, and the
# informational naming of its own cause (each says "Informational: ... pages")
EPISODE_PAGES = (ALERT_DISK_STALLED, *THROTTLING_ALERTS, ALERT_DISK_AT_PHYSICAL_MAXIMUM, ALERT_DISK_CAUSE_WRITEBACK_CLIFF,
                 ALERT_DISK_CAUSE_NOISY_NEIGHBOUR, ALERT_DISK_CAUSE_WAIT_ABOVE_DISK, ALERT_WRITE_THROUGHPUT_CLIFF)
# what the device shows in any slow episode: busy, slow against the SLA, a long queue, at a declared limit
EPISODE_SYMPTOMS = (ALERT_DISK_SATURATED, ALERT_DISK_LATENCY_ABOVE_SLA, ALERT_DISK_QUEUE_EXPLODING, ALERT_DISK_AT_PROVISIONED_LIMIT)
# the cap under fio's load is fio's page: the any-workload pages of the same cap stay silent while it fires
FIO_EPISODE_PAGE, FIO_EPISODE_FOLLOWERS = ALERT_DISK_THROTTLED_UNDER_FIO_LOAD, (ALERT_DISK_THROTTLED, ALERT_DISK_THROTTLED_AFTER_BURST)

# every name above, for the check against the generated files (derived, so never a second list to keep)
RECORDS = tuple(v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, str) and v.startswith("fioscope:"))
ALERTS = tuple(v for k, v in dict(globals()).items() if k.startswith("ALERT_") and isinstance(v, str))
# the provisioned Grafana datasource every dashboard reads (provisioning/grafana/datasources/prometheus.yaml; the fleet's
# generated one in provisioning/grafana-fleet/ has the same uid at Thanos Query)
DATASOURCE_UID = "fioscope-prometheus"
