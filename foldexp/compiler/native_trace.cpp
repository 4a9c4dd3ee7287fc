// The tracing closures of ``foldexp/blocks/_closures.py`` for the common blocks, in C++ over
// CPython's API: one node per block, walked recursively over each input. ``native_trace.py``
// builds the nodes and owns every object they point to; what it says there holds here.
//
// A node does exactly what its Python closure does on the inputs it accepts, appending the same
// values to the same lists of the ``Trace``. Anything else is handed to a Python callable: a
// block kind without a node (PY), a payload the fast path does not take (a numpy scalar), and
// every failure of a key function or an index, so that the block raises its own error. Any
// other error ends the call with that exception set; the Python wrapper then rolls the input
// back and traces it again with the Python closures, which behave exactly as they always have.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <new>
#include <string>
#include <vector>

namespace {

enum Kind { PIPE = 0, GETITEM = 1, OP = 2, SCALAR = 3, ALLOF = 4, ONEOF = 5, IDENTITY = 6,
            PY = 7, REF = 8, RECORD = 9, MAP = 10, FOLD = 11 };

// Deeper inputs raise RecursionError here, as Python's closures do, and go to the explicit
// stack of ``run_steps``. Each level of a tree is a handful of nested nodes, each about 80 bytes
// of C stack: 2,000 stay far inside a thread's stack even where it is small (256 KB).
constexpr int kMaxNesting = 2000;

struct Node {
    int kind = PY;
    std::vector<int> kids;        // PIPE, ALLOF: children in order; REF: its target
    PyObject* key = nullptr;      // GETITEM: the key; ONEOF: the key function; RECORD: the keys
    Py_ssize_t int_key = 0;       // GETITEM: the key as an integer, if it is one
    bool has_int_key = false;
    bool key_is_len = false;      // ONEOF: the key function is ``len``
    std::vector<int> by_len;      // ONEOF keyed by ``len`` on small exact ints: length -> case
    PyObject* cases = nullptr;    // ONEOF: dict key -> node index (int)
    int pre = -1;                 // ONEOF: the pre block's node, or -1
    PyObject* py = nullptr;       // PY: the closure; GETITEM/SCALAR/ONEOF: what failures call
    // OP: the op's lists in the trace, its outputs, its input and output structure
    PyObject* depths = nullptr;
    PyObject* firsts = nullptr;
    PyObject* args = nullptr;
    Py_ssize_t n_out = 1;
    Py_ssize_t arity = 1;
    PyObject* in_spec = nullptr;  // None: the input is one value id; else nested tuples of None
    PyObject* out_spec = nullptr; // None: one value id; else nested tuples of None
    // SCALAR: the constant lists of its type
    PyObject* vids = nullptr;
    PyObject* payloads = nullptr;
    bool floating = false;
};

struct TracerObject {
    PyObject_HEAD
    std::vector<Node>* nodes;
    PyObject* values;  // the trace's ``val_depth``: value id -> depth
    PyObject* keep;    // the specification the nodes borrow from
    int root;
};

PyObject* g_zero = nullptr;

PyObject* eval(TracerObject* t, int index, PyObject* x, int nesting);

bool append_new(PyObject* list, PyObject* item) {  // appends and releases ``item``
    if (item == nullptr) return false;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc == 0;
}

// A short list kept on the stack: tracing allocates nothing of its own per node.
template <typename T, int N = 16>
struct SmallList {
    T fixed[N];
    std::vector<T> more;
    int n = 0;
    void push(T v) {
        if (n < N) fixed[n] = v;
        else more.push_back(v);
        ++n;
    }
    T operator[](int i) const { return i < N ? fixed[i] : more[i - N]; }
};

// Flattens the value ``x`` of structure ``spec`` into ``out``: borrowed references, owned by
// the tuples in ``owned`` (a list is copied into one first, so that Python code run further down
// -- another item's conversion -- cannot free what ``out`` points to). Only exact tuples and
// lists are walked; anything else (and a length that differs from the type's) is an error, and
// the Python closures then flatten the input as they do.
bool flatten(PyObject* x, PyObject* spec, SmallList<PyObject*>& out, SmallList<PyObject*>& owned) {
    if (spec == Py_None) {
        out.push(x);
        return true;
    }
    PyObject* seq;
    if (PyTuple_CheckExact(x)) {
        Py_INCREF(x);
        seq = x;
    } else if (PyList_CheckExact(x)) {
        seq = PyList_AsTuple(x);
        if (seq == nullptr) return false;
    } else {
        PyErr_SetString(PyExc_TypeError, "a traced value of tuple type is not a tuple or list");
        return false;
    }
    owned.push(seq);
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    if (n != PyTuple_GET_SIZE(spec)) {
        PyErr_SetString(PyExc_ValueError, "a traced value does not have its type's length");
        return false;
    }
    for (Py_ssize_t i = 0; i < n; ++i)
        if (!flatten(PyTuple_GET_ITEM(seq, i), PyTuple_GET_ITEM(spec, i), out, owned)) return false;
    return true;
}

// The nested tuples of ``spec`` holding consecutive value ids from ``*next``.
PyObject* build(PyObject* spec, Py_ssize_t* next) {
    if (spec == Py_None) return PyLong_FromSsize_t((*next)++);
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    PyObject* out = PyTuple_New(n);
    if (out == nullptr) return nullptr;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* item = build(PyTuple_GET_ITEM(spec, i), next);
        if (item == nullptr) {
            Py_DECREF(out);
            return nullptr;
        }
        PyTuple_SET_ITEM(out, i, item);
    }
    return out;
}

// ``Trace.applier``: depth one more than the deepest argument, the op's lists appended, one
// value per output.
PyObject* apply_op(TracerObject* t, const Node& node, PyObject* x) {
    SmallList<PyObject*> flat, owned;
    bool ok = flatten(x, node.in_spec, flat, owned);
    PyObject* result = nullptr;
    if (ok && (Py_ssize_t)flat.n != node.arity) {
        PyErr_SetString(PyExc_ValueError, "a traced value does not match the op's arity");
        ok = false;
    }
    Py_ssize_t depth = -1;
    Py_ssize_t n_values = PyList_GET_SIZE(t->values);
    for (int i = 0; ok && i < flat.n; ++i) {
        if (!PyLong_CheckExact(flat[i])) {
            PyErr_SetString(PyExc_TypeError, "a traced value id is not an int");
            ok = false;
            break;
        }
        Py_ssize_t vid = PyLong_AsSsize_t(flat[i]);
        if (vid < 0 || vid >= n_values) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "value id out of range");
            ok = false;
            break;
        }
        Py_ssize_t d = PyLong_AsSsize_t(PyList_GET_ITEM(t->values, vid));
        if (d == -1 && PyErr_Occurred()) {
            ok = false;
            break;
        }
        if (d > depth) depth = d;
    }
    if (ok && flat.n == 0) {
        PyErr_SetString(PyExc_ValueError, "an op without inputs");
        ok = false;
    }
    if (ok) {
        ++depth;
        PyObject* d = PyLong_FromSsize_t(depth);
        ok = d != nullptr && PyList_Append(node.depths, d) == 0 &&
             append_new(node.firsts, PyLong_FromSsize_t(n_values));
        for (int i = 0; ok && i < flat.n; ++i) ok = PyList_Append(node.args, flat[i]) == 0;
        for (Py_ssize_t k = 0; ok && k < node.n_out; ++k) ok = PyList_Append(t->values, d) == 0;
        Py_XDECREF(d);
        if (ok) {
            Py_ssize_t next = n_values;
            result = build(node.out_spec, &next);
        }
    }
    for (int i = 0; i < owned.n; ++i) Py_DECREF(owned[i]);
    return result;
}

PyObject* get_item(const Node& node, PyObject* x) {
    if (node.has_int_key && (PyTuple_CheckExact(x) || PyList_CheckExact(x))) {
        Py_ssize_t n = PyTuple_CheckExact(x) ? PyTuple_GET_SIZE(x) : PyList_GET_SIZE(x);
        Py_ssize_t i = node.int_key < 0 ? node.int_key + n : node.int_key;
        if (i >= 0 && i < n) {
            PyObject* item = PyTuple_CheckExact(x) ? PyTuple_GET_ITEM(x, i) : PyList_GET_ITEM(x, i);
            Py_INCREF(item);
            return item;
        }
        return PyObject_CallOneArg(node.py, x);  // out of range: the block's own error
    }
    PyObject* item = PyObject_GetItem(x, node.key);
    if (item == nullptr && (PyErr_ExceptionMatches(PyExc_IndexError) ||
                            PyErr_ExceptionMatches(PyExc_KeyError) ||
                            PyErr_ExceptionMatches(PyExc_TypeError))) {
        PyErr_Clear();
        return PyObject_CallOneArg(node.py, x);
    }
    return item;
}

PyObject* scalar(TracerObject* t, const Node& node, PyObject* x) {
    if (!(PyLong_CheckExact(x) || (node.floating && PyFloat_CheckExact(x))))
        return PyObject_CallOneArg(node.py, x);  // numpy scalars, bools, errors: the closure
    PyObject* vid = PyLong_FromSsize_t(PyList_GET_SIZE(t->values));
    if (vid == nullptr) return nullptr;
    if (PyList_Append(t->values, g_zero) != 0 || PyList_Append(node.vids, vid) != 0 ||
        PyList_Append(node.payloads, x) != 0) {
        Py_DECREF(vid);
        return nullptr;
    }
    return vid;
}

// The case chosen, on ``x`` after the pre block if there is one.
PyObject* run_case(TracerObject* t, const Node& node, int case_index, PyObject* x, int nesting) {
    if (node.pre < 0) return eval(t, case_index, x, nesting);
    PyObject* y = eval(t, node.pre, x, nesting);
    if (y == nullptr) return nullptr;
    PyObject* out = eval(t, case_index, y, nesting);
    Py_DECREF(y);
    return out;
}

// No case: a key function that failed (an error set) or a key no case has. The block's
// ``_trace`` raises its own error; a RecursionError (too deep) or a non-Exception goes up as is.
PyObject* no_case(const Node& node, PyObject* x) {
    if (PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_RecursionError) ||
            !PyErr_ExceptionMatches(PyExc_Exception))
            return nullptr;
        PyErr_Clear();
    }
    return PyObject_CallOneArg(node.py, x);
}

PyObject* one_of(TracerObject* t, const Node& node, PyObject* x, int nesting) {
    if (!node.by_len.empty()) {  // the dict's answer, without making the key
        Py_ssize_t n = PyObject_Length(x);
        int case_index = n >= 0 && n < (Py_ssize_t)node.by_len.size() ? node.by_len[n] : -1;
        return case_index >= 0 ? run_case(t, node, case_index, x, nesting) : no_case(node, x);
    }
    PyObject* key;
    if (node.key_is_len) {
        Py_ssize_t n = PyObject_Length(x);
        key = n < 0 ? nullptr : PyLong_FromSsize_t(n);
    } else {
        key = PyObject_CallOneArg(node.key, x);
    }
    PyObject* found = nullptr;
    if (key != nullptr) {
        found = PyDict_GetItemWithError(node.cases, key);  // borrowed
        Py_DECREF(key);
    }
    if (found == nullptr) return no_case(node, x);
    return run_case(t, node, (int)PyLong_AsLong(found), x, nesting);
}

// ``Record``: a tuple of each field's block on ``x[key]``. A missing field or a failing field
// ends the walk (the closures then raise the block's error, with the field's path).
PyObject* record(TracerObject* t, const Node& node, PyObject* x, int nesting) {
    Py_ssize_t n = (Py_ssize_t)node.kids.size();
    PyObject* out = PyTuple_New(n);
    if (out == nullptr) return nullptr;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* key = PyTuple_GET_ITEM(node.key, i);
        PyObject* item = nullptr;
        if (PyLong_CheckExact(key) && (PyTuple_CheckExact(x) || PyList_CheckExact(x))) {
            Py_ssize_t size = PyTuple_CheckExact(x) ? PyTuple_GET_SIZE(x) : PyList_GET_SIZE(x);
            Py_ssize_t at = PyLong_AsSsize_t(key);
            if (at < 0 && !PyErr_Occurred()) at += size;
            if (at >= 0 && at < size) {
                item = PyTuple_CheckExact(x) ? PyTuple_GET_ITEM(x, at) : PyList_GET_ITEM(x, at);
                Py_INCREF(item);
            } else if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_IndexError, "record field out of range");
            }
        } else {
            item = PyObject_GetItem(x, key);
        }
        PyObject* y = item == nullptr ? nullptr : eval(t, node.kids[i], item, nesting);
        Py_XDECREF(item);
        if (y == nullptr) {
            Py_DECREF(out);
            return nullptr;
        }
        PyTuple_SET_ITEM(out, i, y);
    }
    return out;
}

// A sequence's items, as ``as_list`` gives them: a list (its subclasses too) as it is, iterated
// as Python iterates it; anything else copied into a list first.
PyObject* sequence_iter(PyObject* x) {
    if (PyList_Check(x)) return PyObject_GetIter(x);
    PyObject* copy = PySequence_List(x);
    if (copy == nullptr) return nullptr;
    PyObject* it = PyObject_GetIter(copy);
    Py_DECREF(copy);
    return it;
}

// ``Map`` (not broadcast): the list of the element block on each item.
PyObject* map_items(TracerObject* t, const Node& node, PyObject* x, int nesting) {
    PyObject* it = sequence_iter(x);
    if (it == nullptr) return nullptr;
    PyObject* out = PyList_New(0);
    PyObject* item;
    while (out != nullptr && (item = PyIter_Next(it)) != nullptr) {
        PyObject* y = eval(t, node.kids[0], item, nesting);
        Py_DECREF(item);
        if (y == nullptr || !append_new(out, y)) Py_CLEAR(out);
    }
    Py_DECREF(it);
    if (out != nullptr && PyErr_Occurred()) Py_CLEAR(out);
    return out;
}

// ``Fold``: the start block on None, then the combine block on each (state, item).
PyObject* fold_items(TracerObject* t, const Node& node, PyObject* x, int nesting) {
    PyObject* it = sequence_iter(x);
    if (it == nullptr) return nullptr;
    PyObject* state = eval(t, node.kids[0], Py_None, nesting);
    PyObject* item;
    while (state != nullptr && (item = PyIter_Next(it)) != nullptr) {
        PyObject* pair = PyTuple_Pack(2, state, item);
        Py_DECREF(item);
        Py_DECREF(state);
        state = pair == nullptr ? nullptr : eval(t, node.kids[1], pair, nesting);
        Py_XDECREF(pair);
    }
    Py_DECREF(it);
    if (state != nullptr && PyErr_Occurred()) Py_CLEAR(state);
    return state;
}

PyObject* eval(TracerObject* t, int index, PyObject* x, int nesting) {
    if (++nesting > kMaxNesting) {
        PyErr_SetString(PyExc_RecursionError, "input too deep for foldexp's native tracing");
        return nullptr;
    }
    const Node& node = (*t->nodes)[index];
    switch (node.kind) {
        case PIPE: {
            Py_INCREF(x);
            for (int kid : node.kids) {
                PyObject* y = eval(t, kid, x, nesting);
                Py_DECREF(x);
                if (y == nullptr) return nullptr;
                x = y;
            }
            return x;
        }
        case GETITEM:
            return get_item(node, x);
        case OP:
            return apply_op(t, node, x);
        case SCALAR:
            return scalar(t, node, x);
        case ALLOF: {
            Py_ssize_t n = (Py_ssize_t)node.kids.size();
            PyObject* out = PyTuple_New(n);
            if (out == nullptr) return nullptr;
            for (Py_ssize_t i = 0; i < n; ++i) {
                PyObject* y = eval(t, node.kids[i], x, nesting);
                if (y == nullptr) {
                    Py_DECREF(out);
                    return nullptr;
                }
                PyTuple_SET_ITEM(out, i, y);
            }
            return out;
        }
        case ONEOF:
            return one_of(t, node, x, nesting);
        case IDENTITY:
            Py_INCREF(x);
            return x;
        case REF:
            return eval(t, node.kids[0], x, nesting);
        case RECORD:
            return record(t, node, x, nesting);
        case MAP:
            return map_items(t, node, x, nesting);
        case FOLD:
            return fold_items(t, node, x, nesting);
        default:
            return PyObject_CallOneArg(node.py, x);
    }
}

// ---- the Python type: Tracer(spec, values, root), called with one input ----------------------

PyObject* as_object(PyObject* item) { return item == Py_None ? nullptr : item; }

bool parse_node(PyObject* spec, Node& node) {
    // (kind, kids, key, cases, pre, py, depths, firsts, args, n_out, in_spec, out_spec,
    //  vids, payloads, floating)
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 15) {
        PyErr_SetString(PyExc_TypeError, "a node is a tuple of 15 fields");
        return false;
    }
    auto field = [&](int i) { return PyTuple_GET_ITEM(spec, i); };
    node.kind = (int)PyLong_AsLong(field(0));
    PyObject* kids = field(1);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kids); ++i)
        node.kids.push_back((int)PyLong_AsLong(PyTuple_GET_ITEM(kids, i)));
    node.key = field(2);
    if (node.kind == GETITEM && PyLong_CheckExact(node.key)) {
        node.int_key = PyLong_AsSsize_t(node.key);
        node.has_int_key = !PyErr_Occurred();
        PyErr_Clear();
    }
    node.key_is_len = node.kind == ONEOF && node.key == PyDict_GetItemString(PyEval_GetBuiltins(), "len");
    node.cases = as_object(field(3));
    if (node.key_is_len && node.cases != nullptr && PyDict_Check(node.cases)) {
        // Only when every key is an exact int below 64: then looking a length up in the dict
        // and in this table agree (a key True or 1.0 would equal 1 in the dict).
        std::vector<int> table(64, -1);
        bool small = true;
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (small && PyDict_Next(node.cases, &pos, &k, &v)) {
            long key = PyLong_CheckExact(k) ? PyLong_AsLong(k) : -1;
            small = key >= 0 && key < 64 && PyLong_CheckExact(v);
            if (small) table[key] = (int)PyLong_AsLong(v);
        }
        PyErr_Clear();
        if (small) node.by_len = table;
    }
    node.pre = (int)PyLong_AsLong(field(4));
    node.py = as_object(field(5));
    node.depths = as_object(field(6));
    node.firsts = as_object(field(7));
    node.args = as_object(field(8));
    node.n_out = PyLong_AsSsize_t(field(9));
    node.in_spec = field(10);
    node.out_spec = field(11);
    node.vids = as_object(field(12));
    node.payloads = as_object(field(13));
    node.floating = PyObject_IsTrue(field(14)) == 1;
    if (node.kind == OP) {  // the arity: the leaves of the input structure
        PyObject* probe = node.in_spec;
        std::vector<PyObject*> stack{probe};
        node.arity = 0;
        while (!stack.empty()) {
            PyObject* s = stack.back();
            stack.pop_back();
            if (s == Py_None) { ++node.arity; continue; }
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s); ++i) stack.push_back(PyTuple_GET_ITEM(s, i));
        }
    }
    return !PyErr_Occurred();
}

int tracer_init(TracerObject* self, PyObject* args, PyObject* kwargs) {
    PyObject *spec, *values;
    int root;
    if (!PyArg_ParseTuple(args, "O!O!i", &PyList_Type, &spec, &PyList_Type, &values, &root))
        return -1;
    auto* nodes = new std::vector<Node>(PyList_GET_SIZE(spec));
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(spec); ++i) {
        if (!parse_node(PyList_GET_ITEM(spec, i), (*nodes)[i])) {
            delete nodes;
            return -1;
        }
    }
    // Every index a walk follows must name a node: a wrong one would read past the list.
    int n = (int)nodes->size();
    auto in_range = [n](long i) { return i >= 0 && i < n; };
    bool ok = in_range(root);
    for (const Node& node : *nodes) {
        for (int kid : node.kids) ok = ok && in_range(kid);
        ok = ok && (node.kind != ONEOF || node.pre == -1 || in_range(node.pre));
        if (node.kind == ONEOF && node.cases != nullptr && PyDict_Check(node.cases)) {
            Py_ssize_t pos = 0;
            PyObject *k, *v;
            while (ok && PyDict_Next(node.cases, &pos, &k, &v))
                ok = PyLong_CheckExact(v) && in_range(PyLong_AsLong(v));
        } else if (node.kind == ONEOF) {
            ok = false;
        }
        ok = ok && (node.kind != REF || node.kids.size() == 1);
        ok = ok && (node.kind != RECORD ||
                    (PyTuple_Check(node.key) && PyTuple_GET_SIZE(node.key) == (Py_ssize_t)node.kids.size()));
        ok = ok && (node.kind != MAP || node.kids.size() == 1);
        ok = ok && (node.kind != FOLD || node.kids.size() == 2);
        ok = ok && (node.kind != OP || (node.depths && node.firsts && node.args));
        ok = ok && (node.kind != SCALAR || (node.vids && node.payloads && node.py));
        bool calls_python = node.kind == PY || node.kind == GETITEM || node.kind == ONEOF;
        ok = ok && (!calls_python || node.py != nullptr);
    }
    if (!ok) {
        delete nodes;
        PyErr_SetString(PyExc_ValueError, "an inconsistent node list");
        return -1;
    }
    delete self->nodes;
    self->nodes = nodes;
    spec = PyList_AsTuple(spec);  // the nodes borrow from it: a copy nobody can change
    if (spec == nullptr) return -1;
    Py_INCREF(values);
    Py_XSETREF(self->keep, spec);
    Py_XSETREF(self->values, values);
    self->root = root;
    return 0;
}

// The nodes hold key functions and closures, which may hold the model that holds this tracer
// (a OneOf keyed by a bound method): the collector must see those references to free a cycle.
int tracer_traverse(TracerObject* self, visitproc visit, void* arg) {
    Py_VISIT(self->keep);
    Py_VISIT(self->values);
    return 0;
}

int tracer_clear(TracerObject* self) {
    delete self->nodes;  // they borrow from ``keep``
    self->nodes = nullptr;
    Py_CLEAR(self->keep);
    Py_CLEAR(self->values);
    return 0;
}

PyObject* tracer_call(TracerObject* self, PyObject* args, PyObject* kwargs) {
    PyObject* x;
    if (self->nodes == nullptr || !PyArg_ParseTuple(args, "O", &x)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "tracer not initialised");
        return nullptr;
    }
    return eval(self, self->root, x, 0);
}

void tracer_dealloc(TracerObject* self) {
    PyObject_GC_UnTrack(self);
    tracer_clear(self);
    Py_TYPE(self)->tp_free((PyObject*)self);
}

PyTypeObject TracerType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// fill_int64(values, out): the Python ints of the list ``values`` into ``out``, a writable
// contiguous buffer of as many int64. The scheduler's ``np.asarray`` on a trace's lists
// guesses a dtype item by item first; here every item must be an exact int (else TypeError,
// and the caller asks numpy).
PyObject* fill_int64(PyObject* self, PyObject* args) {
    PyObject *values, *out;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &values, &out)) return nullptr;
    Py_buffer view;
    if (PyObject_GetBuffer(out, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) return nullptr;
    Py_ssize_t n = PyList_GET_SIZE(values);
    bool ok = view.len == n * (Py_ssize_t)sizeof(long long);
    if (!ok) PyErr_SetString(PyExc_ValueError, "the buffer does not hold as many int64");
    auto* dst = static_cast<long long*>(view.buf);
    for (Py_ssize_t i = 0; ok && i < n; ++i) {
        PyObject* item = PyList_GET_ITEM(values, i);
        if (!PyLong_CheckExact(item)) {
            PyErr_SetString(PyExc_TypeError, "not an int");
            ok = false;
            break;
        }
        dst[i] = PyLong_AsLongLong(item);
        if (dst[i] == -1 && PyErr_Occurred()) ok = false;
    }
    PyBuffer_Release(&view);
    if (!ok) return nullptr;
    Py_RETURN_NONE;
}

struct Buffer {  // a contiguous buffer of int64, released when it goes
    Py_buffer view{};
    bool held = false;
    bool get(PyObject* o, bool writable) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(o, &view, flags) != 0) return false;
        held = true;
        if (view.itemsize != 8 || view.format == nullptr ||
            (std::string(view.format) != "q" && std::string(view.format) != "l")) {
            PyErr_SetString(PyExc_TypeError, "expected an int64 buffer");
            return false;
        }
        return true;
    }
    long long* data() const { return static_cast<long long*>(view.buf); }
    Py_ssize_t size() const { return view.len / 8; }
    ~Buffer() {
        if (held) PyBuffer_Release(&view);
    }
};

inline unsigned long long mix(unsigned long long h) {  // splitmix64's finaliser
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

bool overlap(const Buffer& a, const Buffer& b) {
    auto* a0 = static_cast<const char*>(a.view.buf);
    auto* b0 = static_cast<const char*>(b.view.buf);
    return a0 < b0 + b.view.len && b0 < a0 + a.view.len;
}

// distinct_rows(rows, k, slot, keep, counts, seed) -> m: the distinct rows of the (n, k) int64
// array ``rows``, by hashing in one pass. Row i's distinct row is slot[i]; the m distinct rows
// first occur at keep[0..m) (ascending), counts[0..m) times. ``merge.distinct_rows`` without
// sorting. The result does not depend on ``seed``: a seed the inputs cannot know keeps ids
// crafted to collide from making the probing quadratic.
PyObject* distinct_rows(PyObject* self, PyObject* args) {
    PyObject *rows_o, *slot_o, *keep_o, *counts_o;
    Py_ssize_t k;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OnOOOK", &rows_o, &k, &slot_o, &keep_o, &counts_o, &seed))
        return nullptr;
    Buffer rows, slot, keep, counts;
    if (!rows.get(rows_o, false) || !slot.get(slot_o, true) || !keep.get(keep_o, true) ||
        !counts.get(counts_o, true))
        return nullptr;
    Py_ssize_t n = k > 0 ? rows.size() / k : 0;
    if (k <= 0 || rows.size() != n * k || slot.size() != n || keep.size() != n ||
        counts.size() != n) {
        PyErr_SetString(PyExc_ValueError, "distinct_rows: buffers of the wrong size");
        return nullptr;
    }
    const Buffer* all[] = {&rows, &slot, &keep, &counts};
    for (int a = 0; a < 4; ++a)
        for (int b = a + 1; b < 4; ++b)
            if (n > 0 && overlap(*all[a], *all[b])) {
                PyErr_SetString(PyExc_ValueError, "distinct_rows: buffers overlap");
                return nullptr;
            }
    Py_ssize_t m = 0;
    bool no_memory = false;
    Py_BEGIN_ALLOW_THREADS
    try {
    size_t capacity = 16;
    while (capacity < (size_t)(2 * n)) capacity <<= 1;
    std::vector<long long> table(capacity, -1);  // distinct row number, or -1
    const long long* r = rows.data();
    long long *sl = slot.data(), *kp = keep.data(), *ct = counts.data();
    for (Py_ssize_t i = 0; i < n; ++i) {
        const long long* row = r + i * k;
        unsigned long long h = seed;
        for (Py_ssize_t j = 0; j < k; ++j) h = mix(h ^ (unsigned long long)row[j]);
        size_t at = h & (capacity - 1);
        while (table[at] >= 0) {
            const long long* other = r + kp[table[at]] * k;
            bool same = true;
            for (Py_ssize_t j = 0; same && j < k; ++j) same = other[j] == row[j];
            if (same) break;
            at = (at + 1) & (capacity - 1);
        }
        if (table[at] < 0) {
            table[at] = m;
            kp[m] = i;
            ct[m] = 0;
            ++m;
        }
        sl[i] = table[at];
        ++ct[table[at]];
    }
    } catch (const std::bad_alloc&) {
        no_memory = true;
    }
    Py_END_ALLOW_THREADS
    if (no_memory) return PyErr_NoMemory();
    return PyLong_FromSsize_t(m);
}

PyMethodDef module_methods[] = {
    {"fill_int64", fill_int64, METH_VARARGS, "the ints of a list into an int64 buffer"},
    {"distinct_rows", distinct_rows, METH_VARARGS, "the distinct rows of an int64 array"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "foldexp_native_trace",
                          "foldexp's tracing closures in C++ (see native_trace.py)", -1,
                          module_methods};

}  // namespace

extern "C" PyMODINIT_FUNC PyInit_foldexp_native_trace(void) {
    TracerType.tp_name = "foldexp_native_trace.Tracer";
    TracerType.tp_basicsize = sizeof(TracerObject);
    TracerType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
    TracerType.tp_traverse = (traverseproc)tracer_traverse;
    TracerType.tp_clear = (inquiry)tracer_clear;
    TracerType.tp_free = PyObject_GC_Del;
    TracerType.tp_new = PyType_GenericNew;
    TracerType.tp_init = (initproc)tracer_init;
    TracerType.tp_call = (ternaryfunc)tracer_call;
    TracerType.tp_dealloc = (destructor)tracer_dealloc;
    if (PyType_Ready(&TracerType) < 0) return nullptr;
    g_zero = PyLong_FromLong(0);
    PyObject* m = PyModule_Create(&module_def);
    if (m == nullptr) return nullptr;
    Py_INCREF(&TracerType);
    if (PyModule_AddObject(m, "Tracer", (PyObject*)&TracerType) < 0) return nullptr;
    PyModule_AddIntConstant(m, "ABI", 5);
    return m;
}
