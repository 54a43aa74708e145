"""What a scrape shows of the state: new series at zero once, and the per-job render cache.

Zero once: a counter or histogram that appears after the startup scan (``State.hold_new_series``)
is shown at zero in the first scrape that sees it and with its counts from the next one on:
``rate()`` and ``increase()`` cannot see an increase from nothing, so without the zero a result's
first run (and a job's first failure) would count nowhere. What was shown is remembered here; the
state is never changed by a scrape.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from ..state import HistKey, HistogramState, JobKey, JobState


class ZeroOnce:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters_shown: set[JobKey] = set()
        self._histograms_shown: set[tuple[JobKey, HistKey]] = set()

    def view(self, key: JobKey, state: JobState, hists: dict[HistKey, HistogramState] | None
             ) -> tuple[JobState, dict[HistKey, HistogramState] | None, bool]:
        """(state, histograms) as this scrape shows them, and whether anything was shown at zero.

        ``hists`` None: not copied for this scrape (the job did not change since its last render).
        """
        zeroed = False
        with self._lock:
            if state.counters_held and key not in self._counters_shown:
                self._counters_shown.add(key)
                state, zeroed = replace(state, runs=0, failures=0), True
            if hists:
                shown = {}
                for hkey, hist in hists.items():
                    if hist.held and (key, hkey) not in self._histograms_shown:
                        self._histograms_shown.add((key, hkey))
                        hist, zeroed = HistogramState(hist.bounds), True
                    shown[hkey] = hist
                hists = shown
        return state, hists, zeroed


class RenderCache:
    """The exposition text of each job, re-rendered only when the job changed or was last shown with a zero."""

    def __init__(self, render: Callable[[JobKey, JobState, dict[HistKey, HistogramState]], dict[str, str]]):
        self._render = render
        self._texts: dict[JobKey, tuple[int, bool, dict[str, str]]] = {}  # key -> (version, shown a zero, family -> text)
        self.series: dict[JobKey, int] = {}  # sample lines of each job's text, counted once per render of it (max_series)

    @property
    def shows_zero(self) -> bool:
        """Some job's text shows a series at zero once: the next render shows its counts, whatever changed."""
        return any(zeroed for _, zeroed, _ in self._texts.values())

    def reusable(self) -> dict[JobKey, int]:
        """Versions of the jobs whose text can be reused if unchanged (the ``unchanged`` of State.snapshot)."""
        return {key: version for key, (version, zeroed, _) in self._texts.items() if not zeroed}

    def texts(self, jobs: dict[JobKey, JobState], hists: dict[JobKey, dict[HistKey, HistogramState]],
              zero_once: ZeroOnce) -> dict[JobKey, dict[str, str]]:
        reusable = self.reusable()
        for key, state in jobs.items():
            if reusable.get(key) == state.version:
                continue
            shown, shown_hists, zeroed = zero_once.view(key, state, hists.get(key, {}))
            text = self._render(key, shown, shown_hists or {})
            self._texts[key] = (state.version, zeroed, text)
            self.series[key] = sum(part.count("\n") for part in text.values())
        for key in set(self._texts) - set(jobs):
            del self._texts[key]
            self.series.pop(key, None)
        return {key: self._texts[key][2] for key in jobs}
