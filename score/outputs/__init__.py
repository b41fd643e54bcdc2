"""score/outputs: see docs/architecture.md."""
