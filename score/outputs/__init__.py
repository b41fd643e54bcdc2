"""score/outputs: see docs/explanation/architecture.md."""
