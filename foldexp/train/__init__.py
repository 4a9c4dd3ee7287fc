"""Training only: ``run_train(cfg)`` and what a run needs on the way.

``app`` (the Hydra command, a thin shell) → ``loop`` (``run_train``: set up, fit, test) →
``fit`` (epochs and steps) with ``evaluate``, ``loaders``, ``sampler``, ``optim``, ``ema``;
``checkpoint`` (saving and resuming) with ``resume_config`` (what a resume may change);
``distributed`` (DDP inside the loop) and ``launch`` (getting the ranks); the run folder:
``rundir`` (claiming it), ``artifacts`` (atomic, checksummed files), ``runs`` (``run_info.json``
and trained runs read back), ``loggers``, ``preflight``. Which dataset and model a config names
is ``foldexp.experiments``; what is done with finished runs is ``foldexp.analysis``.
"""
