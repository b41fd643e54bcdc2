"""XBench: zero-shot recognition and grounding benchmark for chest X-ray VLMs."""
__version__ = "0.1.0"
