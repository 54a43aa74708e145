"""fioscope: run fio, publish every result as Prometheus metrics."""

__version__ = "0.1.0"
