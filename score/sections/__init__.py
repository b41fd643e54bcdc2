"""score/sections: see docs/explanation/architecture.md."""
