"""Post-hoc uses of run folders: what a trained run (or a sweep of them) says after training.

``report`` (``foldexp report``: one table over a sweep's ``results.json``), ``ensemble``
(``foldexp ensemble``: a sweep's runs as one model), ``predict`` (``foldexp predict``: a run's
model on new inputs) and ``evaluate_run`` (``foldexp eval``: a run's model scored on a split).
Each reads run folders through ``foldexp.train.runs``; a folder may come from anyone, so every
``_target_`` it names must be in foldexp's registry.
"""
