"""Hydra config groups shipped with the package (found as ``pkg://foldexp.conf``)."""
