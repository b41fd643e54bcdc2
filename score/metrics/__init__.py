"""score/metrics: see docs/explanation/architecture.md."""
