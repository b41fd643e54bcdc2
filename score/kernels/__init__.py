"""score/kernels: see docs/architecture.md."""
