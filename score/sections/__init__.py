"""score/sections: see docs/architecture.md."""
