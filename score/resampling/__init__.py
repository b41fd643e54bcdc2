"""score/resampling: see docs/explanation/architecture.md."""
