"""Shipped benchmark suites (``xbench run``): ``demo.yaml`` (what ``xbench demo`` runs) and ``paper.yaml``."""
