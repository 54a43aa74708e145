"""fioscope's mixin: rules, alerts, dashboards and stack config generated from one config.

The lowest layer of the project: the exporter imports it (names, settings, units), it imports
nothing of the exporter.
"""

from pathlib import Path

# the repository this package sits in when installed editable (mixin/fioscope_mixin/): the generated files'
# home, compose.yaml, provisioning/. A built wheel has none (the generators then need --out).
CHECKOUT = Path(__file__).resolve().parents[2]
