"""Where a job of a result file ran: its target, device, declared limits and SLA (docs/contracts.md section 1).

The annotation fioscope wrote wins; else a configured target whose directory holds the job's
``directory``; else the directory (or ``filename``) itself is the target. Devices are looked up
once per scan (blockdev.device_for_path reads /proc and /sys).
"""

from __future__ import annotations

from .blockdev import device_for_path
from .config import Config, Limits
from .model import JobResult
from .resultfile import Annotation
from .state import Placement


class Resolver:
    def __init__(self, config: Config):
        self.config = config
        self._devices: dict[str, str] = {}  # directory -> device, for one scan

    def new_scan(self) -> None:
        self._devices.clear()  # a disk may have been mounted elsewhere since

    def device(self, directory: str) -> str:
        if directory not in self._devices:
            self._devices[directory] = device_for_path(directory) if directory.startswith("/") else ""
        return self._devices[directory]

    def place(self, ann: Annotation, job: JobResult) -> Placement:
        directory = job.options.get("directory", "")
        configured = self.config.target_for_directory(directory) if directory else None
        if ann.present and ann.target:
            target, device = ann.target, ann.device
            if not device:
                named = next((t for t in self.config.targets if t.name == target), None)
                device = self.device(str(named.directory)) if named else ""
        elif configured is not None:
            target, device = configured.name, self.device(str(configured.directory))
        else:
            target, device = directory or job.options.get("filename", ""), self.device(directory)
        if ann.limits is not None or ann.sla_latency_seconds:
            return Placement(target, device, ann.limits or Limits(), ann.sla_latency_seconds)
        if configured is not None and configured.name == target:
            return Placement(target, device, configured.limits, configured.sla_latency_seconds)
        return Placement(target, device)
