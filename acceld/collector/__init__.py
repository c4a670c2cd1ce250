"""The usage collector (`acceld metrics-collector`): the agents' usage notifications in,
the latest sample of each device out as Prometheus gauges (docs/metrics.md)."""
