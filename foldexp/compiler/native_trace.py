"""Native tracing: the closures of ``blocks/_closures.py`` for the common blocks, in C++; and
two of the scheduler's steps there too (a trace's lists as int64 arrays, merging by hashing).

Tracing costs about a microsecond of Python per node (the peers' 256 trees: 30 ms of a 147 ms
training step). ``native_trace.cpp`` walks the same blocks over the same inputs in C++ and
appends the same values to the same lists of the ``Trace``; the scheduler and everything after
it cannot tell the two apart. It has a node for pipes, ``GetItem``, op blocks, ``Scalar``,
``AllOf``, ``OneOf``, ``Identity``, ``Record``, ``Map`` and ``Fold`` (``Map`` over a broadcast
sequence aside) and recursion (``ForwardDeclaration``); every other block (``InputTransform``,
metrics, a user's own block) is a call of its Python closure from there, and so runs as fast as
it always has.

Errors and odd inputs stay Python's. A node hands a failing index, key function or payload to
the block's own code, which raises the block's error. Any other error ends the input's native
walk: ``native_trace_fn``'s wrapper rolls the input back and traces it again with the Python
closures, which then behave exactly as without this module (a ``RecursionError`` there sends
it on to ``run_steps``, as before). A key function or ``InputTransform`` of an input traced
again is called again.

The library is built on first use like foldexp's kernels (``kernels/native.py``: cached by
source, flags, compiler, CPU, and here the Python headers) and follows their switch,
``device.fused_cells``: off, tracing is Python's. Without a compiler or Python's headers, the
Python closures serve.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import os
import sys
import sysconfig
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from foldexp.blocks import AllOf, Fold, GetItem, Identity, Map, OneOf, Record
from foldexp.blocks.internal import (
    Block,
    ForwardRef,
    Memo,
    OpBlock,
    Pipe,
    Scalar,
    closure_class,
    fused_blocks,
    trace_fn,
)
from foldexp.kernels.native import build_and_open, native_code_allowed
from foldexp.types import TensorType, TupleType, Type

if TYPE_CHECKING:
    from foldexp.compiler.trace import Trace

__all__ = [
    "distinct_int64_rows",
    "exact_int64",
    "int64_array",
    "native_trace_fn",
    "native_tracing_available",
]

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("native_trace.cpp")
_MODULE = "foldexp_native_trace"  # the name of its PyInit function
_ABI = 5
_SEED = int.from_bytes(os.urandom(8), "little")  # the hashing's (see distinct_rows)
PIPE, GETITEM, OP, SCALAR, ALLOF, ONEOF, IDENTITY, PY, REF, RECORD, MAP, FOLD = range(12)

_lock = threading.Lock()
_module: ModuleType | None = None
_tried = False


def _open(path: Path) -> ModuleType:
    # The loader named: a checked library's name (``/proc/self/fd/N``) has no ``.so`` to go by.
    loader = importlib.machinery.ExtensionFileLoader(_MODULE, str(path))
    spec = importlib.util.spec_from_file_location(_MODULE, path, loader=loader)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if getattr(module, "ABI", None) != _ABI:
        raise RuntimeError(f"{path} has another ABI than {_ABI}")
    return module


def _load() -> ModuleType | None:
    global _module, _tried
    if _tried:
        return _module
    with _lock:
        if not _tried:
            include = sysconfig.get_paths()["include"]
            flags = ("-O2", "-std=c++17", "-fPIC", "-shared", f"-I{include}")
            if sys.platform == "darwin":  # Python's symbols come from the process
                flags += ("-undefined", "dynamic_lookup")
            try:
                if not Path(include, "Python.h").exists():
                    raise RuntimeError(f"no Python.h in {include}")
                _module = build_and_open(_MODULE, [SOURCE], flags, _open, sys.version)
            except Exception as err:  # noqa: BLE001  (any failure: the Python closures serve)
                log.info("native tracing unavailable, tracing in Python: %s", err)
            _tried = True
    return _module


def _after_fork_in_child() -> None:
    global _lock  # a fork taken mid-build leaves the child a lock nobody will release
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def native_tracing_available() -> bool:
    """Native tracing is on (``device.fused_cells`` not false) and its library loads."""
    return native_code_allowed() and _load() is not None


def exact_int64(values: Any) -> np.ndarray | None:
    """A long list of exact Python ints in int64's range as an int64 array (what ``np.asarray``
    makes of it, 6x faster: 100k ids in 0.3 ms instead of 1.8); ``None`` for anything else,
    or where native code is off or not loaded."""
    module = _module
    if module is None or type(values) is not list or len(values) < 16:  # (as fast below)
        return None
    if not native_code_allowed():
        return None
    out = np.empty(len(values), dtype=np.int64)
    try:
        module.fill_int64(values, out)
    except (TypeError, OverflowError):
        return None  # not all exact ints in range: numpy's own conversion decides
    return out


def int64_array(values: Any) -> np.ndarray:
    """``np.asarray(values, dtype=np.int64)``, natively for a trace's long lists of ids."""
    out = exact_int64(values)
    return out if out is not None else np.asarray(values, dtype=np.int64)


def distinct_int64_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``merge.distinct_rows`` of an ``(n, k)`` int64 array by hashing, in one pass instead of
    sorting (the peers' batch: 2.7 ms of a 8.5 ms schedule; a group of 3-63 rows 3 µs instead of
    24); ``None`` where native code is off or not loaded, or for another array."""
    module = _module
    if (
        module is None
        or not isinstance(rows, np.ndarray)
        or rows.dtype != np.int64
        or rows.ndim != 2
        or rows.shape[1] == 0
        or not native_code_allowed()
    ):
        return None
    rows = np.require(rows, np.int64, ["C_CONTIGUOUS", "ALIGNED"])
    n = len(rows)
    slot, keep, counts = (np.empty(n, dtype=np.int64) for _ in range(3))
    m = module.distinct_rows(rows, rows.shape[1], slot, keep, counts, _SEED)
    return keep[:m].copy(), slot, counts[slot] > 1


def _spec(t: Type | None) -> Any:
    """A tensor → ``None``; a tuple type → the tuple of its items' specs; else ``False``."""
    if isinstance(t, TensorType):
        return None
    if isinstance(t, TupleType):
        items = [_spec(i) for i in t.items]
        return False if any(i is False for i in items) else tuple(items)
    return False


class _Graph:
    """The node list ``native_trace.cpp`` reads, built from a block tree for one ``Trace``."""

    def __init__(self, tr: Trace, fuse: bool) -> None:
        self.tr, self.memo = tr, Memo(fuse)
        self.nodes: list[tuple] = []
        self.decls: dict[int, int] = {}  # id(declaration) → its REF node

    def add(self, kind: int, kids: tuple = (), key: Any = None, cases: Any = None,
            pre: int = -1, py: Any = None, lists: tuple = (None, None, None), n_out: int = 1,
            in_spec: Any = None, out_spec: Any = None, constants: tuple = (None, None),
            floating: bool = False) -> int:  # fmt: skip
        self.nodes.append((kind, kids, key, cases, pre, py, *lists, n_out, in_spec, out_spec,
                           *constants, floating))  # fmt: skip
        return len(self.nodes) - 1

    def python(self, block: Block) -> int:
        return self.add(PY, py=trace_fn(block, self.tr, self.memo))

    def node(self, block: Block) -> int:
        cls = closure_class(block)
        make = _NODES.get(cls)  # type: ignore[arg-type]
        return make(self, block) if make is not None else self.python(block)

    def pipe(self, b: Pipe) -> int:
        blocks = fused_blocks(b) if self.memo.fuse else b.blocks
        kids = tuple(self.node(c) for c in blocks)
        return kids[0] if len(kids) == 1 else self.add(PIPE, kids)

    def get_item(self, b: GetItem) -> int:
        return self.add(GETITEM, key=b.key, py=trace_fn(b, self.tr, self.memo))

    def op_block(self, b: OpBlock) -> int:
        in_spec, out_spec = _spec(b.input_type), _spec(b.output_type)
        if in_spec is False or out_spec is False or b.op not in self.tr.op_index:
            return self.python(b)
        i = self.tr.op_index[b.op]
        lists = (self.tr.op_depth[i], self.tr.op_first[i], self.tr.op_args[i])
        return self.add(OP, lists=lists, n_out=b.op.n_out, in_spec=in_spec, out_spec=out_spec)

    def scalar(self, b: Scalar) -> int:
        tid = self.tr.type_id(b.output_type)
        constants = (self.tr.const_vids[tid], self.tr.const_payloads[tid])
        py = trace_fn(b, self.tr, self.memo)
        return self.add(SCALAR, py=py, constants=constants, floating=b._floating)

    def all_of(self, b: AllOf) -> int:
        return self.add(ALLOF, tuple(self.node(c) for c in b.blocks))

    def one_of(self, b: OneOf) -> int:
        tr, trace = self.tr, b._trace
        cases = {k: self.node(c) for k, c in b.cases.items()}  # before ``pre``, as the closures
        pre = self.node(b.pre_block) if b.pre_block is not None else -1  # (types' order)
        return self.add(ONEOF, key=b.key_fn, cases=cases, pre=pre, py=lambda x: trace(tr, x))

    def identity(self, b: Identity) -> int:
        return self.add(IDENTITY)

    def record(self, b: Record) -> int:
        keys = tuple(k for k, _ in b.fields)
        return self.add(RECORD, tuple(self.node(c) for _, c in b.fields), key=keys)

    def map(self, b: Map) -> int:
        if b._broadcast:  # one call, its result repeated: the closure's
            return self.python(b)
        return self.add(MAP, (self.node(b.elem_block),))

    def fold(self, b: Fold) -> int:
        return self.add(FOLD, (self.node(b.start_block), self.node(b.combine_block)))

    def forward_ref(self, b: ForwardRef) -> int:
        ref = self.decls.get(id(b.decl))
        if ref is None:  # the declaration's node first, so that recursion inside finds it
            ref = self.decls[id(b.decl)] = self.add(REF, (-1,))
            body = self.node(b.decl.block)
            self.nodes[ref] = (REF, (body,), *self.nodes[ref][2:])
        return ref


_NODES = {
    Pipe: _Graph.pipe,
    GetItem: _Graph.get_item,
    OpBlock: _Graph.op_block,
    Scalar: _Graph.scalar,
    AllOf: _Graph.all_of,
    OneOf: _Graph.one_of,
    Identity: _Graph.identity,
    ForwardRef: _Graph.forward_ref,
    Record: _Graph.record,
    Map: _Graph.map,
    Fold: _Graph.fold,
}


def native_trace_fn(block: Block, tr: Trace, *, fuse: bool = False) -> Any:
    """``trace_fn(block, tr, fuse=fuse)``, walked in C++ where native tracing is available.

    Values, order and errors are the Python closures': an input the native walk cannot finish is
    rolled back and traced again by them (see the module docstring).
    """
    module = _load() if native_code_allowed() else None
    if module is None:
        return trace_fn(block, tr, fuse=fuse)
    graph = _Graph(tr, fuse)
    root = graph.node(block)
    return _NativeRun(module.Tracer(graph.nodes, tr.val_depth, root), block, tr, fuse)


class _NativeRun:
    """One input through the native walk; an input it cannot finish is rolled back and traced
    again by the Python closures (built on first need), which raise the block's error."""

    def __init__(self, native: Any, block: Block, tr: Trace, fuse: bool) -> None:
        self.native, self.block, self.tr, self.fuse = native, block, tr, fuse
        self.closures: Any = None
        self.fallbacks = 0  # inputs the Python closures traced again

    def __call__(self, x: Any) -> Any:
        start = len(self.tr.val_depth)
        try:
            return self.native(x)
        except Exception:  # noqa: BLE001  (anything the walk could not finish: Python's turn)
            pass  # outside the handler, the block's own error carries no native context
        self.tr.rollback(start)
        self.fallbacks += 1
        if self.closures is None:
            self.closures = trace_fn(self.block, self.tr, fuse=self.fuse)
        return self.closures(x)
