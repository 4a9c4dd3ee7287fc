"""Compiler: trace a batch of inputs into one operation graph, then schedule it by depth.

See ``README.md`` in this folder for the contract with the executor.
"""

from foldexp.compiler.schedule import Gather, Group, Plan, schedule
from foldexp.compiler.trace import Trace, trace_batch

__all__ = ["Trace", "trace_batch", "Plan", "Group", "Gather", "schedule"]
