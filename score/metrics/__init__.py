"""score/metrics: see docs/architecture.md."""
