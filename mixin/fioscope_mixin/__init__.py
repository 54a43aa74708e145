"""fioscope's mixin: rules, alerts, dashboards and stack config generated from one config.

The lowest layer of the project: the exporter imports it (names, settings, units), it imports
nothing of the exporter.
"""
