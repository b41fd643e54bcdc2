"""Human ceilings: a radiologist (or a simulated reader) scored like a model, and a model's "% of human".

``xbench human`` (``xbench.human``, the umbrella: it reads the readers' annotations with
``xbench.extract.human`` and scores each reader with the ordinary scorer) leaves one ``pair_counts.npz`` and one
``reading.npz`` per reader in its output folder, listed by ``human.json``. This package is the scoring side of
those files, one module per concern:

* :mod:`.ceiling`: the arithmetic, with no file, store or map in sight: each reader's pairs
  (:func:`~.ceiling.reader_pairs`, :func:`~.ceiling.with_hits`), :func:`~.ceiling.ceiling` (per class the mean
  over readers of each reader's class value, per dataset the mean over classes; 95 % percentile bootstrap
  intervals over cases, the best threshold re-chosen in each resample), CheXlocalize's own eval.py values
  (:func:`~.ceiling.chexlocalize_block`), % of human and the percentage decrease;
* :mod:`.reading`: the files: ``human.json``, ``reading.npz`` (:func:`~.reading.save_reading`,
  :func:`~.reading.load_reading`) and a whole human folder read as untrusted input (:func:`~.reading.load_human`);
* :mod:`.section`: the ``human`` section of a model's metrics.json (metrics minor 6): beside each grounding value
  the ceiling, its interval, % of human, the percentage decrease and the paired gap model - human;
* :mod:`.tables`: its rows, ``table_human.csv`` / ``.md`` and the terminal's "human ceiling" lines;
* ``xbench compare RESULTS HUMAN_DIR`` is the report's (:mod:`xbench.score.report.human_compare`: it reads result
  folders, a layer above the sections);
* :mod:`.page`: the report page's section.

The rule is written out in docs/contract.md ("Human ceilings") and docs/how-to/human.md.
"""
