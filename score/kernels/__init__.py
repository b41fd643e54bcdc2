"""score/kernels: see docs/explanation/architecture.md."""
