"""score/resampling: see docs/architecture.md."""
