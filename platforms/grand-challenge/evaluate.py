#!/usr/bin/env python3
"""grand-challenge evaluation entry point: /input (one submission store) -> /output/metrics.json.

The ground truth comes from $XBENCH_GT, the platform's /opt/ml/input/data/ground_truth, or the copy baked
into the image at /opt/xbench/gt.zarr.zip. $XBENCH_INPUT / $XBENCH_OUTPUT override /input and /output (the
tests use them). On failure the exit status is non-zero and the last line on stderr is the reason.
"""
import sys

from xbench.package import grand_challenge_main

if __name__ == "__main__":
    sys.exit(grand_challenge_main())
