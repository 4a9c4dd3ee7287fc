"""Which dataset and model a config names, assembled for training.

``build`` turns a config's ``dataset`` and ``model`` sections into a ``DataBundle`` and a model
through foldexp's registry (``config.targets``). The dataset builders that ``dataset._target_``
names: ``datasets`` (calculator, SST, SST sentences, marked sequences), ``tree_data`` with
``tree_files`` (PTB-format trees of one's own; SST is a preset), ``tree_inputs`` (lines of text
as trees, for ``foldexp predict``), ``text_data`` (a CSV of sentences), ``molecule_data`` (a CSV
of SMILES); ``data_stats`` backs ``foldexp data stats|import`` for files of one's own.

This package sits on ``foldexp.data`` and ``foldexp.models``; ``foldexp.train`` builds on it,
never the other way round.
"""
