// The `tracked_float` NumPy dtype: a float64 value plus a handle to the set of input cells it
// was computed from (see dslog/annotations.hpp), and the `dslog_dagster._annotator` module.
//
// Registration follows the legacy user-dtype route (PyArray_RegisterDataType + ArrFuncs), the
// only one in NumPy 2.x that can set every ArrFunc (copyswap, compare, dotfunc, ...). Binary
// arithmetic is added as NumPy-2 ArrayMethods (PyUFunc_AddLoopFromSpec) because their
// get_loop hook runs once per ufunc call, which is what makes in-place accumulation safe.
//
// The scalar type derives from np.floating and the descriptor's kind is 'f' (with float64's
// np.finfo): NumPy's inexact-only code paths (the nan-functions' _replace_nan, median's and
// quantile's NaN checks, unique's NaN collapse, nan_to_num, gradient) then run on it exactly
// as on float64. (ml_dtypes keeps its scalars under np.generic with kind 'V' because their
// values are not float64; ours are, bit for bit.)
//
// Values: every loop produces exactly what NumPy computes on float64. Sign-bit and IEEE basic
// operations are computed inline; everything else (sin, power, hypot, matmul, ...) is handed
// to NumPy's own float64 inner loop on gathered values, so SIMD/SVML results match bit for bit.
//
// Lineage is never dropped silently: there is no cast to a numeric dtype (only to bool, which
// is control like a comparison), float()/int() of a
// tracked scalar raise LineageLostError, and handles from a finished capture raise
// StaleLineageError; annotation bytes that no capture produced (`.view(tracked_float)` of other
// data, `np.frombuffer`) raise ForgedLineageError wherever a handle is dereferenced (see
// "Handles are read from array memory" in annotations.hpp). The descriptor has NPY_NEEDS_PYAPI
// so every loop runs with the GIL held, in the thread that called it, and errors set in loops
// propagate. Captures are per thread (see "Capture state" below).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#define NPY_TARGET_VERSION NPY_2_0_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL dslog_annotator_ARRAY_API
#define PY_UFUNC_UNIQUE_SYMBOL dslog_annotator_UFUNC_API
#include <numpy/arrayobject.h>
#include <numpy/arrayscalars.h>
#include <numpy/dtype_api.h>
#include <numpy/ufuncobject.h>

#include <mutex>
#include <unordered_map>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "dslog/annotations.hpp"
#include "dslog/extract.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#define DSLOG_STREAM 1
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DSLOG_AVX2 1
#endif

namespace py = pybind11;
using dslog::Arena;
using dslog::Handle;
namespace hnd = dslog::hnd;

namespace {

struct TF {
  double v;
  uint64_t h;
};
static_assert(sizeof(TF) == 16, "tracked_float element must be 16 bytes");

struct TFScalar {
  PyObject_HEAD TF tf;
};

// ---------------------------------------------------------------------------------------------
// Capture state. A user dtype is registered once per process; a capture belongs to a thread.
//
// Each thread runs at most one capture, in its own arena (t_arena). NumPy runs the loops of a
// NPY_NEEDS_PYAPI dtype in the calling thread with the GIL held, so a loop always works on the
// arena of the thread that called it, and no thread can reach, let alone free, another
// thread's arena: begin/end act on the calling thread's capture only, and end() frees a
// capture only when handed its epoch. Epochs are issued process-wide, once each (g_last_epoch,
// advanced under the GIL; never wrapped, see hnd::kMaxEpoch), so a tracked value carried from
// one thread's capture into another's never matches that arena: it is refused as stale, like
// a value kept from a finished capture, and never read.
// ---------------------------------------------------------------------------------------------
thread_local Arena* t_arena = nullptr;  // a raw pointer: no TLS wrapper call in the loops
// Frees a capture left running when its thread exits (capture() always ends its own, so this
// only guards against leaks); touched in begin_capture so the destructor is registered.
struct ArenaOwner {
  bool armed = false;
  ~ArenaOwner() {
    delete t_arena;
    t_arena = nullptr;
  }
};
thread_local ArenaOwner t_arena_owner;
uint32_t g_last_epoch = 0;  // the last epoch issued in this process (0: none yet)
int g_typenum = -1;
PyArray_Descr* g_descr = nullptr;
PyArray_DTypeMeta* g_dtmeta = nullptr;
PyTypeObject* g_scalar_type = nullptr;
PyObject* g_lost_error = nullptr;   // dslog_dagster.errors.LineageLostError
PyObject* g_stale_error = nullptr;  // dslog_dagster.errors.StaleLineageError
PyObject* g_forged_error = nullptr;  // dslog_dagster.errors.ForgedLineageError
PyObject* g_capture_error = nullptr;  // dslog_dagster.errors.CaptureError
PyArray_ArrFuncs g_arrfuncs;

inline TF load(const char* p) {
  TF t;
  std::memcpy(&t, p, sizeof t);
  return t;
}
inline void store(char* p, double v, Handle h) {
  TF t{v, h};
  std::memcpy(p, &t, sizeof t);
}
inline double load_v(const char* p) {
  double v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Exact validation of a handle read from array memory (Arena::check), at every site that
// hands one to the arena outside the vector fast paths (which check their own way).
inline bool handle_ok(Handle h) { return h == 0 || (t_arena && t_arena->check(h)); }

void set_forged_error() {
  PyErr_SetString(g_forged_error,
                  "A tracked_float array holds annotation bytes that the running capture did "
                  "not produce: it was made from raw memory (`.view(tracked_float)` of another "
                  "array, `np.frombuffer`, `np.ndarray(..., buffer=...)`, a structured view), so "
                  "its lineage is meaningless. Build tracked arrays only with `capture(...)` (or "
                  "`annotate`) and NumPy operations on them, never from raw bytes.");
}

void set_stale_error();

// Why handle h is not valid: from another capture (an epoch issued in this process, not the
// running one: a finished capture, or one running in another thread), or forged (anything
// else: an epoch never issued, an unknown kind, a payload outside its table).
void set_handle_error(Handle h) {
  const uint32_t ep = hnd::epoch(h);
  const bool issued_before = ep != 0 && ep <= g_last_epoch && (!t_arena || ep != t_arena->epoch());
  if (issued_before) return set_stale_error();
  set_forged_error();
}

void set_stale_error() {
  PyErr_SetString(g_stale_error,
                  "A tracked_float value from another capture was used: one that has finished, "
                  "or one running in another thread. Tracked arrays are only valid inside the "
                  "`capture(...)` call, and the thread, that created them; pass plain float64 "
                  "arrays to `capture` and keep tracked arrays inside the function. (Tracked "
                  "arrays made from raw bytes, e.g. `.view(tracked_float)`, can also cause "
                  "this.)");
}

// The first invalid handle among hs (0 if all are valid): for set_handle_error.
inline Handle first_bad(std::initializer_list<Handle> hs) {
  for (Handle h : hs)
    if (!handle_ok(h)) return h;
  return 0;
}

// Translate a C++ exception into a Python error (never let one cross a NumPy frame).
void set_cpp_error() {
  try {
    throw;
  } catch (const dslog::ForgedHandle&) {
    set_forged_error();
  } catch (const std::bad_alloc&) {
    PyErr_SetString(PyExc_MemoryError, "out of memory while recording lineage annotations");
  } catch (const std::exception& e) {
    PyErr_SetString(g_lost_error, e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// Scalar type
// ---------------------------------------------------------------------------------------------
PyObject* make_scalar(double v, Handle h) {
  auto* s = reinterpret_cast<TFScalar*>(g_scalar_type->tp_alloc(g_scalar_type, 0));
  if (!s) return nullptr;
  s->tf = TF{v, h};
  return reinterpret_cast<PyObject*>(s);
}

bool is_tracked_descr(PyArray_Descr* d) { return d && d->type_num == g_typenum; }

// Convert a Python object to an element. Tracked scalars and 0-d tracked arrays keep their
// annotations; plain numbers are constants (no annotations).
int to_element(PyObject* obj, TF* out) {
  if (PyObject_TypeCheck(obj, g_scalar_type)) {
    *out = reinterpret_cast<TFScalar*>(obj)->tf;
    return 0;
  }
  if (PyArray_Check(obj)) {
    auto* arr = reinterpret_cast<PyArrayObject*>(obj);
    if (is_tracked_descr(PyArray_DESCR(arr))) {
      if (PyArray_SIZE(arr) != 1) {
        PyErr_SetString(PyExc_ValueError, "can only convert a size-1 tracked array to a scalar");
        return -1;
      }
      *out = load(PyArray_BYTES(arr));
      return 0;
    }
  }
  if (PyFloat_Check(obj) || PyLong_Check(obj) || PyBool_Check(obj) ||
      PyArray_IsScalar(obj, Number) || PyArray_IsScalar(obj, Bool)) {
    if (PyArray_IsScalar(obj, ComplexFloating) || PyComplex_Check(obj)) {
      PyErr_SetString(PyExc_TypeError, "tracked_float cannot hold a complex value");
      return -1;
    }
    double v = PyFloat_AsDouble(obj);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    *out = TF{v, 0};
    return 0;
  }
  if (PyArray_Check(obj) && PyArray_SIZE(reinterpret_cast<PyArrayObject*>(obj)) == 1) {
    PyObject* item = PyArray_GETITEM(reinterpret_cast<PyArrayObject*>(obj),
                                     PyArray_BYTES(reinterpret_cast<PyArrayObject*>(obj)));
    if (!item) return -1;
    int rc = to_element(item, out);
    Py_DECREF(item);
    return rc;
  }
  PyErr_Format(PyExc_TypeError, "cannot store a %s in a tracked_float array",
               Py_TYPE(obj)->tp_name);
  return -1;
}

PyObject* scalar_new(PyTypeObject*, PyObject* args, PyObject* kwds) {
  if (kwds && PyDict_Size(kwds)) {
    PyErr_SetString(PyExc_TypeError, "tracked_float() takes no keyword arguments");
    return nullptr;
  }
  Py_ssize_t n = PyTuple_Size(args);
  if (n == 0) return make_scalar(0.0, 0);
  if (n != 1) {
    PyErr_SetString(PyExc_TypeError, "tracked_float() takes at most one argument");
    return nullptr;
  }
  PyObject* arg = PyTuple_GET_ITEM(args, 0);
  if (PyArray_Check(arg) && PyArray_NDIM(reinterpret_cast<PyArrayObject*>(arg)) > 0) {
    Py_INCREF(g_descr);
    return PyArray_CastToType(reinterpret_cast<PyArrayObject*>(arg), g_descr, 0);
  }
  TF t;
  if (PyUnicode_Check(arg)) {
    PyObject* f = PyFloat_FromString(arg);
    if (!f) return nullptr;
    t = TF{PyFloat_AsDouble(f), 0};
    Py_DECREF(f);
  } else if (to_element(arg, &t) < 0) {
    return nullptr;
  }
  return make_scalar(t.v, t.h);
}

PyObject* scalar_repr(PyObject* self) {
  const TF& t = reinterpret_cast<TFScalar*>(self)->tf;
  PyObject* f = PyFloat_FromDouble(t.v);
  if (!f) return nullptr;
  PyObject* r = PyUnicode_FromFormat("tracked_float(%R%s)", f, t.h ? ", annotated" : "");
  Py_DECREF(f);
  return r;
}

PyObject* scalar_str(PyObject* self) {
  PyObject* f = PyFloat_FromDouble(reinterpret_cast<TFScalar*>(self)->tf.v);
  if (!f) return nullptr;
  PyObject* r = PyObject_Str(f);
  Py_DECREF(f);
  return r;
}

Py_hash_t scalar_hash(PyObject* self) {
  PyObject* f = PyFloat_FromDouble(reinterpret_cast<TFScalar*>(self)->tf.v);
  if (!f) return -1;
  Py_hash_t h = PyObject_Hash(f);
  Py_DECREF(f);
  return h;
}

// A Python comparison of a tracked scalar (`if a.max() > 0`, builtin `max(row)`,
// `sorted(a[0])`): a comparison is control, not data, so it carries no lineage and returns
// what NumPy returns for the float64 value (an np.bool_; NaN compares unequal). Delegated to
// np.float64 so every other operand (Python int and float, NumPy scalars, arrays, tracked or
// not) is compared exactly as without capture; a tracked scalar operand is compared by value.
// Values never dereference a handle, so a stale or forged scalar compares safely too.
PyObject* as_float64(PyObject* obj) {
  if (PyObject_TypeCheck(obj, g_scalar_type)) {
    PyObject* f = PyArrayScalar_New(Double);
    if (f) PyArrayScalar_ASSIGN(f, Double, reinterpret_cast<TFScalar*>(obj)->tf.v);
    return f;
  }
  Py_INCREF(obj);
  return obj;
}

PyObject* scalar_richcompare(PyObject* self, PyObject* other, int op) {
  PyObject* a = as_float64(self);
  if (!a) return nullptr;
  PyObject* b = as_float64(other);
  if (!b) {
    Py_DECREF(a);
    return nullptr;
  }
  PyObject* r = PyObject_RichCompare(a, b, op);
  Py_DECREF(a);
  Py_DECREF(b);
  return r;
}

PyObject* raise_lost(const char* what) {
  PyErr_Format(g_lost_error,
               "%s of a tracked_float drops its lineage. Inside `capture(...)` keep values in "
               "NumPy operations; to read plain numbers, take them from the capture result "
               "(`result.value`), or declare the lineage explicitly.",
               what);
  return nullptr;
}
PyObject* scalar_float(PyObject*) { return raise_lost("float()"); }
PyObject* scalar_int(PyObject*) { return raise_lost("int()"); }
PyObject* scalar_index(PyObject*) { return raise_lost("Using as an integer index"); }
PyObject* scalar_reduce(PyObject*, PyObject*) { return raise_lost("Pickling"); }

PyObject* scalar_get_annotated(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<TFScalar*>(self)->tf.h != 0);
}

PyMethodDef scalar_methods[] = {
    {"__reduce__", reinterpret_cast<PyCFunction>(scalar_reduce), METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef scalar_getset[] = {
    {"annotated", scalar_get_annotated, nullptr,
     "True if this value carries lineage annotations.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

// ---------------------------------------------------------------------------------------------
// ArrFuncs
// ---------------------------------------------------------------------------------------------
PyObject* af_getitem(void* data, void*) {
  TF t = load(static_cast<char*>(data));
  return make_scalar(t.v, t.h);
}

int af_setitem(PyObject* item, void* data, void*) {
  TF t;
  if (to_element(item, &t) < 0) return -1;
  store(static_cast<char*>(data), t.v, t.h);
  return 0;
}

inline void bswap_elem(char* p) {
  uint64_t a, b;
  std::memcpy(&a, p, 8);
  std::memcpy(&b, p + 8, 8);
  a = __builtin_bswap64(a);
  b = __builtin_bswap64(b);
  std::memcpy(p, &a, 8);
  std::memcpy(p + 8, &b, 8);
}

void af_copyswapn(void* dst, npy_intp dstride, void* src, npy_intp sstride, npy_intp n, int swap,
                  void*) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (s) {
    if (dstride == 16 && sstride == 16) {
      std::memmove(d, s, size_t(n) * 16);
    } else {
      for (npy_intp i = 0; i < n; ++i) std::memmove(d + i * dstride, s + i * sstride, 16);
    }
  }
  if (swap)
    for (npy_intp i = 0; i < n; ++i) bswap_elem(d + i * dstride);
}

void af_copyswap(void* dst, void* src, int swap, void*) {
  if (src) std::memmove(dst, src, 16);
  if (swap) bswap_elem(static_cast<char*>(dst));
}

// NaN sorts last, as for float64.
int af_compare(const void* a, const void* b, void*) {
  double x = load_v(static_cast<const char*>(a)), y = load_v(static_cast<const char*>(b));
  if (x < y) return -1;
  if (x > y) return 1;
  if (x == y) return 0;
  bool nx = std::isnan(x), ny = std::isnan(y);
  return nx == ny ? 0 : (nx ? 1 : -1);
}

int af_argmax(void* data, npy_intp n, npy_intp* out, void*) {
  const char* p = static_cast<const char*>(data);
  npy_intp best = 0;
  double mx = load_v(p);
  if (std::isnan(mx)) {
    *out = 0;
    return 0;
  }
  for (npy_intp i = 1; i < n; ++i) {
    double v = load_v(p + i * 16);
    if (v > mx || std::isnan(v)) {
      mx = v;
      best = i;
      if (std::isnan(v)) break;
    }
  }
  *out = best;
  return 0;
}

int af_argmin(void* data, npy_intp n, npy_intp* out, void*) {
  const char* p = static_cast<const char*>(data);
  npy_intp best = 0;
  double mn = load_v(p);
  if (std::isnan(mn)) {
    *out = 0;
    return 0;
  }
  for (npy_intp i = 1; i < n; ++i) {
    double v = load_v(p + i * 16);
    if (v < mn || std::isnan(v)) {
      mn = v;
      best = i;
      if (std::isnan(v)) break;
    }
  }
  *out = best;
  return 0;
}

npy_bool af_nonzero(void* data, void*) { return load_v(static_cast<const char*>(data)) != 0.0; }

// arange-style extrapolation from the first two items (as DOUBLE_fill); results are constants.
int af_fill(void* data, npy_intp n, void*) {
  char* p = static_cast<char*>(data);
  double start = load_v(p);
  double delta = load_v(p + 16) - start;
  for (npy_intp i = 2; i < n; ++i) store(p + i * 16, start + double(i) * delta, 0);
  return 0;
}

int af_fillwithscalar(void* buffer, npy_intp n, void* value, void*) {
  char* p = static_cast<char*>(buffer);
  for (npy_intp i = 0; i < n; ++i) std::memcpy(p + i * 16, value, 16);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Sorting family: NumPy's own float64 arrangement, elements matched by bits
//
// Which of two equal-comparing values ends up first (0.0 and -0.0, NaNs of other payloads) and
// where a partition leaves the cells it does not pin down is decided by NumPy's float64
// algorithms (SIMD sorts, introselect) and differs from any rule we could state. So a lane is
// arranged by running NumPy's own float64 routine on its values, and each output position then
// takes the input element whose value has the same bits; elements of equal bits (identical
// values) keep their input order. Values are therefore NumPy's bit for bit, and each output
// cell carries the set of the cell its value really came from. In considered mode every
// element of the lane also gets the whole lane as its considered set (a sort or partition
// compares each element with the ones it is ordered against).
// ---------------------------------------------------------------------------------------------
PyArray_SortFunc* g_f64_sort[NPY_NSORTS] = {};

inline uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// The key two values share when NumPy may exchange one for the other: their bits, or with
// `loose` the same for every zero (SIMD sorts built on min/max can turn -0.0 into 0.0 and
// back) and for every NaN.
inline uint64_t match_key(double v, bool loose) {
  if (loose && v == 0.0) return 0;
  if (loose && std::isnan(v)) return 0x7ff8000000000000ULL;
  return bits_of(v);
}

// lane (input order) rearranged as vals (NumPy's float64 arrangement of its values): output
// position j takes the element whose value has the bits of vals[j], elements of identical
// bits in input order. If NumPy's routine changed the sign of a zero (or a NaN's payload),
// zeros (NaNs) are matched as one value, again in input order. The values written are
// vals' own. Returns -1 with a Python error if vals is no rearrangement of the lane.
int match_bits(std::vector<TF>& lane, const double* vals) {
  const size_t n = lane.size();
  std::vector<std::pair<uint64_t, size_t>> in(n), out(n);
  for (bool loose : {false, true}) {
    for (size_t i = 0; i < n; ++i) {
      in[i] = {match_key(lane[i].v, loose), i};
      out[i] = {match_key(vals[i], loose), i};
    }
    std::sort(in.begin(), in.end());  // (key, position): equal keys stay in input order
    std::sort(out.begin(), out.end());
    bool same = true;
    for (size_t r = 0; r < n && same; ++r) same = in[r].first == out[r].first;
    if (!same) continue;
    std::vector<TF> res(n);
    for (size_t r = 0; r < n; ++r)
      res[out[r].second] = TF{vals[out[r].second], lane[in[r].second].h};
    lane.swap(res);
    return 0;
  }
  PyErr_SetString(PyExc_RuntimeError,
                  "tracked_float: NumPy's float64 arrangement of a lane is not a rearrangement "
                  "of its values (please report this)");
  return -1;
}

// Considered mode: every element of the lane also considers the whole lane.
int consider_lane(std::vector<TF>& lane) {
  if (!t_arena || t_arena->mode() != dslog::Mode::kConsidered) return 0;
  try {
    for (const TF& t : lane)
      if (!handle_ok(t.h)) return set_handle_error(t.h), -1;
    // The lane's set is built as an accumulator: small sets are appended as cells, big
    // shared ones (x - x.mean() gives every element {i} ∪ M) as one reference each, so a
    // lane of n such elements costs O(n), not n * |M| (flattening every element's set).
    // begin_call() brackets it: only this accumulator may grow in place, and after the
    // second call it is frozen, since every element of the lane then shares it.
    Arena& ar = *t_arena;
    ar.begin_call();
    Handle k = 0;
    size_t left = lane.size();
    for (const TF& t : lane) ar.acc_join(k, ar.considered(t.h), --left);
    ar.begin_call();
    for (TF& t : lane) t.h = ar.with_considered(t.h, k);
  } catch (...) {
    set_cpp_error();
    return -1;
  }
  return 0;
}

// Sort of one contiguous lane (np.sort, ndarray.sort, np.unique) with NumPy's float64 sort of
// the same kind (quicksort, heapsort, stable).
template <int K>
int af_sort(void* start, npy_intp num, void*) {
  char* p = static_cast<char*>(start);
  std::vector<TF> lane(static_cast<size_t>(num));
  std::vector<double> vals(static_cast<size_t>(num));
  for (npy_intp i = 0; i < num; ++i) {
    lane[size_t(i)] = load(p + i * 16);
    vals[size_t(i)] = lane[size_t(i)].v;
  }
  if (g_f64_sort[K](vals.data(), num, nullptr) < 0) {
    PyErr_NoMemory();
    return -1;
  }
  if (match_bits(lane, vals.data()) < 0 || consider_lane(lane) < 0) return -1;
  for (npy_intp i = 0; i < num; ++i) store(p + i * 16, lane[size_t(i)].v, lane[size_t(i)].h);
  return 0;
}

PyArray_DotFunc* g_f64_dot = nullptr;

thread_local std::vector<double> t_buf_a, t_buf_b, t_buf_c;

// Σ a_i·b_i with NumPy's float64 dot (BLAS) on the values; the union of all 2n sets.
void af_dotfunc(void* ip1, npy_intp is1, void* ip2, npy_intp is2, void* op, npy_intp n, void*) {
  const char* a = static_cast<const char*>(ip1);
  const char* b = static_cast<const char*>(ip2);
  t_buf_a.resize(size_t(n));
  t_buf_b.resize(size_t(n));
  for (npy_intp i = 0; i < n; ++i) {
    t_buf_a[size_t(i)] = load_v(a + i * is1);
    t_buf_b[size_t(i)] = load_v(b + i * is2);
  }
  double res = 0.0;
  g_f64_dot(t_buf_a.data(), 8, t_buf_b.data(), 8, &res, n, nullptr);
  Handle h = 0;
  bool any = false;
  for (npy_intp i = 0; i < n && !any; ++i)
    any = load(a + i * is1).h != 0 || load(b + i * is2).h != 0;
  if (any) {
    if (!t_arena) {
      set_stale_error();
      return;
    }
    try {
      Arena::Builder bld(*t_arena);
      for (npy_intp i = 0; i < n; ++i) {
        Handle x = load(a + i * is1).h, y = load(b + i * is2).h;
        if (!handle_ok(x) || !handle_ok(y)) {
          set_handle_error(first_bad({x, y}));
          return;
        }
        bld.add(x);
        bld.add(y);
      }
      h = bld.finish();
    } catch (...) {
      set_cpp_error();
      return;
    }
  }
  store(static_cast<char*>(op), res, h);
}

// ---------------------------------------------------------------------------------------------
// Casts into tracked_float (constants: no annotations). There is deliberately no cast out.
// ---------------------------------------------------------------------------------------------
double half_to_double(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  double v;
  if (exp == 0)
    v = std::ldexp(double(mant), -24);
  else if (exp == 31)
    v = mant ? std::nan("") : INFINITY;
  else
    v = std::ldexp(double(mant | 0x400u), int(exp) - 25);
  return sign ? -v : v;
}

template <class T>
void cast_in(void* from, void* to, npy_intp n, void*, void*) {
  const T* f = static_cast<const T*>(from);
  char* t = static_cast<char*>(to);
  for (npy_intp i = 0; i < n; ++i) store(t + i * 16, double(f[i]), 0);
}

void cast_in_half(void* from, void* to, npy_intp n, void*, void*) {
  const uint16_t* f = static_cast<const uint16_t*>(from);
  char* t = static_cast<char*>(to);
  for (npy_intp i = 0; i < n; ++i) store(t + i * 16, half_to_double(f[i]), 0);
}

// Truthiness (`x != 0`) for conditions such as np.where(x, ...), np.any, np.sinc. Like every
// comparison it yields control, not data, so it carries no lineage; it is registered as an
// unsafe cast only (never chosen implicitly for arithmetic).
void cast_to_bool(void* from, void* to, npy_intp n, void*, void*) {
  const char* f = static_cast<const char*>(from);
  npy_bool* t = static_cast<npy_bool*>(to);
  for (npy_intp i = 0; i < n; ++i) t[i] = load_v(f + i * 16) != 0.0;
}

void cast_in_bool(void* from, void* to, npy_intp n, void*, void*) {
  const npy_bool* f = static_cast<const npy_bool*>(from);
  char* t = static_cast<char*>(to);
  for (npy_intp i = 0; i < n; ++i) store(t + i * 16, f[i] ? 1.0 : 0.0, 0);
}

// ---------------------------------------------------------------------------------------------
// Delegation to NumPy's own float64 inner loops
// ---------------------------------------------------------------------------------------------
struct F64Loop {
  PyUFuncGenericFunction fn = nullptr;
  void* data = nullptr;
};

PyUFuncObject* get_ufunc(const char* name) {
  // numpy._core.umath holds every ufunc (np.clip is a Python wrapper around umath.clip).
  PyObject* np = PyImport_ImportModule("numpy._core.umath");
  if (!np) throw py::error_already_set();
  PyObject* u = PyObject_GetAttrString(np, name);
  Py_DECREF(np);
  if (!u) throw py::error_already_set();
  if (!PyObject_TypeCheck(u, &PyUFunc_Type)) {
    Py_DECREF(u);
    throw std::runtime_error(std::string("numpy._core.umath.") + name + " is not a ufunc");
  }
  return reinterpret_cast<PyUFuncObject*>(u);  // kept alive for the process
}

F64Loop find_f64_loop(PyUFuncObject* uf) {
  for (int i = 0; i < uf->ntypes; ++i) {
    bool all = true;
    for (int j = 0; j < uf->nargs; ++j) all = all && uf->types[i * uf->nargs + j] == NPY_DOUBLE;
    if (all && uf->functions[i]) return F64Loop{uf->functions[i], uf->data[i]};
  }
  throw std::runtime_error(std::string("numpy.") + uf->name + " has no float64 inner loop");
}

constexpr npy_intp kChunk = 1024;

// Large contiguous outputs are written with non-temporal stores: a tracked_float element is
// 16 bytes, so at 1M cells the operands no longer fit the cache, and streaming the output
// saves the read-for-ownership of every output line and keeps the inputs cached.
constexpr npy_intp kStreamMin = npy_intp(1) << 16;
inline bool streamable(const char* p, npy_intp n, npy_intp stride) {
#ifdef DSLOG_STREAM
  return stride == 16 && n >= kStreamMin && (reinterpret_cast<uintptr_t>(p) & 15) == 0;
#else
  (void)p, (void)n, (void)stride;
  return false;
#endif
}
inline void store_nt(char* p, double v, Handle h) {
#ifdef DSLOG_STREAM
  int64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm_set_epi64x(int64_t(h), bits));
#else
  store(p, v, h);
#endif
}
inline void stream_fence() {
#ifdef DSLOG_STREAM
  _mm_sfence();
#endif
}

// ---------------------------------------------------------------------------------------------
// Unary T -> T (legacy loops): the set passes through unchanged.
// ---------------------------------------------------------------------------------------------
enum UnaryInline { U_DELEGATE, U_NEGATIVE, U_POSITIVE, U_ABSOLUTE };
struct UnaryInfo {
  UnaryInline op;
  F64Loop f64;
};

void unary_loop(char** args, npy_intp const* dims, npy_intp const* steps, void* data) {
  const auto* info = static_cast<const UnaryInfo*>(data);
  npy_intp n = dims[0];
  char *ip = args[0], *op = args[1];
  npy_intp is = steps[0], os = steps[1];
  switch (info->op) {
    case U_NEGATIVE:
#ifdef DSLOG_STREAM
      if (is == 16 && streamable(op, n, os) && (reinterpret_cast<uintptr_t>(ip) & 15) == 0) {
        const __m128i sign = _mm_set_epi64x(0, int64_t(uint64_t(1) << 63));
        for (npy_intp i = 0; i < n; ++i) {
          __m128i w = _mm_load_si128(reinterpret_cast<const __m128i*>(ip + i * 16));
          _mm_stream_si128(reinterpret_cast<__m128i*>(op + i * 16), _mm_xor_si128(w, sign));
        }
        stream_fence();
        return;
      }
#endif
      if (is == 16 && os == 16) {  // contiguous: flip the value's sign bit, copy the handle
        const char* s = ip;
        char* d = op;
        for (npy_intp i = 0; i < n; ++i) {
          uint64_t w[2];
          std::memcpy(w, s + i * 16, 16);
          w[0] ^= uint64_t(1) << 63;
          std::memcpy(d + i * 16, w, 16);
        }
        return;
      }
      for (npy_intp i = 0; i < n; ++i) {
        TF t = load(ip + i * is);
        store(op + i * os, -t.v, t.h);
      }
      return;
    case U_POSITIVE:
      for (npy_intp i = 0; i < n; ++i) {
        TF t = load(ip + i * is);
        store(op + i * os, t.v, t.h);
      }
      return;
    case U_ABSOLUTE:
      for (npy_intp i = 0; i < n; ++i) {
        TF t = load(ip + i * is);
        store(op + i * os, std::fabs(t.v), t.h);
      }
      return;
    case U_DELEGATE:
      break;
  }
  double in[kChunk], out[kChunk];
  Handle hs[kChunk];
  for (npy_intp s = 0; s < n; s += kChunk) {
    npy_intp m = std::min(kChunk, n - s);
    for (npy_intp i = 0; i < m; ++i) {
      TF t = load(ip + (s + i) * is);
      in[i] = t.v;
      hs[i] = t.h;
    }
    char* a[2] = {reinterpret_cast<char*>(in), reinterpret_cast<char*>(out)};
    npy_intp d[1] = {m};
    npy_intp st[2] = {8, 8};
    info->f64.fn(a, d, st, info->f64.data);
    for (npy_intp i = 0; i < m; ++i) store(op + (s + i) * os, out[i], hs[i]);
  }
}

// ---------------------------------------------------------------------------------------------
// Comparisons and predicates -> bool (no lineage: a bool is control, not data).
// ---------------------------------------------------------------------------------------------
template <class Cmp>
void compare_loop(char** args, npy_intp const* dims, npy_intp const* steps, void*) {
  Cmp cmp;
  for (npy_intp i = 0; i < dims[0]; ++i) {
    double a = load_v(args[0] + i * steps[0]), b = load_v(args[1] + i * steps[1]);
    *reinterpret_cast<npy_bool*>(args[2] + i * steps[2]) = cmp(a, b);
  }
}
struct Eq { bool operator()(double a, double b) const { return a == b; } };
struct Ne { bool operator()(double a, double b) const { return a != b; } };
// Ordered comparisons are the quiet ones, as NumPy's float64 loops: `a < b` may raise the
// invalid flag on NaN (x86 comisd), which NumPy would report as a RuntimeWarning it never gives.
struct Lt { bool operator()(double a, double b) const { return std::isless(a, b); } };
struct Le { bool operator()(double a, double b) const { return std::islessequal(a, b); } };
struct Gt { bool operator()(double a, double b) const { return std::isgreater(a, b); } };
struct Ge { bool operator()(double a, double b) const { return std::isgreaterequal(a, b); } };

template <class Pred>
void predicate_loop(char** args, npy_intp const* dims, npy_intp const* steps, void*) {
  Pred pred;
  for (npy_intp i = 0; i < dims[0]; ++i)
    *reinterpret_cast<npy_bool*>(args[1] + i * steps[1]) = pred(load_v(args[0] + i * steps[0]));
}
struct IsNan { bool operator()(double a) const { return std::isnan(a); } };
struct IsInf { bool operator()(double a) const { return std::isinf(a); } };
struct IsFinite { bool operator()(double a) const { return std::isfinite(a); } };
struct SignBit { bool operator()(double a) const { return std::signbit(a); } };

// ---------------------------------------------------------------------------------------------
// clip(x, lo, hi): a pick among three; NumPy's float rule max-then-min with NaN propagation.
// The values are NumPy's own float64 clip loop's (bounds given with their own strides, so a
// scalar bound takes NumPy's scalar-bound path): NumPy returns x or the bound for a (0.0, -0.0)
// tie depending on that path, and then the zero NumPy returned (and its cell) is the pick.
// Everything else follows the rule (a value equal to a bound takes the bound; a NaN x
// propagates).
// ---------------------------------------------------------------------------------------------
F64Loop g_f64_clip;

void clip_loop(char** args, npy_intp const* dims, npy_intp const* steps, void*) {
  try {
    const npy_intp n = dims[0];
    double xs[kChunk], los[kChunk], his[kChunk], vs[kChunk];
    for (npy_intp s = 0; s < n; s += kChunk) {
      const npy_intp m = std::min(kChunk, n - s);
      for (npy_intp i = 0; i < m; ++i) {
        xs[i] = load_v(args[0] + (s + i) * steps[0]);
        los[i] = load_v(args[1] + (s + i) * steps[1]);
        his[i] = load_v(args[2] + (s + i) * steps[2]);
      }
      if (g_f64_clip.fn != nullptr) {
        char* a[4] = {reinterpret_cast<char*>(xs), reinterpret_cast<char*>(los),
                      reinterpret_cast<char*>(his), reinterpret_cast<char*>(vs)};
        npy_intp d[1] = {m};
        npy_intp st[4] = {8, steps[1] == 0 ? 0 : 8, steps[2] == 0 ? 0 : 8, 8};
        g_f64_clip.fn(a, d, st, g_f64_clip.data);
      }
      for (npy_intp i = 0; i < m; ++i) {
        TF x = load(args[0] + (s + i) * steps[0]), lo = load(args[1] + (s + i) * steps[1]),
           hi = load(args[2] + (s + i) * steps[2]);
        // _NPY_MAX(x, lo): isnan(x) ? x : (x > lo ? x : lo); then _NPY_MIN(m, hi).
        int w = (std::isnan(x.v) || x.v > lo.v) ? 0 : 1;
        double mv = w == 0 ? x.v : lo.v;
        if (!(std::isnan(mv) || mv < hi.v)) w = 2;
        double v = w == 0 ? x.v : (w == 1 ? lo.v : hi.v);
        if (g_f64_clip.fn != nullptr && v == 0.0 && vs[i] == 0.0 && bits_of(vs[i]) != bits_of(v)) {
          v = vs[i];
          const double ops[3] = {x.v, lo.v, hi.v};
          for (int k = 0; k < 3; ++k)
            if (bits_of(ops[k]) == bits_of(v)) {
              w = k;
              break;
            }
        }
        Handle h = 0;
        if (x.h | lo.h | hi.h) {
          if (!handle_ok(x.h) || !handle_ok(lo.h) || !handle_ok(hi.h)) {
            set_handle_error(first_bad({x.h, lo.h, hi.h}));
            return;
          }
          // Ties pass every tied operand, following the macro's two steps: x and lo tie in
          // the max (a NaN never ties), and the max's operands tie with hi in the min; the
          // operand with the bits NumPy returned (w) is always passed.
          Arena& ar = *t_arena;
          const bool x_max = std::isnan(x.v) || x.v > lo.v;
          const double m = x_max ? x.v : lo.v;
          const bool in_m[2] = {x_max || x.v == lo.v, !x_max};
          const bool min_is_m = std::isnan(m) || m < hi.v;
          bool in[3] = {false, false, !min_is_m};
          if (min_is_m || m == hi.v) {
            in[0] = in_m[0];
            in[1] = in_m[1];
          }
          in[w] = true;
          const Handle ops[3] = {x.h, lo.h, hi.h};
          Handle c = 0;
          for (int k = 0; k < 3; ++k)
            if (in[k] && ops[k]) c = c == 0 ? ar.contrib(ops[k]) : ar.join(c, ar.contrib(ops[k]));
          if (ar.mode() == dslog::Mode::kContributing) {
            h = c;
          } else {
            h = ar.with_considered(c, ar.considered(ar.join(ar.join(x.h, lo.h), hi.h)));
          }
        }
        store(args[3] + (s + i) * steps[3], v, h);
      }
    }
  } catch (...) {
    set_cpp_error();
  }
}

// ---------------------------------------------------------------------------------------------
// matmul gufunc (n,k),(k,m)->(n,m): NumPy's float64 matmul on the values, and per output cell
// the union of row i of A and column j of B.
// ---------------------------------------------------------------------------------------------
F64Loop g_f64_matmul;
thread_local std::vector<Handle> t_rows, t_cols;

// The set of a matmul row whose k handles are the members 0..k-1 of one group in order, the
// members tiling one progression (member q = {start0 + q·cstep + r·stride}, stride = k·cstep:
// the column statistics of a matrix broadcast over its rows, as in (x - x.mean(0)) @ w):
// their union is {start0 + t·cstep : t < k·count}, one progression, made without appending
// k shared sets. 0 when the row is not of that shape.
Handle whole_group_row(Arena& ar, const char* p, npy_intp step, npy_intp k) {
  const Handle h0 = load(p).h;
  if (k < 2 || hnd::kind(h0) != hnd::kGroup || !ar.check(h0) || ar.is_owned(h0) ||
      (hnd::payload(h0) & hnd::kMemberMask) != 0)
    return 0;
  const dslog::GroupNode& g = ar.group_of(h0);
  if (g.ncols != uint64_t(k) || g.cstep <= 0 || g.count == 0 ||
      uint64_t(g.cstep) * g.ncols != g.stride)
    return 0;
  for (npy_intp q = 1; q < k; ++q)
    if (load(p + q * step).h != h0 + uint64_t(q)) return 0;
  return h0;
}

void matmul_loop(char** args, npy_intp const* dims, npy_intp const* steps, void*) {
  npy_intp N = dims[0], n = dims[1], k = dims[2], m = dims[3];
  npy_intp s0 = steps[0], s1 = steps[1], s2 = steps[2];
  npy_intp a_n = steps[3], a_k = steps[4], b_k = steps[5], b_m = steps[6], c_n = steps[7],
           c_m = steps[8];
  try {
    std::vector<double>& A = t_buf_a;
    std::vector<double>& B = t_buf_b;
    std::vector<double>& C = t_buf_c;
    A.resize(size_t(n * k));
    B.resize(size_t(k * m));
    C.resize(size_t(n * m));
    for (npy_intp o = 0; o < N; ++o) {
      char* pa = args[0] + o * s0;
      char* pb = args[1] + o * s1;
      char* pc = args[2] + o * s2;
      bool any = false;
      for (npy_intp i = 0; i < n; ++i)
        for (npy_intp j = 0; j < k; ++j) {
          TF t = load(pa + i * a_n + j * a_k);
          A[size_t(i * k + j)] = t.v;
          any = any || t.h;
        }
      for (npy_intp i = 0; i < k; ++i)
        for (npy_intp j = 0; j < m; ++j) {
          TF t = load(pb + i * b_k + j * b_m);
          B[size_t(i * m + j)] = t.v;
          any = any || t.h;
        }
      char* a3[3] = {reinterpret_cast<char*>(A.data()), reinterpret_cast<char*>(B.data()),
                     reinterpret_cast<char*>(C.data())};
      npy_intp d4[4] = {1, n, k, m};
      npy_intp st[9] = {0, 0, 0, k * 8, 8, m * 8, 8, m * 8, 8};
      if (n * m > 0) {
        if (k == 0)
          std::fill(C.begin(), C.end(), 0.0);
        else
          g_f64_matmul.fn(a3, d4, st, g_f64_matmul.data);
      }
      if (any && !t_arena) {
        set_stale_error();
        return;
      }
      // Output cell (i, j) carries row i of A ∪ column j of B. Each row and each column set
      // is built once, as an accumulator (small sets as cells, big shared ones by
      // reference, so a row of `x - x.mean(0)` costs O(k), not k·n), and frozen; a cell
      // then gets the lazy union of its two, O(1): an n·k·m product never writes a set of
      // k + k cells per output cell (2e9 annotations for 1000³), and the extraction reads
      // the shared row and column sets once (native/src/extract.cpp).
      std::vector<Handle>& rows = t_rows;
      std::vector<Handle>& cols = t_cols;
      if (any) {
        Arena& ar = *t_arena;
        rows.assign(size_t(n), 0);
        cols.assign(size_t(m), 0);
        ar.begin_call();
        Handle seen = 0, seen_set = 0;  // the last whole-group row and its progression
        for (npy_intp i = 0; i < n; ++i) {
          if (const Handle h0 = whole_group_row(ar, pa + i * a_n, a_k, k)) {
            if (h0 != seen) {
              const dslog::GroupNode& g = ar.group_of(h0);
              seen_set = ar.make_progression(g.start0, uint64_t(g.cstep), g.ncols * g.count);
              seen = h0;
            }
            rows[size_t(i)] = seen_set;
            continue;
          }
          for (npy_intp q = 0; q < k; ++q) {
            const Handle x = load(pa + i * a_n + q * a_k).h;
            if (!handle_ok(x)) return set_handle_error(x);
            ar.acc_join(rows[size_t(i)], x, size_t(k - q - 1));
          }
        }
        for (npy_intp j = 0; j < m; ++j)
          for (npy_intp q = 0; q < k; ++q) {
            const Handle y = load(pb + q * b_k + j * b_m).h;
            if (!handle_ok(y)) return set_handle_error(y);
            ar.acc_join(cols[size_t(j)], y, size_t(k - q - 1));
          }
        ar.begin_call();  // freezes them: every cell of a row shares its row's set
      }
      for (npy_intp i = 0; i < n; ++i)
        for (npy_intp j = 0; j < m; ++j) {
          const Handle h = any ? t_arena->join(rows[size_t(i)], cols[size_t(j)]) : 0;
          store(pc + i * c_n + j * c_m, C[size_t(i * m + j)], h);
        }
    }
  } catch (...) {
    set_cpp_error();
  }
}

// ---------------------------------------------------------------------------------------------
// Binary T,T -> T as ArrayMethods (per-call get_loop => safe in-place accumulation).
// ---------------------------------------------------------------------------------------------
enum BinKind { B_ARITH, B_PICK };
enum BinInline { I_NONE, I_ADD, I_SUB, I_MUL, I_DIV, I_MAX, I_MIN, I_FMAX, I_FMIN };

struct BinInfo {
  const char* name;
  BinKind kind;
  BinInline op;
  bool pairwise;  // add: NumPy reduces with pairwise summation
  int identity;   // 0: none, 1: 0.0, 2: 1.0
  bool reorderable;
  F64Loop f64;
};

// NumPy's DOUBLE_pairwise_sum (numpy/_core/src/umath/loops_utils.h.src), same order exactly.
double pairwise_sum(const char* a, npy_intp n, npy_intp stride) {
  if (n < 8) {
    double res = -0.0;  // as NumPy: summing only -0 gives -0 (0 + -0 would be 0)
    for (npy_intp i = 0; i < n; ++i) res += load_v(a + i * stride);
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = load_v(a + j * stride);
    npy_intp i;
    for (i = 8; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] += load_v(a + (i + j) * stride);
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += load_v(a + i * stride);
    return res;
  }
  npy_intp n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2, stride) + pairwise_sum(a + n2 * stride, n - n2, stride);
}

// Which operand a pick keeps (true = second): NumPy's float rules.
inline bool second_wins(BinInline op, double a, double b) {
  switch (op) {
    // Quiet comparisons (no FE_INVALID on NaN): NumPy would turn the flag into a
    // RuntimeWarning that float64's own loops never give.
    case I_MAX:
      return !(std::isgreaterequal(a, b) || std::isnan(a));
    case I_MIN:
      return !(std::islessequal(a, b) || std::isnan(a));
    case I_FMAX:
      return !(std::isgreaterequal(a, b) || std::isnan(b));
    case I_FMIN:
      return !(std::islessequal(a, b) || std::isnan(b));
    default:
      return false;
  }
}

inline double inline_value(BinInline op, double a, double b) {
  switch (op) {
    case I_ADD:
      return a + b;
    case I_SUB:
      return a - b;
    case I_MUL:
      return a * b;
    case I_DIV:
      return a / b;
    default:
      return 0.0;
  }
}

// Which operand a pick kept, given the value NumPy computed: the operand with the result's
// bits. Only where both or neither have them (equal bits, or a NaN NumPy rewrote) do NumPy's
// float rules decide. Why by bits: NumPy's SIMD maximum/fmax loops may return either zero of
// a (0.0, -0.0) pair, depending on where the pair sits in a vector, so only the value NumPy
// wrote tells which cell it took.
inline bool picked_second(BinInline op, double a, double b, double r) {
  uint64_t ba, bb, br;
  std::memcpy(&ba, &a, 8);
  std::memcpy(&bb, &b, 8);
  std::memcpy(&br, &r, 8);
  if (ba != bb) {
    if (br == bb) return true;
    if (br == ba) return false;
  }
  return second_wins(op, a, b);
}

// Values of `m` element pairs into `out` (a and b gathered as doubles): NumPy's own float64
// inner loop, the picks (maximum/minimum/fmax/fmin) included, so the values are NumPy's bit
// for bit (its loops return either zero of a (0.0, -0.0) pair; `picked_second` then gives the
// lineage to the operand with the bits NumPy returned).
void bin_values(const BinInfo& info, const double* a, const double* b, double* out, npy_intp m) {
  if (info.kind == B_PICK && info.f64.fn == nullptr) {
    for (npy_intp i = 0; i < m; ++i) out[i] = second_wins(info.op, a[i], b[i]) ? b[i] : a[i];
  } else if (info.kind != B_PICK && info.op != I_NONE) {
    for (npy_intp i = 0; i < m; ++i) out[i] = inline_value(info.op, a[i], b[i]);
  } else {
    char* args[3] = {const_cast<char*>(reinterpret_cast<const char*>(a)),
                     const_cast<char*>(reinterpret_cast<const char*>(b)),
                     reinterpret_cast<char*>(out)};
    npy_intp d[1] = {m};
    npy_intp st[3] = {8, 8, 8};
    info.f64.fn(args, d, st, info.f64.data);
  }
}

// Element-wise +, -, *, / in one pass (value and set per element, no gathering). The common
// sets get inline fast paths: two single cells (a kCell2 handle, no table entry), a single
// cell and a constant (the cell's handle as is), and in place (`x += y`, and reductions along
// a non-contiguous axis, which NumPy runs as out[j] += in[i, j] row by row) the next cell of
// this call's progression accumulator. Everything else goes through the arena's general join.
// Elements to prefetch ahead in the streaming reduction loop: the
// per-element work is too long for the out-of-order window alone to keep enough loads in
// flight (measured: sum over axis 0 of 1M cells 2.6 -> 2.0 ms).
constexpr npy_intp kPrefetch = 256;

template <BinInline OP>
inline double arith_value(double x, double y) {
  return OP == I_ADD ? x + y : OP == I_SUB ? x - y : OP == I_MUL ? x * y : x / y;
}

// One element of arith_fast_op outside its hot cases: the arena's general join (or, in
// place, acc_join). Kept out of line so the hot loops stay small (no spills).
template <bool in_place>
__attribute__((noinline)) int arith_slow(Arena& ar, TF x, TF y, double v, char* out) {
  Handle h = 0;
  if (x.h | y.h) {
    if (!ar.check(x.h)) return set_handle_error(x.h), -1;
    if (!ar.check(y.h)) return set_handle_error(y.h), -1;
    const auto kx = hnd::kind(x.h), ky = hnd::kind(y.h);
    if (ky == hnd::kCell && kx == hnd::kCell && y.h) {
      h = x.h ? ar.join_cells(hnd::payload(x.h), hnd::payload(y.h)) : y.h;
      if (in_place && x.h && hnd::kind(h) != hnd::kCell2) {  // keep acc_join's semantics
        h = x.h;
        ar.acc_join(h, y.h, 0);
      }
    } else if (y.h == 0 && kx == hnd::kCell) {
      h = x.h;
    } else if (x.h == 0 && ky == hnd::kCell && !in_place) {
      h = y.h;
    } else if (in_place) {
      h = x.h;
      if (!ar.prog_extend(h, y.h)) ar.acc_join(h, y.h, 0);
    } else {
      h = ar.join(x.h, y.h);
    }
  }
  store(out, v, h);
  return 0;
}

// A whole row of a reduction along a non-contiguous axis (NumPy runs np.sum(x, axis=0) as
// out[j] += x[i, j], one call per row i): when the row's accumulators are the members of one
// group of this call and the row's cells continue all of them, the group's shared count grows
// by one and only the values are computed per element. The row that would turn two-cell
// accumulators into progressions creates the group. True when the row was done here.
template <BinInline OP>
bool row_reduce(Arena& ar, const char* b, char* o, npy_intp n, npy_intp sb, npy_intp so) {
  constexpr uint64_t kTagMask = ~((uint64_t(1) << hnd::kKindShift) - 1);
  const uint64_t ep = ar.epoch();
  const uint64_t cell_bits = (ep << hnd::kEpochShift) | (uint64_t(hnd::kCell) << hnd::kKindShift);
  const uint64_t group_bits = (ep << hnd::kEpochShift) | (uint64_t(hnd::kGroup) << hnd::kKindShift);
  const uint64_t cell2_bits = (ep << hnd::kEpochShift) | (uint64_t(hnd::kCell2) << hnd::kKindShift);
  auto handle_at = [](const char* p) {
    Handle h;
    std::memcpy(&h, p + 8, sizeof h);
    return h;
  };
  const Handle x0 = handle_at(o), y0 = handle_at(b);
  if ((y0 & kTagMask) != cell_bits) return false;
  uint64_t xstep, ystep;  // handle steps from member to member
  dslog::GroupNode* g = nullptr;
  uint64_t d = 0;
  if ((x0 & kTagMask) == group_bits) {
    g = ar.owned_group(x0);
    if (g == nullptr || (hnd::payload(x0) & hnd::kMemberMask) != 0 || g->ncols != uint64_t(n) ||
        y0 != ar.cell_handle(g->start0 + g->count * g->stride))
      return false;
    xstep = 1;
    ystep = uint64_t(g->cstep);
  } else if ((x0 & kTagMask) == cell2_bits) {
    d = ar.cell2_delta(x0);
    if (hnd::payload(y0) != hnd::payload(x0) + 2 * d) return false;
    const Handle x1 = handle_at(o + so);
    if ((x1 & ~hnd::kPayloadMask) != (x0 & ~hnd::kPayloadMask)) return false;  // same distance
    xstep = hnd::payload(x1) - hnd::payload(x0);  // the cells' column step (mod 2^64)
    ystep = xstep;
  } else {
    return false;
  }
  // Member handles are computed as first + j * step: both ends must stay inside the payload
  // (the ones between then do too), or a computed value could alias another kind's handle.
  const uint64_t last = uint64_t(n - 1);
  if (((x0 + last * xstep) & ~hnd::kPayloadMask) != (x0 & ~hnd::kPayloadMask) ||
      ((y0 + last * ystep) & ~hnd::kPayloadMask) != (y0 & ~hnd::kPayloadMask))
    return false;
  {
    const char* po = o + so;
    const char* pb = b + sb;
    Handle ex = x0 + xstep, ey = y0 + ystep;
    for (npy_intp j = 1; j < n; ++j, po += so, pb += sb, ex += xstep, ey += ystep)
      if (handle_at(po) != ex || handle_at(pb) != ey) return false;
  }
  char* po = o;
  const char* pb = b;
  if (g != nullptr) {
    g->count = g->count + 1;
    for (npy_intp j = 0; j < n; ++j, po += so, pb += sb) {
      const double v = arith_value<OP>(load_v(po), load_v(pb));
      std::memcpy(po, &v, sizeof v);
    }
    return true;
  }
  Handle h = ar.new_group(hnd::payload(x0), int64_t(xstep), d, 3, uint64_t(n));
  if (h == 0) return false;
  for (npy_intp j = 0; j < n; ++j, po += so, pb += sb, ++h)
    store(po, arith_value<OP>(load_v(po), load_v(pb)), h);
  return true;
}

// Element-wise +, -, *, / in one pass (value and set per element, no gathering). Hot cases
// inline, with the arena state they need kept in registers (stores through char* could
// alias it): out of place, two single cells at the distance used last (x + y of two
// annotated arrays: a kCell2 handle, no table entry); in place (`x += y`, and reductions
// along a non-contiguous axis, which NumPy runs as out[j] += in[i, j] row by row), the next
// cell of this call's progression accumulator. Everything else: arith_slow.
#ifdef DSLOG_AVX2
bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

// The leading run of "sequential" elements of x OP y, two at a time: x's set is the single
// cell hx0 + i, y's hy0 + i (two contiguous annotated operands), so the result's is the kCell2
// handle ho0 + i. Values are computed lane by lane exactly as the scalar loop does (the
// handle lanes compute 1 OP 1, which raises no floating-point flag). Returns how many
// elements were done; the caller continues with the general loop from there.
template <BinInline OP, bool kNT>
__attribute__((target("avx2"))) npy_intp seq_run_avx2(const char* a, const char* b, char* o,
                                                       npy_intp n, Handle hx0, Handle hy0,
                                                       Handle ho0) {
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256i two = _mm256_set_epi64x(2, 0, 2, 0);
  __m256i ex = _mm256_set_epi64x(int64_t(hx0 + 1), 0, int64_t(hx0), 0);
  __m256i ey = _mm256_set_epi64x(int64_t(hy0 + 1), 0, int64_t(hy0), 0);
  __m256i eo = _mm256_set_epi64x(int64_t(ho0 + 1), 0, int64_t(ho0), 0);
  npy_intp i = 0;
  for (; i + 2 <= n; i += 2) {
    const __m256i X = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i * 16));
    const __m256i Y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i * 16));
    const __m256i m = _mm256_and_si256(_mm256_cmpeq_epi64(X, ex), _mm256_cmpeq_epi64(Y, ey));
    if ((_mm256_movemask_pd(_mm256_castsi256_pd(m)) & 0xA) != 0xA) break;
    const __m256d xv = _mm256_blend_pd(_mm256_castsi256_pd(X), one, 0xA);
    const __m256d yv = _mm256_blend_pd(_mm256_castsi256_pd(Y), one, 0xA);
    __m256d r;
    if (OP == I_ADD)
      r = _mm256_add_pd(xv, yv);
    else if (OP == I_SUB)
      r = _mm256_sub_pd(xv, yv);
    else if (OP == I_MUL)
      r = _mm256_mul_pd(xv, yv);
    else
      r = _mm256_div_pd(xv, yv);
    const __m256i R = _mm256_blend_epi32(_mm256_castpd_si256(r), eo, 0xCC);
    char* p = o + i * 16;
    if (kNT) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(R));
      _mm_stream_si128(reinterpret_cast<__m128i*>(p + 16), _mm256_extracti128_si256(R, 1));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), R);
    }
    ex = _mm256_add_epi64(ex, two);
    ey = _mm256_add_epi64(ey, two);
    eo = _mm256_add_epi64(eo, two);
  }
  return i;
}
#endif

// An operand broadcast from a statistic whose set is a progression of cells: the whole
// array's (x - x.mean()), or a column's (x - x.mean(0), x / x.std(0): the members of one group,
// member j at handle lo + j). When the other operand is a cell of that progression, or the same
// progression reached by another reduction, the union is the statistic's set itself: decided
// here by arithmetic, with no arena call and no table entry (O(1) per output cell, no set
// work). Filled from a checked handle; the handles lo..hi are then known to be valid.
struct StatCache {
  bool valid = false;
  Handle lo = 0, hi = 0;
  uint64_t start0 = 0, stride = 1, count = 0;
  int64_t cstep = 0;
  bool has(Handle h) const { return valid && h - lo <= hi - lo; }
  // For handle h; false (and empty) when h is no such statistic.
  bool fill(Arena& ar, Handle h) {
    valid = false;
    const auto k = hnd::kind(h);
    if ((k != hnd::kProg && k != hnd::kGroup) || !ar.check(h) || ar.is_owned(h)) return false;
    if (k == hnd::kProg) {
      const dslog::ProgNode p = ar.progression(h);
      start0 = p.start;
      stride = p.stride;
      count = p.count();
      cstep = 0;
      lo = hi = h;
    } else {
      const dslog::GroupNode& g = ar.group_of(h);
      start0 = g.start0;
      cstep = g.cstep;
      stride = g.stride;
      count = g.count;
      lo = h - (hnd::payload(h) & hnd::kMemberMask);
      hi = lo + (g.ncols - 1);
    }
    valid = stride != 0;
    return valid;
  }
  // First cell of member h (has(h)).
  uint64_t first(Handle h) const { return start0 + uint64_t(int64_t(h - lo) * cstep); }
  // Cell c is in the progression of member h (has(h)).
  bool holds(Handle h, uint64_t c) const {
    const uint64_t s = first(h);
    if (c < s) return false;
    const uint64_t t = c - s, q = stride == 1 ? t : t / stride;
    return q < count && (stride == 1 || t == q * stride);
  }
};

// An element-wise operation of an annotated array with a broadcast annotated operand (stride
// 0: a scalar statistic, x - x.min(), s / (max - min)): every output cell's set is its own
// cell joined with the operand's set g, which is entered once in the arena's table of shared
// sets (kCellSet) instead of a lazy union node per element; an element that already carries
// {c} ∪ S (the second step of min-max scaling) gets {c} ∪ (S ∪ g), the union of the shared
// sets made once per distinct S. Returns 1 when the operand is not a set this applies to
// (nothing written: the caller runs its general loop), 0 when done, -1 on error.
template <BinInline OP>
__attribute__((noinline)) int broadcast_op(Arena& ar, const char* a, const char* b, char* o,
                                           npy_intp n, npy_intp sa, npy_intp sb, npy_intp so,
                                           bool scalar_b) {
  const Handle g = load(scalar_b ? b : a).h;
  if (g == 0 || !ar.check(g)) return 1;
  const auto kg = hnd::kind(g);
  // progressions and groups: the statistic-holds-the-cell path of arith_fast_op keeps the
  // statistic's own handle (x - x.mean()), which is smaller still
  if (kg == hnd::kPair || kg == hnd::kProg || kg == hnd::kGroup || ar.is_owned(g)) return 1;
  // A statistic's list (the mean of a blurred image: every cell) sorted once, so that an
  // element whose cells it holds keeps its handle (the union is the statistic itself)
  // instead of a lazy union node per element.
  ar.normalise_list(g);
  const Handle gbits = ar.with_bits(g);
  if (gbits == 0) return 1;
  const uint64_t ep = ar.epoch();
  constexpr uint64_t kTagMask = ~((uint64_t(1) << hnd::kKindShift) - 1);
  const uint64_t cell_bits = (ep << hnd::kEpochShift) | (uint64_t(hnd::kCell) << hnd::kKindShift);
  const uint64_t with_tag = (ep << hnd::kEpochShift) | (uint64_t(hnd::kCellSet) << hnd::kKindShift);
  const uint64_t ncells = ar.n_cells();
  const uint64_t gcell = kg == hnd::kCell ? hnd::payload(g) : ~uint64_t(0);
  const char* vp = scalar_b ? a : b;  // the varying operand
  const npy_intp sv = scalar_b ? sa : sb;
  const double gv = load_v(scalar_b ? b : a);
  // the last {c} ∪ S read and what it became: handle bits without the cell, and the
  // largest offset of its own cells (for the check that they are input cells)
  Handle in_bits = 0, out_bits = 0;
  uint64_t out_max = 0;
  // g a list of one interval of cells: membership by its ends (the memo of the last entry)
  uint64_t dense_lo = 0, dense_hi = 0, dense_max = 0;
  const bool dense = ar.dense_list(g, dense_lo, dense_hi);
  Handle dense_bits = 0;
  bool dense_shared_ok = false;
  for (npy_intp i = 0; i < n; ++i) {
    const TF x = load(vp + i * sv);
    const double v = scalar_b ? arith_value<OP>(x.v, gv) : arith_value<OP>(gv, x.v);
    char* out = o + i * so;
    const Handle hx = x.h;
    Handle h;
    if ((hx & kTagMask) == cell_bits) {
      const uint64_t c = hnd::payload(hx);
      if (c >= ncells) return set_forged_error(), -1;
      h = c == gcell ? g : (gbits | c);
    } else if (hx == 0) {
      h = g;
    } else if ((hx & kTagMask) == with_tag && kg == hnd::kList) {
      // a stencil's cells against a statistic over them (a blurred image minus its mean):
      // the statistic when it holds them all
      if (!ar.check(hx)) return set_handle_error(hx), -1;
      bool held;
      if (dense) {  // an interval: the own cells by their ends, the shared set once per entry
        if (hnd::with_entry_bits(hx) != dense_bits) {
          const dslog::WithNode& w = ar.with_node(hx);
          dense_bits = hnd::with_entry_bits(hx);
          dense_max = w.max_rel();
          dense_shared_ok = w.shared == 0 || w.shared == g || ar.covers_set(g, w.shared);
        }
        const uint64_t c = hnd::with_cell(hx);
        held = dense_shared_ok && c >= dense_lo && c + dense_max <= dense_hi;
      } else {
        held = ar.with_covered(g, hx);
      }
      h = held ? g : ar.join(hx, g);
    } else if ((hx & kTagMask) == with_tag && hnd::with_entry_bits(hx) == in_bits) {
      const uint64_t c = hnd::with_cell(hx);
      if (c + out_max >= ncells) return set_forged_error(), -1;
      h = out_bits | c;
    } else {
      if (!ar.check(hx)) return set_handle_error(hx), -1;
      h = 0;
      if (hnd::kind(hx) == hnd::kCellSet) {
        const dslog::WithNode w = ar.with_node(hx);  // a copy: the table may grow below
        const Handle sh = w.shared == 0 ? g : ar.join(w.shared, g);
        const Handle bits = ar.with_bits(sh, w.rel, w.nrel);
        if (bits != 0) {
          in_bits = hnd::with_entry_bits(hx);
          out_bits = bits;
          out_max = w.max_rel();
          h = bits | hnd::with_cell(hx);
        }
      }
      if (h == 0) h = ar.join(hx, g);
    }
    store(out, v, h);
  }
  return 0;
}

// A cell, two cells or kind 7: a handle the stencil path unites by offsets. Its epoch and
// table index are checked where its entry is first met (a miss of the stencil memo, whose key
// holds them), its cells per element.
inline bool cell_like_kind(Handle h) {
  const auto k = hnd::kind(h);
  return h != 0 && (k == hnd::kCell || k == hnd::kCell2 || k == hnd::kCellSet);
}

// The first cell of a cell-like handle and the handle without it (`entry | cell` rebuilds it).
inline uint64_t cell_of(Handle h) {
  return hnd::kind(h) == hnd::kCellSet ? hnd::with_cell(h) : hnd::payload(h);
}
inline Handle entry_of(Handle h) {
  return hnd::kind(h) == hnd::kCellSet ? hnd::with_entry_bits(h) : (h & ~hnd::kPayloadMask);
}

// The stencil unions of arith_fast_op: (bits of x, bits of y, distance) -> the union's bits
// (its first cell is the smaller of x's and y's) and its largest offset. Direct-mapped: a
// 3×3 blur meets one interior shape and a few edge shapes per call.
struct StencilMemo {
  struct Slot {
    Handle kx = 0, ky = 0;
    int64_t delta = 0;
    Handle bits = 0;  // 0 with `failed`: no entry for this union (a lazy union instead)
    uint64_t max = 0;
    bool hit = false;
    bool failed = false;
    void set(Handle b, uint64_t m) {
      bits = b;
      max = m;
    }
  };
  static constexpr size_t kSlots = 64;
  // Filled on first use: most calls (anything but a stencil) never look a union up, and a
  // reduction along an axis calls the loop once per row.
  std::optional<std::array<Slot, kSlots>> table;
  Slot& slot(Handle kx, Handle ky, int64_t delta) {
    if (!table) table.emplace();
    std::array<Slot, kSlots>& slots = *table;
    const uint64_t k = (kx * 0x9E3779B97F4A7C15ull) ^ (ky * 0xC2B2AE3D27D4EB4Full) ^
                       (uint64_t(delta) * 0x165667B19E3779F9ull);
    Slot& s = slots[size_t(k >> 58) & (kSlots - 1)];
    s.hit = (s.bits != 0 || s.failed) && s.kx == kx && s.ky == ky && s.delta == delta;
    if (!s.hit) {
      s.kx = kx;
      s.ky = ky;
      s.delta = delta;
      s.bits = 0;
      s.failed = false;
    }
    return s;
  }
};

template <BinInline OP, bool in_place>
__attribute__((noinline)) int arith_fast_op(Arena& ar, const char* a, const char* b, char* o, npy_intp n, npy_intp sa,
                  npy_intp sb, npy_intp so) {
  const uint64_t ep = ar.epoch();
  constexpr uint64_t kTagMask = ~((uint64_t(1) << hnd::kKindShift) - 1);
  const uint64_t cell_bits = (ep << hnd::kEpochShift) | (uint64_t(hnd::kCell) << hnd::kKindShift);
  if (in_place) {
    if (n >= 2 && row_reduce<OP>(ar, b, o, n, sb, so)) return 0;
    const uint64_t prog_bits = (ep << hnd::kEpochShift) | (uint64_t(hnd::kProg) << hnd::kKindShift);
    const size_t own_from = ar.call_prog_start();
    const size_t own_count = ar.n_progs() - own_from;  // this call's progressions so far
    constexpr size_t kBlockMask = (size_t(1) << Arena::kProgBlockShift) - 1;
    size_t block = ~size_t(0);
    dslog::ProgNode* base = nullptr;
    for (npy_intp i = 0; i < n; ++i) {
      char* out = o + i * so;
      __builtin_prefetch(b + (i + kPrefetch) * sb);
      const TF x = load(out), y = load(b + i * sb);
      const double v = arith_value<OP>(x.v, y.v);
      const size_t pi = hnd::payload(x.h);
      if ((y.h & kTagMask) == cell_bits && (x.h & kTagMask) == prog_bits &&
          pi - own_from < own_count) {  // unsigned: own_from <= pi < n_progs
        if ((pi & ~kBlockMask) != block) {
          block = pi & ~kBlockMask;
          base = ar.prog_node(block);
        }
        dslog::ProgNode* p = base + (pi & kBlockMask);
        if (p->acc && hnd::payload(y.h) == p->next) {
          p->next = p->next + p->stride;
          std::memcpy(out, &v, sizeof v);  // in place: the handle stays
          continue;
        }
      }
      if (arith_slow<true>(ar, x, y, v, out) < 0) return -1;
    }
    return 0;
  }
  if (n >= 2 && (sa == 0) != (sb == 0) && !(sa == 0 ? a == o : b == o)) {
    const int rc = broadcast_op<OP>(ar, a, b, o, n, sa, sb, so, sb == 0);
    if (rc <= 0) return rc;
  }
  const uint64_t cell2_bits = (ep << hnd::kEpochShift) | (uint64_t(hnd::kCell2) << hnd::kKindShift);
  const uint64_t ncells = ar.n_cells();  // cell ids at or above it are forged
  // UINT64_MAX: no distance yet (a real one is > 0 and < 2^34; two equal cells give 0)
  uint64_t dist = ar.last_delta_index() < 0 ? ~uint64_t(0) : ar.last_delta();
  uint64_t dist_bits =
      cell2_bits | (uint64_t(std::max(ar.last_delta_index(), 0)) << hnd::kEstShift);
  StatCache sx, sy;
  const uint64_t with_tag =
      (ep << hnd::kEpochShift) | (uint64_t(hnd::kCellSet) << hnd::kKindShift);
  StencilMemo stencil;
  Handle pass_bits = 0;  // the last kind-7 entry passed through with a constant, checked
  uint64_t pass_max = 0;
  auto run = [&](auto nt) -> int {
    constexpr bool kNT = decltype(nt)::value;
    npy_intp start = 0;
#ifdef DSLOG_AVX2
    // Two contiguous annotated operands (cells advancing by one): the vector kernel.
    if (n >= 8 && sa == 16 && sb == 16 && so == 16 && has_avx2()) {
      const TF x0 = load(a), y0 = load(b);
      if ((x0.h & kTagMask) == cell_bits && (y0.h & kTagMask) == cell_bits) {
        const uint64_t cx = hnd::payload(x0.h), cy = hnd::payload(y0.h);
        const Handle h2 = ar.join_cells(cx, cy);
        // Every cell of the run is an input cell (cx + i, cy + i < n_cells for i < lim), so
        // the kCell2 handles written are valid; bytes that are not (forged) go to the
        // scalar loop, which checks.
        const uint64_t hi = std::max(cx, cy), nc = ar.n_cells();
        if (hnd::kind(h2) == hnd::kCell2 && hi < nc) {
          const npy_intp lim = npy_intp(std::min<uint64_t>(uint64_t(n), nc - hi));
          start = seq_run_avx2<OP, kNT>(a, b, o, lim, x0.h, y0.h, h2);
          dist = cx < cy ? cy - cx : cx - cy;
          dist_bits = h2 & ~hnd::kPayloadMask;
        }
      }
    }
#endif
    Handle prev_x = 0, prev_y = 0;  // the last two-cell element's operands
    for (npy_intp i = start; i < n; ++i) {
      char* out = o + i * so;
      const TF x = load(a + i * sa), y = load(b + i * sb);
      const double v = arith_value<OP>(x.v, y.v);
      if ((y.h & kTagMask) == cell_bits && (x.h & kTagMask) == cell_bits) {
        const uint64_t cx = hnd::payload(x.h), cy = hnd::payload(y.h);
        const uint64_t lo = cx < cy ? cx : cy, d = cx < cy ? cy - cx : cx - cy;
        if (lo + d >= ncells) return set_forged_error(), -1;  // the larger cell id
        if (d == dist) {
          if (kNT)
            store_nt(out, v, dist_bits | lo);
          else
            store(out, v, dist_bits | lo);
          prev_x = x.h;
          prev_y = y.h;
          continue;
        }
        Handle h2 = cx == cy ? x.h : ar.cell2_of(cx, cy);
        if (h2 != 0 && hnd::kind(h2) == hnd::kCell2) {
          dist = d;
          dist_bits = h2 & ~hnd::kPayloadMask;
        } else if (h2 == 0 && (y.h == prev_y || x.h == prev_x)) {
          // No distance left, and one operand repeats from the last element (a row's maximum
          // broadcast over the row, which NumPy may hand over through a buffer rather than
          // with stride 0): the other's cell with the repeated cell as a shared set.
          const bool rep_y = y.h == prev_y;
          const Handle bits = ar.with_bits(rep_y ? y.h : x.h);
          if (bits != 0) h2 = bits | (rep_y ? cx : cy);
        }
        if (h2 == 0) h2 = ar.join_cells(cx, cy);
        prev_x = x.h;
        prev_y = y.h;
        store(out, v, h2);
        continue;
      }
      if ((x.h == 0) != (y.h == 0) && ((x.h | y.h) & kTagMask) == with_tag) {
        // a stencil's cells and a constant (a blur's / 9.0): the handle passes through,
        // checked by its largest cell once its entry is known
        const Handle hh = x.h | y.h;
        if (hnd::with_entry_bits(hh) != pass_bits) {
          if (!ar.check(hh)) return set_handle_error(hh), -1;
          pass_bits = hnd::with_entry_bits(hh);
          pass_max = ar.cell_like_max(hh);
        }
        if (hnd::with_cell(hh) + pass_max >= ncells) return set_forged_error(), -1;
        if (kNT)
          store_nt(out, v, hh);
        else
          store(out, v, hh);
        continue;
      }
      if (!ar.withs_full() && cell_like_kind(x.h) && cell_like_kind(y.h)) {
        // A stencil (a sum of shifted slices): cells named by offsets from the first, one
        // table entry per shape of the neighbourhood, decided once per distinct pair of
        // entries and distance (a small memo), checked per element by the largest cell.
        const uint64_t cx = cell_of(x.h), cy = cell_of(y.h);
        const int64_t delta = int64_t(cy - cx);
        StencilMemo::Slot& sl = stencil.slot(entry_of(x.h), entry_of(y.h), delta);
        if (sl.hit && sl.failed) {  // too many cells for an entry: as before, checked there
          if (arith_slow<false>(ar, x, y, v, out) < 0) return -1;
          continue;
        }
        if (!sl.hit) {
          if (!ar.check(x.h)) return set_handle_error(x.h), -1;
          if (!ar.check(y.h)) return set_handle_error(y.h), -1;
          const Handle u = ar.cell_like_union(x.h, y.h);
          if (u == 0) {
            sl.failed = true;
            if (arith_slow<false>(ar, x, y, v, out) < 0) return -1;
            continue;
          }
          sl.set(entry_of(u), ar.cell_like_max(u));
        }
        const uint64_t c = cx < cy ? cx : cy;
        if (c + sl.max >= ncells) return set_forged_error(), -1;
        if (kNT)
          store_nt(out, v, sl.bits | c);
        else
          store(out, v, sl.bits | c);
        continue;
      }
      {
        const bool xc = (x.h & kTagMask) == cell_bits, yc = (y.h & kTagMask) == cell_bits;
        Handle keep = 0;
        if (xc != yc && (xc ? y.h : x.h) != 0) {  // a cell and a statistic holding it
          const Handle big = xc ? y.h : x.h;
          if ((sx.has(big) || sx.fill(ar, big)) && sx.holds(big, hnd::payload(xc ? x.h : y.h)))
            keep = big;
        } else if (!xc && x.h && y.h) {  // one progression from two reductions
          if ((sx.has(x.h) || sx.fill(ar, x.h)) && (sy.has(y.h) || sy.fill(ar, y.h)) &&
              sx.stride == sy.stride && sx.count == sy.count && sx.first(x.h) == sy.first(y.h))
            keep = x.h;
        }
        if (keep) {
          if (kNT)
            store_nt(out, v, keep);
          else
            store(out, v, keep);
          continue;
        }
      }
      if (arith_slow<false>(ar, x, y, v, out) < 0) return -1;
    }
    return 0;
  };
  // Streaming needs an output that does not overlap the inputs (it is written around the
  // cache while they are read through it; an in-place call takes the other branch anyway).
  if (streamable(o, n, so)) {
    const int rc = run(std::true_type{});
    stream_fence();
    return rc;
  }
  return run(std::false_type{});
}

int arith_fast(BinInline op, bool in_place, Arena& ar, const char* a, const char* b, char* o,
               npy_intp n, npy_intp sa, npy_intp sb, npy_intp so) {
  switch (op) {
    case I_ADD:
      return in_place ? arith_fast_op<I_ADD, true>(ar, a, b, o, n, sa, sb, so)
                      : arith_fast_op<I_ADD, false>(ar, a, b, o, n, sa, sb, so);
    case I_SUB:
      return in_place ? arith_fast_op<I_SUB, true>(ar, a, b, o, n, sa, sb, so)
                      : arith_fast_op<I_SUB, false>(ar, a, b, o, n, sa, sb, so);
    case I_MUL:
      return in_place ? arith_fast_op<I_MUL, true>(ar, a, b, o, n, sa, sb, so)
                      : arith_fast_op<I_MUL, false>(ar, a, b, o, n, sa, sb, so);
    default:
      return in_place ? arith_fast_op<I_DIV, true>(ar, a, b, o, n, sa, sb, so)
                      : arith_fast_op<I_DIV, false>(ar, a, b, o, n, sa, sb, so);
  }
}

// The value of a picking reduction (maximum/minimum/fmax/fmin) of a lane of `n` tracked
// elements `sb` bytes apart into the accumulator value `v`: NumPy's own float64 loop called
// once on the whole lane, as NumPy calls it for a float64 array. Its SIMD reduction may return
// either zero of a (0.0, -0.0) tie depending on where the zeros sit in its vectors, so the
// lane is laid out as the float64 array would be: contiguous, or with the same element step
// (a tracked element is 16 bytes, a float64 8).
//
// With `ar` (contributing mode), the same pass checks every handle (a cell inline, anything
// else by the arena; the first invalid one in `*bad`) and leaves the lane's values in `*vals`
// (`*vstep` apart), so the caller finds the picked cells without reading the lane again.
double pick_reduce_value(const BinInfo& info, double v, const char* b, npy_intp n, npy_intp sb,
                         const Arena* ar = nullptr, Handle* bad = nullptr,
                         const double** vals = nullptr, npy_intp* vstep = nullptr) {
  constexpr npy_intp kMaxStep = 8;
  const npy_intp step = (sb > 0 && sb % 16 == 0 && sb / 16 <= kMaxStep) ? sb / 16 : 1;
  // One buffer per thread, grown on demand: a reduction over many lanes (np.max(x, axis=1))
  // calls this once per lane and must not allocate each time.
  thread_local std::vector<double> buf;
  const size_t need = static_cast<size_t>(n > 0 ? (n - 1) * step + 1 : 0);
  if (buf.size() < need) buf.resize(need);
  if (ar != nullptr) {
    constexpr uint64_t kTagMask = ~((uint64_t(1) << hnd::kKindShift) - 1);
    const uint64_t cell_bits =
        (uint64_t(ar->epoch()) << hnd::kEpochShift) | (uint64_t(hnd::kCell) << hnd::kKindShift);
    const uint64_t ncells = ar->n_cells();
    double* d = buf.data();
    for (npy_intp i = 0; i < n; ++i) {
      const TF x = load(b + i * sb);
      d[i * step] = x.v;
      if (x.h && !((x.h & kTagMask) == cell_bits && hnd::payload(x.h) < ncells) &&
          !ar->check(x.h)) {
        *bad = x.h;
        return v;
      }
    }
    *vals = d;
    *vstep = step;
  } else {
    for (npy_intp i = 0; i < n; ++i) buf[static_cast<size_t>(i * step)] = load_v(b + i * sb);
  }
  char* args[3] = {reinterpret_cast<char*>(&v), reinterpret_cast<char*>(buf.data()),
                   reinterpret_cast<char*>(&v)};
  npy_intp d[1] = {n};
  npy_intp st[3] = {0, npy_intp(8) * step, 0};
  info.f64.fn(args, d, st, info.f64.data);
  return v;
}

// The first cell of a lane (values `step` apart) that a sequential pick from `cur` keeps, as
// the element loop of binary_impl decides it (-1: none), and whether a later cell ties it.
template <BinInline OP>
npy_intp pick_winner_op(const double* d, npy_intp step, npy_intp n, double cur, bool& tied) {
  npy_intp win = -1;
  tied = false;
  for (npy_intp i = 0; i < n; ++i) {
    const double x = d[i * step];
    if (second_wins(OP, cur, x)) {
      cur = x;
      win = i;
      tied = false;
    } else if (x == cur) {
      tied = true;
    }
  }
  return win;
}
npy_intp pick_winner(BinInline op, const double* d, npy_intp step, npy_intp n, double cur,
                     bool& tied) {
  switch (op) {
    case I_MAX:
      return pick_winner_op<I_MAX>(d, step, n, cur, tied);
    case I_MIN:
      return pick_winner_op<I_MIN>(d, step, n, cur, tied);
    case I_FMAX:
      return pick_winner_op<I_FMAX>(d, step, n, cur, tied);
    default:
      return pick_winner_op<I_FMIN>(d, step, n, cur, tied);
  }
}

int binary_impl(const BinInfo& info, char* const* data, const npy_intp* dims,
                const npy_intp* strides) {
  npy_intp n = dims[0];
  char *a = data[0], *b = data[1], *o = data[2];
  npy_intp sa = strides[0], sb = strides[1], so = strides[2];
  Arena* ar = t_arena;
  try {
    if (a == o && sa == 0 && so == 0) {
      // Reduction into one accumulator: values exactly as NumPy's float64 loop, the set is
      // appended to in place (amortised O(1) per annotation).
      TF acc = load(o);
      double v = acc.v;
      const double* lane = nullptr;  // the lane's values, when pick_reduce_value kept them
      npy_intp lane_step = 1;
      if (info.pairwise) {
        double s = pairwise_sum(b, n, sb);
        v = info.op == I_SUB ? v - s : v + s;
      } else if (info.kind == B_PICK && info.f64.fn != nullptr) {
        if (ar && ar->mode() == dslog::Mode::kContributing) {
          Handle bad = 0;
          v = pick_reduce_value(info, v, b, n, sb, ar, &bad, &lane, &lane_step);
          if (bad) return set_handle_error(bad), -1;
        } else {
          v = pick_reduce_value(info, v, b, n, sb);
        }
      } else if (info.kind == B_PICK || info.op != I_NONE) {
        for (npy_intp i = 0; i < n; ++i) {
          double x = load_v(b + i * sb);
          v = info.kind == B_PICK ? (second_wins(info.op, v, x) ? x : v)
                                  : inline_value(info.op, v, x);
        }
      } else {
        double buf[kChunk];
        for (npy_intp s = 0; s < n; s += kChunk) {
          npy_intp m = std::min(kChunk, n - s);
          for (npy_intp i = 0; i < m; ++i) buf[i] = load_v(b + (s + i) * sb);
          char* args[3] = {reinterpret_cast<char*>(&v), reinterpret_cast<char*>(buf),
                           reinterpret_cast<char*>(&v)};
          npy_intp d[1] = {m};
          npy_intp st[3] = {0, 8, 0};
          info.f64.fn(args, d, st, info.f64.data);
        }
      }
      Handle h = acc.h;
      double cur = acc.v;
      if (info.kind == B_PICK && ar && ar->mode() == dslog::Mode::kContributing) {
        // Contributing mode keeps only the picked cells' sets (NumPy's float rules; every
        // cell comparing equal to the pick, a NaN never tying): the lane is scanned for the
        // first winner and its handle shared once, instead of an arena call per element; only
        // when a later cell ties it does a second pass join the tied cells. Every handle is
        // still validated, as the element loop below does (a cell inline, anything else by
        // the arena).
        constexpr uint64_t kTagMask = ~((uint64_t(1) << hnd::kKindShift) - 1);
        const uint64_t cell_bits =
            (uint64_t(ar->epoch()) << hnd::kEpochShift) | (uint64_t(hnd::kCell) << hnd::kKindShift);
        const uint64_t ncells = ar->n_cells();
        if (n > 0 && h && !ar->check(h)) return set_handle_error(h), -1;
        npy_intp win = -1;
        bool tied = false;  // a cell after the winner compares equal to it
        if (lane != nullptr) {  // values kept, handles checked: the scan reads 8 bytes a cell
          win = pick_winner(info.op, lane, lane_step, n, cur, tied);
          if (win >= 0) cur = lane[win * lane_step];
        } else {
          for (npy_intp i = 0; i < n; ++i) {
            const TF x = load(b + i * sb);
            if (x.h && !((x.h & kTagMask) == cell_bits && hnd::payload(x.h) < ncells) &&
                !ar->check(x.h))
              return set_handle_error(x.h), -1;
            if (second_wins(info.op, cur, x.v)) {
              cur = x.v;
              win = i;
              tied = false;
            } else if (x.v == cur) {
              tied = true;
            }
          }
        }
        if (win >= 0) {
          const Handle xw = load(b + win * sb).h;
          if (h | xw) ar->acc_pick(h, xw, true, 0);
        }
        if (tied) {
          for (npy_intp i = win + 1; i < n; ++i) {
            const TF x = load(b + i * sb);
            if (x.v == cur && x.h) ar->acc_join(h, x.h, size_t(n - i));
          }
        }
        store(o, v, h);
        return 0;
      }
      Handle prev = 0;  // the last element's handle joined into h (acc_join_next)
      for (npy_intp i = 0; i < n; ++i) {
        TF x = load(b + i * sb);
        if (info.kind != B_PICK && ar && hnd::epoch(x.h) == ar->epoch() &&
            hnd::epoch(h) == ar->epoch() && ar->prog_extend(h, x.h))
          continue;
        if (info.kind == B_PICK) {
          // a reduction passes every cell comparing equal to its result (0.0 == -0.0; a NaN
          // never ties): NumPy's value, NumPy's float rules for which cell wins
          const bool w = second_wins(info.op, cur, x.v);
          const bool tie = !w && x.v == cur;
          if (w) cur = x.v;
          if ((h | x.h) == 0) continue;
          if (!ar || !handle_ok(h) || !handle_ok(x.h))
            return set_handle_error(first_bad({h, x.h})), -1;
          ar->acc_pick(h, x.h, w, size_t(n - i), tie);
        } else {
          if (x.h == 0) continue;
          if (x.h == prev + 1 && hnd::kind(x.h) == hnd::kCellSet && ar &&
              ar->acc_join_next(h, x.h, prev)) {
            prev = x.h;
            continue;
          }
          if (!ar || !handle_ok(h) || !handle_ok(x.h))
            return set_handle_error(first_bad({h, x.h})), -1;
          ar->acc_join(h, x.h, size_t(n - i));
          prev = x.h;
        }
      }
      store(o, v, h);
      return 0;
    }
    bool in_place = (a == o && sa == so);
    // accumulate() calls with out[i] = op(out[i-1], in[i]): the output overlaps an input at a
    // shifted position, so each element must see the previous result (no gathering ahead).
    auto shifted = [&](const char* p, npy_intp sp) {
      if (p == o && sp == so) return false;
      const char* lo = std::min(p, p + (n - 1) * sp);
      const char* hi = std::max(p, p + (n - 1) * sp) + 16;
      const char* olo = std::min<const char*>(o, o + (n - 1) * so);
      const char* ohi = std::max<const char*>(o, o + (n - 1) * so) + 16;
      return lo < ohi && olo < hi;
    };
    const bool any_shifted = shifted(a, sa) || shifted(b, sb);
    if (!any_shifted && info.kind == B_ARITH && info.op != I_NONE && ar)
      return arith_fast(info.op, in_place, *ar, a, b, o, n, sa, sb, so);
    const npy_intp chunk = any_shifted ? 1 : kChunk;
    double va[kChunk], vb[kChunk], vo[kChunk];
    Handle ha[kChunk], hb[kChunk];
    for (npy_intp s = 0; s < n; s += chunk) {
      npy_intp m = std::min(chunk, n - s);
      for (npy_intp i = 0; i < m; ++i) {
        TF x = load(a + (s + i) * sa), y = load(b + (s + i) * sb);
        va[i] = x.v;
        vb[i] = y.v;
        ha[i] = x.h;
        hb[i] = y.h;
      }
      bin_values(info, va, vb, vo, m);
      for (npy_intp i = 0; i < m; ++i) {
        Handle x = ha[i], y = hb[i], h = 0;
        if (x | y) {
          if (!ar || !handle_ok(x) || !handle_ok(y))
            return set_handle_error(first_bad({x, y})), -1;
          if (info.kind == B_PICK) {
            // operands comparing equal (0.0 == -0.0; a NaN never ties) are both picked;
            // otherwise in place (a reduction along a strided axis, `out=` the first
            // operand) NumPy's float rules pick, as in a whole-lane reduction, and else the
            // operand with the bits NumPy's loop returned
            const bool tie = va[i] == vb[i];
            bool w = in_place ? second_wins(info.op, va[i], vb[i])
                              : picked_second(info.op, va[i], vb[i], vo[i]);
            if (in_place) {
              h = x;
              ar->acc_pick(h, y, w, 0, tie);
            } else {
              h = w ? ar->pick(y, x, tie) : ar->pick(x, y, tie);
            }
          } else if (in_place) {
            h = x;
            ar->acc_join(h, y, 0);
          } else {
            h = ar->join(x, y);
          }
        }
        store(o + (s + i) * so, vo[i], h);
      }
    }
    return 0;
  } catch (...) {
    set_cpp_error();
    return -1;
  }
}

void install_elementwise_fast_path(PyUFuncObject* uf);  // below: no zero-fill of outputs

constexpr int kMaxBin = 32;
BinInfo g_bin[kMaxBin];
int g_nbin = 0;

template <int I>
int bin_loop(PyArrayMethod_Context*, char* const data[], const npy_intp dims[],
             const npy_intp strides[], NpyAuxData*) {
  return binary_impl(g_bin[I], data, dims, strides);
}

template <int I>
int bin_get_loop(PyArrayMethod_Context*, int, int, const npy_intp*,
                 PyArrayMethod_StridedLoop** out_loop, NpyAuxData** out_aux,
                 NPY_ARRAYMETHOD_FLAGS* flags) {
  if (t_arena) t_arena->begin_call();
  *out_loop = &bin_loop<I>;
  *out_aux = nullptr;
  *flags = NPY_METH_REQUIRES_PYAPI;
  return 0;
}

template <int I>
int bin_initial(PyArrayMethod_Context*, npy_bool, void* initial) {
  int id = g_bin[I].identity;
  if (id == 0) return 0;
  store(static_cast<char*>(initial), id == 1 ? 0.0 : 1.0, 0);
  return 1;
}

int promoter(PyObject* ufunc, PyArray_DTypeMeta* const op_dtypes[],
             PyArray_DTypeMeta* const signature[], PyArray_DTypeMeta* new_op_dtypes[]) {
  int nargs = reinterpret_cast<PyUFuncObject*>(ufunc)->nargs;
  (void)op_dtypes;
  for (int i = 0; i < nargs; ++i) {
    PyArray_DTypeMeta* d = signature[i] ? signature[i] : g_dtmeta;
    Py_INCREF(d);
    new_op_dtypes[i] = d;
  }
  return 0;
}

template <int I>
void register_binary(const char* name, BinKind kind, BinInline op, bool pairwise, int identity,
                     bool reorderable) {
  static_assert(I < kMaxBin, "too many binary loops");
  PyUFuncObject* uf = get_ufunc(name);
  BinInfo& info = g_bin[I];
  info = BinInfo{name, kind, op, pairwise, identity, reorderable, find_f64_loop(uf)};
  PyArray_DTypeMeta* dtypes[3] = {g_dtmeta, g_dtmeta, g_dtmeta};
  PyType_Slot slots[] = {{NPY_METH_get_loop, reinterpret_cast<void*>(&bin_get_loop<I>)},
                         {NPY_METH_get_reduction_initial, reinterpret_cast<void*>(&bin_initial<I>)},
                         {0, nullptr}};
  int flags = NPY_METH_REQUIRES_PYAPI | (reorderable ? NPY_METH_IS_REORDERABLE : 0);
  std::string spec_name = std::string("tracked_float_") + name;
  PyArrayMethod_Spec spec{spec_name.c_str(), 2, 1, NPY_NO_CASTING,
                          NPY_ARRAYMETHOD_FLAGS(flags), dtypes, slots};
  if (PyUFunc_AddLoopFromSpec(reinterpret_cast<PyObject*>(uf), &spec) < 0)
    throw py::error_already_set();
  PyObject* any = reinterpret_cast<PyObject*>(&PyArrayDescr_Type);
  PyObject* dt = reinterpret_cast<PyObject*>(g_dtmeta);
  for (int side = 0; side < 2; ++side) {
    PyObject* tup = side == 0 ? PyTuple_Pack(3, dt, any, any) : PyTuple_Pack(3, any, dt, any);
    PyObject* cap = PyCapsule_New(reinterpret_cast<void*>(&promoter), "numpy._ufunc_promoter",
                                  nullptr);
    if (!tup || !cap || PyUFunc_AddPromoter(reinterpret_cast<PyObject*>(uf), tup, cap) < 0) {
      Py_XDECREF(tup);
      Py_XDECREF(cap);
      throw py::error_already_set();
    }
    Py_DECREF(tup);
    Py_DECREF(cap);
  }
  ++g_nbin;
  install_elementwise_fast_path(uf);
}

void register_legacy(const char* name, PyUFuncGenericFunction fn, std::vector<int> types,
                     void* data) {
  PyUFuncObject* uf = get_ufunc(name);
  if (int(types.size()) != uf->nargs)
    throw std::runtime_error(std::string("numpy.") + name + ": unexpected number of operands");
  if (PyUFunc_RegisterLoopForType(uf, g_typenum, fn, types.data(), data) < 0)
    throw py::error_already_set();
}

std::vector<std::unique_ptr<UnaryInfo>> g_unary_infos;

void register_unary(const char* name, UnaryInline op) {
  PyUFuncObject* uf = get_ufunc(name);
  auto info = std::make_unique<UnaryInfo>();
  info->op = op;
  if (op == U_DELEGATE) info->f64 = find_f64_loop(uf);
  register_legacy(name, &unary_loop, {g_typenum, g_typenum}, info.get());
  g_unary_infos.push_back(std::move(info));
  install_elementwise_fast_path(uf);
}

// ---------------------------------------------------------------------------------------------
// Uninitialised outputs for plain element-wise calls
//
// The descriptor has NPY_NEEDS_INIT, so NumPy zero-fills (calloc) every new tracked_float array:
// np.empty, empty_like, ndarray(shape, dtype), and the cells a `where=` mask leaves unwritten
// then hold 0.0 without lineage instead of garbage handles (which could name cells of this
// capture: exact lineage, no crash). For an ordinary ufunc output that costs a second pass
// over 16 bytes per cell; at 1M cells it is as long as the negation itself.
//
// So the ufuncs whose tracked loop produces tracked_float get a vectorcall in front of
// NumPy's that skips the zero-fill in exactly one situation, where every output cell is
// provably written by our inner loop before anyone can read it: a capture is running, the
// call is `ufunc(a, b)` with nin positional operands and no keywords (no out=, where=,
// dtype=, ...), every operand is an exact ndarray of tracked_float that is C-contiguous,
// aligned, of one common shape (so NumPy's own output would be C-contiguous of that shape)
// or a Python float/int, and the output is large. Then we allocate the output ourselves
// with NEEDS_INIT switched off for just that allocation (only our C code runs in between,
// with the GIL held) and pass it as out=. NumPy runs the unmasked loop over all of it; if the
// call fails, the half-written output is released with our reference and never escapes.
// Every other call, and every other way to create a tracked array, still zero-fills.
// ---------------------------------------------------------------------------------------------
constexpr npy_intp kNoInitMin = npy_intp(1) << 14;  // cells; smaller outputs: calloc is cheap
vectorcallfunc g_ufunc_vectorcall = nullptr;        // NumPy's (the same for every ufunc)
PyObject* g_out_kwnames = nullptr;                  // ("out",)

// A tracked_float array like `like` (C order) whose cells are not zero-filled.
PyObject* new_uninitialised(PyArrayObject* like) {
  struct Restore {
    npy_uint64 flags;
    ~Restore() { g_descr->flags = flags; }
  } restore{g_descr->flags};
  g_descr->flags &= ~npy_uint64(NPY_NEEDS_INIT);
  Py_INCREF(g_descr);
  return PyArray_NewFromDescr(&PyArray_Type, g_descr, PyArray_NDIM(like), PyArray_DIMS(like),
                              nullptr, nullptr, 0, nullptr);
}

PyObject* elementwise_vectorcall(PyObject* callable, PyObject* const* args, size_t nargsf,
                                 PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  const auto* uf = reinterpret_cast<const PyUFuncObject*>(callable);
  if (t_arena && kwnames == nullptr && nargs == uf->nin && uf->nout == 1 && nargs <= 2) {
    PyArrayObject* like = nullptr;
    bool ok = true;
    for (Py_ssize_t i = 0; i < nargs && ok; ++i) {
      PyObject* a = args[i];
      if (PyArray_CheckExact(a)) {
        auto* arr = reinterpret_cast<PyArrayObject*>(a);
        ok = PyArray_DESCR(arr) == g_descr && PyArray_NDIM(arr) > 0 &&
             PyArray_IS_C_CONTIGUOUS(arr) && PyArray_ISALIGNED(arr) &&
             (like == nullptr || PyArray_SAMESHAPE(like, arr));
        like = arr;
      } else {
        // a Python number, or a tracked scalar (x - x.mean()): broadcast to every cell
        ok = PyFloat_CheckExact(a) || PyLong_CheckExact(a) || Py_TYPE(a) == g_scalar_type;
      }
    }
    if (ok && like != nullptr && PyArray_SIZE(like) >= kNoInitMin) {
      PyObject* out = new_uninitialised(like);
      if (out == nullptr) return nullptr;
      PyObject* full[3] = {args[0], nargs > 1 ? args[1] : out, out};
      PyObject* res = g_ufunc_vectorcall(callable, full, size_t(nargs), g_out_kwnames);
      Py_DECREF(out);  // on success `res` is `out` (NumPy returns out= itself)
      return res;
    }
  }
  return g_ufunc_vectorcall(callable, args, nargsf, kwnames);
}

void install_elementwise_fast_path(PyUFuncObject* uf) {
  if (uf->nout != 1 || uf->nin > 2 || uf->vectorcall == nullptr) return;
  if (g_ufunc_vectorcall == nullptr) g_ufunc_vectorcall = uf->vectorcall;
  // Only in front of NumPy's own entry point (never stack on someone else's hook).
  if (uf->vectorcall != g_ufunc_vectorcall) return;
  if (g_out_kwnames == nullptr) {
    g_out_kwnames = Py_BuildValue("(s)", "out");
    if (g_out_kwnames == nullptr) throw py::error_already_set();
  }
  uf->vectorcall = &elementwise_vectorcall;
}

// ---------------------------------------------------------------------------------------------
// ndarray.partition / argpartition / argsort on tracked_float
//
// NumPy has no partition hook for user dtypes (PyArray_Partition falls back to a generic
// quicksort through `compare`, which neither records compared cells nor arranges values as
// float64's introselect does), and argsort/argpartition would order ties (0.0 and -0.0) by
// that generic quicksort, not as float64 does. So these three ndarray methods are wrapped
// once, at import: for a tracked_float array, partition runs NumPy's own float64 partition
// (same arguments) on the values and matches elements by bits (see "Sorting family"), and
// argsort/argpartition return NumPy's float64 indices of the values (indices carry no
// lineage). Any other array goes straight to NumPy's method, arguments untouched.
// ---------------------------------------------------------------------------------------------
PyObject* g_orig_partition = nullptr;
PyObject* g_position_hook_fwd();  // the Positions hook (below), or null
PyObject* call_hook(const char* name, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                    PyObject* kwnames);
PyObject* g_orig_argpartition = nullptr;
PyObject* g_orig_argsort = nullptr;

// NumPy's own method `orig` called as orig(self, *args, **kw) (vectorcall layout).
PyObject* call_method(PyObject* orig, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                      PyObject* kwnames) {
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  std::vector<PyObject*> full(size_t(nargs + nkw + 1));
  full[0] = self;
  for (Py_ssize_t i = 0; i < nargs + nkw; ++i) full[size_t(i + 1)] = args[i];
  return PyObject_Vectorcall(orig, full.data(), size_t(nargs + 1), kwnames);
}

// A C-order float64 copy of a tracked array's values.
PyObject* f64_values(PyArrayObject* arr) {
  PyObject* c = PyArray_NewCopy(arr, NPY_CORDER);
  if (!c) return nullptr;
  auto* ca = reinterpret_cast<PyArrayObject*>(c);
  PyObject* out = PyArray_SimpleNew(PyArray_NDIM(ca), PyArray_DIMS(ca), NPY_DOUBLE);
  if (out) {
    auto* d = static_cast<double*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(out)));
    const char* src = PyArray_BYTES(ca);
    for (npy_intp i = 0, n = PyArray_SIZE(ca); i < n; ++i) d[i] = load_v(src + i * 16);
  }
  Py_DECREF(c);
  return out;
}

inline bool is_tracked_array(PyObject* self) {
  return PyArray_Check(self) &&
         is_tracked_descr(PyArray_DESCR(reinterpret_cast<PyArrayObject*>(self)));
}

PyObject* tracked_argsort(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                          PyObject* kwnames) {
  if (!is_tracked_array(self)) return call_method(g_orig_argsort, self, args, nargs, kwnames);
  if (g_position_hook_fwd() && t_arena) return call_hook("argsort", self, args, nargs, kwnames);
  PyObject* v = f64_values(reinterpret_cast<PyArrayObject*>(self));
  if (!v) return nullptr;
  PyObject* r = call_method(g_orig_argsort, v, args, nargs, kwnames);
  Py_DECREF(v);
  return r;
}

PyObject* tracked_argpartition(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                               PyObject* kwnames) {
  if (!is_tracked_array(self))
    return call_method(g_orig_argpartition, self, args, nargs, kwnames);
  if (g_position_hook_fwd() && t_arena)
    return call_hook("argpartition", self, args, nargs, kwnames);
  PyObject* v = f64_values(reinterpret_cast<PyArrayObject*>(self));
  if (!v) return nullptr;
  PyObject* r = call_method(g_orig_argpartition, v, args, nargs, kwnames);
  Py_DECREF(v);
  return r;
}

// The `axis` argument of ndarray.partition(kth, axis=-1, kind=..., order=...), already
// validated by NumPy's own call on the values.
int partition_axis(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, int ndim) {
  PyObject* obj = nargs > 1 ? args[1] : nullptr;
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw && !obj; ++i)
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "axis") == 0)
      obj = args[nargs + i];
  int axis = -1;
  if (obj) {
    axis = PyArray_PyIntAsInt(obj);
    if (axis == -1 && PyErr_Occurred()) return INT32_MIN;
  }
  return axis < 0 ? axis + ndim : axis;
}

PyObject* tracked_partition(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                            PyObject* kwnames) {
  if (!is_tracked_array(self)) return call_method(g_orig_partition, self, args, nargs, kwnames);
  auto* arr = reinterpret_cast<PyArrayObject*>(self);
  if (PyArray_FailUnlessWriteable(arr, "partition array") < 0) return nullptr;
  PyObject* v = f64_values(arr);
  if (!v) return nullptr;
  py::object keep = py::reinterpret_steal<py::object>(v);
  PyObject* r = call_method(g_orig_partition, v, args, nargs, kwnames);
  if (!r) return nullptr;
  Py_DECREF(r);
  const int ndim = PyArray_NDIM(arr);
  int axis = partition_axis(args, nargs, kwnames, ndim);
  if (axis == INT32_MIN) return nullptr;
  if (ndim == 0 || axis < 0 || axis >= ndim) Py_RETURN_NONE;  // NumPy accepted: nothing to move
  const npy_intp n = PyArray_DIM(arr, axis);
  if (n <= 1 || PyArray_SIZE(arr) == 0) Py_RETURN_NONE;  // NumPy sorts nothing either
  int ax1 = axis, ax2 = axis;
  PyObject* it_obj = PyArray_IterAllButAxis(self, &ax1);
  if (!it_obj) return nullptr;
  py::object keep_it = py::reinterpret_steal<py::object>(it_obj);
  PyObject* itv_obj = PyArray_IterAllButAxis(v, &ax2);
  if (!itv_obj) return nullptr;
  py::object keep_itv = py::reinterpret_steal<py::object>(itv_obj);
  auto* it = reinterpret_cast<PyArrayIterObject*>(it_obj);
  auto* itv = reinterpret_cast<PyArrayIterObject*>(itv_obj);
  const npy_intp s = PyArray_STRIDE(arr, axis);
  const npy_intp sv = PyArray_STRIDE(reinterpret_cast<PyArrayObject*>(v), axis);
  std::vector<TF> lane(static_cast<size_t>(n));
  std::vector<double> vals(static_cast<size_t>(n));
  while (PyArray_ITER_NOTDONE(it)) {
    char* p = static_cast<char*>(it->dataptr);
    const char* pv = static_cast<const char*>(itv->dataptr);
    for (npy_intp i = 0; i < n; ++i) {
      lane[size_t(i)] = load(p + i * s);
      vals[size_t(i)] = load_v(pv + i * sv);
    }
    if (match_bits(lane, vals.data()) < 0 || consider_lane(lane) < 0) return nullptr;
    for (npy_intp i = 0; i < n; ++i) store(p + i * s, lane[size_t(i)].v, lane[size_t(i)].h);
    PyArray_ITER_NEXT(it);
    PyArray_ITER_NEXT(itv);
  }
  Py_RETURN_NONE;
}

// Replace ndarray.<name> by `fn` (keeping NumPy's docstring); the original is kept in *orig.
void wrap_ndarray_method(const char* name, PyObject** orig, PyMethodDef* def,
                         _PyCFunctionFastWithKeywords fn) {
  PyObject* dict = PyArray_Type.tp_dict;
  PyObject* o = dict ? PyDict_GetItemString(dict, name) : nullptr;
  if (!o) throw std::runtime_error(std::string("numpy.ndarray has no method ") + name);
  Py_INCREF(o);
  *orig = o;
  PyObject* doc = PyObject_GetAttrString(o, "__doc__");
  if (!doc) throw py::error_already_set();
  def->ml_name = name;
  def->ml_meth = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fn));
  def->ml_flags = METH_FASTCALL | METH_KEYWORDS;
  def->ml_doc = PyUnicode_Check(doc) ? PyUnicode_AsUTF8(doc) : nullptr;  // doc kept alive
  PyObject* descr = PyDescr_NewMethod(&PyArray_Type, def);
  if (!descr || PyDict_SetItemString(dict, name, descr) < 0) {
    Py_XDECREF(descr);
    throw py::error_already_set();
  }
  Py_DECREF(descr);
  PyType_Modified(&PyArray_Type);
}

void wrap_sorting_methods() {
  static PyMethodDef defs[3];
  wrap_ndarray_method("partition", &g_orig_partition, &defs[0], &tracked_partition);
  wrap_ndarray_method("argpartition", &g_orig_argpartition, &defs[1], &tracked_argpartition);
  wrap_ndarray_method("argsort", &g_orig_argsort, &defs[2], &tracked_argsort);
}

// ---------------------------------------------------------------------------------------------
// Positions: index-producing methods and indexing with tracked indices (core/positions.py)
//
// Integer results that name positions of a tracked array (nonzero, argmax, argmin, argsort,
// argpartition, searchsorted, and astype to an integer dtype: positions carried as floats)
// and indexing with a tracked index (`x[idx]`, `x.take(idx)`)
// have their lineage built in Python, from NumPy operations on tracked arrays plus one
// primitive below (`positional`). So during a capture these methods and ndarray's subscript
// call a Python hook when a tracked array (or a position array, the hook's own int subclass)
// is involved; every other call goes to NumPy's own code unchanged. With no capture running
// in the calling thread nothing is hooked (a tracked array is then stale anyway, and NumPy's
// own code reports it).
// ---------------------------------------------------------------------------------------------
PyObject* g_position_hook = nullptr;   // callable(name, self, args, kwargs) or null
PyObject* g_position_hook_fwd() { return g_position_hook; }
PyTypeObject* g_positions_type = nullptr;  // core.positions.Positions
binaryfunc g_orig_subscript = nullptr;
objobjargproc g_orig_ass_subscript = nullptr;

constexpr int kHookedMethods = 6;
const char* const kHookedNames[kHookedMethods] = {"nonzero", "argmax",       "argmin",
                                                  "searchsorted", "take", "astype"};
PyObject* g_orig_hooked[kHookedMethods] = {};

// An array whose positions the hook must see: tracked_float, or a position array.
inline bool carries_positions(PyObject* o) {
  if (!PyArray_Check(o)) return false;
  if (is_tracked_descr(PyArray_DESCR(reinterpret_cast<PyArrayObject*>(o)))) return true;
  return g_positions_type && PyObject_TypeCheck(o, g_positions_type);
}

// A plain bool array (a comparison's mask, maybe): the hook decides.
inline bool is_bool_array(PyObject* o) {
  return PyArray_Check(o) && PyArray_TYPE(reinterpret_cast<PyArrayObject*>(o)) == NPY_BOOL;
}

// A key part the hook must see: tracked, positions, or a bool mask (a comparison's, maybe).
inline bool key_part_hooked(PyObject* o) {
  return carries_positions(o) ||
         (PyArray_Check(o) && PyArray_TYPE(reinterpret_cast<PyArrayObject*>(o)) == NPY_BOOL &&
          PyArray_NDIM(reinterpret_cast<PyArrayObject*>(o)) > 0);
}

inline bool key_carries_positions(PyObject* key) {
  if (key_part_hooked(key)) return true;
  if (!PyTuple_Check(key)) return false;
  for (Py_ssize_t i = 0, n = PyTuple_GET_SIZE(key); i < n; ++i)
    if (key_part_hooked(PyTuple_GET_ITEM(key, i))) return true;
  return false;
}

// hook(name, self, args, kwargs) with the vectorcall arguments of a method call; a Python
// error (never a C++ exception) on failure.
PyObject* call_hook(const char* name, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                    PyObject* kwnames) {
  PyObject* pargs = PyTuple_New(nargs);
  if (!pargs) return nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(pargs, i, args[i]);
  }
  PyObject* kw = PyDict_New();
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; kw && i < nkw; ++i)
    if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) Py_CLEAR(kw);
  PyObject* r = kw ? PyObject_CallFunction(g_position_hook, "sOOO", name, self, pargs, kw) : nullptr;
  Py_DECREF(pargs);
  Py_XDECREF(kw);
  return r;
}

template <int K>
PyObject* hooked_method(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                        PyObject* kwnames) {
  bool hook = g_position_hook && t_arena &&
              (is_tracked_array(self) || (K == 0 && is_bool_array(self)));
  // take and searchsorted: a tracked index or needle with any array
  if (!hook && g_position_hook && t_arena && (K == 3 || K == 4))
    for (Py_ssize_t i = 0; i < nargs && !hook; ++i) hook = carries_positions(args[i]);
  if (!hook) return call_method(g_orig_hooked[K], self, args, nargs, kwnames);
  return call_hook(kHookedNames[K], self, args, nargs, kwnames);
}

PyObject* hooked_subscript(PyObject* self, PyObject* key) {
  if (g_position_hook && t_arena && key_carries_positions(key))
    return PyObject_CallFunction(g_position_hook, "sO(O)O", "__getitem__", self, key, Py_None);
  return g_orig_subscript(self, key);
}

int hooked_ass_subscript(PyObject* self, PyObject* key, PyObject* value) {
  // also a position array assigned by a plain key: NumPy would cast its ints to constants
  if (value && g_position_hook && t_arena &&
      (key_carries_positions(key) ||
       (g_positions_type && PyObject_TypeCheck(value, g_positions_type)))) {
    PyObject* r =
        PyObject_CallFunction(g_position_hook, "sO(OO)O", "__setitem__", self, key, value, Py_None);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
  }
  return g_orig_ass_subscript(self, key, value);
}

// Comparisons of tracked arrays: NumPy's bool result is handed to the hook, which records the
// operands the mask was computed from, so the positions of its true cells (`argwhere(x > t)`,
// the DSLog thesis' `where(X > 0.5)`) and indexing with it (`x[x > t]`) carry their lineage.
// The mask itself stays NumPy's plain bool array. Chained in front of whatever vectorcall the
// ufunc had (NumPy's own, or the elementwise fast path).
constexpr int kCompares = 6;
const char* const kCompareNames[kCompares] = {"equal", "not_equal",    "less",
                                              "less_equal", "greater", "greater_equal"};
vectorcallfunc g_orig_compare[kCompares] = {};

template <int K>
PyObject* compare_vectorcall(PyObject* callable, PyObject* const* args, size_t nargsf,
                             PyObject* kwnames) {
  PyObject* res = g_orig_compare[K](callable, args, nargsf, kwnames);
  if (!res || !g_position_hook || !t_arena || !PyArray_CheckExact(res)) return res;
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  bool tracked = false;
  for (Py_ssize_t i = 0; i < nargs && i < 2 && !tracked; ++i) tracked = carries_positions(args[i]);
  if (!tracked) return res;
  PyObject* ops = PyTuple_New(nargs < 2 ? nargs : 2);
  if (!ops) return Py_DECREF(res), nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ops); ++i) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(ops, i, args[i]);
  }
  PyObject* r = PyObject_CallFunction(g_position_hook, "sOOO", "compare", res, ops, Py_None);
  Py_DECREF(ops);
  if (!r) return Py_DECREF(res), nullptr;
  Py_DECREF(r);
  return res;
}

template <int K>
void hook_compare(py::module_& umath) {
  auto* uf = reinterpret_cast<PyUFuncObject*>(umath.attr(kCompareNames[K]).ptr());
  if (uf->vectorcall == nullptr) throw std::runtime_error("a comparison ufunc has no vectorcall");
  g_orig_compare[K] = uf->vectorcall;
  uf->vectorcall = &compare_vectorcall<K>;
}

void wrap_position_methods() {
  py::module_ np = py::module_::import("numpy");
  hook_compare<0>(np);
  hook_compare<1>(np);
  hook_compare<2>(np);
  hook_compare<3>(np);
  hook_compare<4>(np);
  hook_compare<5>(np);
  static PyMethodDef defs[kHookedMethods];
  wrap_ndarray_method(kHookedNames[0], &g_orig_hooked[0], &defs[0], &hooked_method<0>);
  wrap_ndarray_method(kHookedNames[1], &g_orig_hooked[1], &defs[1], &hooked_method<1>);
  wrap_ndarray_method(kHookedNames[2], &g_orig_hooked[2], &defs[2], &hooked_method<2>);
  wrap_ndarray_method(kHookedNames[3], &g_orig_hooked[3], &defs[3], &hooked_method<3>);
  wrap_ndarray_method(kHookedNames[4], &g_orig_hooked[4], &defs[4], &hooked_method<4>);
  wrap_ndarray_method(kHookedNames[5], &g_orig_hooked[5], &defs[5], &hooked_method<5>);
  // ndarray's subscript slots: NumPy's PyMappingMethods is plain (writable) data, shared by
  // every ndarray; subclasses defined later copy the hooked pointers. `ndarray.__getitem__`
  // (the slot wrapper made at NumPy's import) keeps calling NumPy's own function.
  PyMappingMethods* mp = PyArray_Type.tp_as_mapping;
  g_orig_subscript = mp->mp_subscript;
  g_orig_ass_subscript = mp->mp_ass_subscript;
  mp->mp_subscript = &hooked_subscript;
  mp->mp_ass_subscript = &hooked_ass_subscript;
}

// Install the Python hook (core/positions.py) and its position array type, once.
void set_position_hook(py::object hook, py::object positions_type) {
  if (!PyType_Check(positions_type.ptr()) ||
      !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(positions_type.ptr()), &PyArray_Type))
    throw std::invalid_argument("set_position_hook: positions_type must subclass ndarray");
  Py_XDECREF(g_position_hook);
  Py_XDECREF(reinterpret_cast<PyObject*>(g_positions_type));
  g_position_hook = hook.release().ptr();
  g_positions_type = reinterpret_cast<PyTypeObject*>(positions_type.release().ptr());
}

// NumPy's own method `name` (one of the hooked ones, or argsort/argpartition), unhooked.
py::object original_method(const std::string& name) {
  for (int k = 0; k < kHookedMethods; ++k)
    if (name == kHookedNames[k]) return py::reinterpret_borrow<py::object>(g_orig_hooked[k]);
  if (name == "argsort") return py::reinterpret_borrow<py::object>(g_orig_argsort);
  if (name == "argpartition") return py::reinterpret_borrow<py::object>(g_orig_argpartition);
  throw std::invalid_argument("original_method: not a hooked method: " + name);
}

// ---------------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------------

// np.finfo(tracked_float) is float64's: NumPy's inexact code paths ask for it (nan_to_num's
// posinf/neginf replacements, sinc's eps, ...) and must see the constants plain float64 runs
// use. A legacy user dtype cannot provide finfo constants (the get_constant slot belongs to
// new-style DTypes), so the dtype and its scalar type are entered in finfo's own cache.
void register_finfo() {
  py::object finfo = py::module_::import("numpy").attr("finfo");
  if (!py::hasattr(finfo, "_finfo_cache"))
    throw std::runtime_error(
        "dslog's annotator needs numpy.finfo._finfo_cache (NumPy 2.x) to give tracked_float "
        "float64's machine limits");
  py::object f64 = finfo(py::module_::import("numpy").attr("float64"));
  py::object cache = finfo.attr("_finfo_cache");
  cache[py::handle(reinterpret_cast<PyObject*>(g_descr))] = f64;
  cache[py::handle(reinterpret_cast<PyObject*>(g_scalar_type))] = f64;
  // Likewise numpy.ma's extreme fill values (its tables are keyed by scalar type): masked
  // medians (np.nanmedian along an axis) fill masked cells with float64's.
  py::module_ ma = py::module_::import("numpy.ma.core");
  py::handle scalar(reinterpret_cast<PyObject*>(g_scalar_type));
  py::object f64_type = py::module_::import("numpy").attr("float64");
  for (const char* table : {"min_filler", "max_filler"}) {
    py::object t = ma.attr(table);
    t[scalar] = t[f64_type];
  }
}

void register_dtype(PyObject* errors_module) {
  g_lost_error = PyObject_GetAttrString(errors_module, "LineageLostError");
  g_stale_error = PyObject_GetAttrString(errors_module, "StaleLineageError");
  g_forged_error = PyObject_GetAttrString(errors_module, "ForgedLineageError");
  g_capture_error = PyObject_GetAttrString(errors_module, "CaptureError");
  if (!g_lost_error || !g_stale_error || !g_forged_error || !g_capture_error)
    throw py::error_already_set();

  static PyNumberMethods number_slots;  // filled below (only conversions are overridden)
  (void)number_slots;
  PyType_Slot type_slots[] = {
      {Py_tp_new, reinterpret_cast<void*>(&scalar_new)},
      {Py_tp_repr, reinterpret_cast<void*>(&scalar_repr)},
      {Py_tp_str, reinterpret_cast<void*>(&scalar_str)},
      {Py_tp_hash, reinterpret_cast<void*>(&scalar_hash)},
      {Py_tp_richcompare, reinterpret_cast<void*>(&scalar_richcompare)},
      {Py_tp_methods, scalar_methods},
      {Py_tp_getset, scalar_getset},
      {Py_tp_doc,
       const_cast<char*>("A float64 value annotated with the input cells it came from.")},
      {Py_nb_float, reinterpret_cast<void*>(&scalar_float)},
      {Py_nb_int, reinterpret_cast<void*>(&scalar_int)},
      {Py_nb_index, reinterpret_cast<void*>(&scalar_index)},
      {0, nullptr}};
  PyType_Spec spec = {"dslog_dagster._annotator.tracked_float", int(sizeof(TFScalar)), 0,
                      Py_TPFLAGS_DEFAULT, type_slots};
  PyObject* bases = PyTuple_Pack(1, reinterpret_cast<PyObject*>(&PyFloatingArrType_Type));
  if (!bases) throw py::error_already_set();
  g_scalar_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpecWithBases(&spec, bases));
  Py_DECREF(bases);
  if (!g_scalar_type) throw py::error_already_set();

  PyArray_InitArrFuncs(&g_arrfuncs);
  g_arrfuncs.getitem = &af_getitem;
  g_arrfuncs.setitem = &af_setitem;
  g_arrfuncs.copyswapn = &af_copyswapn;
  g_arrfuncs.copyswap = &af_copyswap;
  g_arrfuncs.compare = &af_compare;
  g_arrfuncs.argmax = &af_argmax;
  g_arrfuncs.argmin = &af_argmin;
  g_arrfuncs.nonzero = &af_nonzero;
  g_arrfuncs.fill = &af_fill;
  g_arrfuncs.fillwithscalar = &af_fillwithscalar;
  g_arrfuncs.dotfunc = &af_dotfunc;
  static_assert(NPY_NSORTS == 3, "one af_sort per NumPy sort kind");
  g_arrfuncs.sort[0] = &af_sort<0>;
  g_arrfuncs.sort[1] = &af_sort<1>;
  g_arrfuncs.sort[2] = &af_sort<2>;
  {
    PyArray_Descr* d = PyArray_DescrFromType(NPY_DOUBLE);
    for (int kind = 0; kind < NPY_NSORTS; ++kind) {
      g_f64_sort[kind] = PyDataType_GetArrFuncs(d)->sort[kind];
      if (g_f64_sort[kind] == nullptr) {
        Py_DECREF(d);
        throw std::runtime_error("NumPy's float64 dtype has no sort function of some kind");
      }
    }
    Py_DECREF(d);
  }

  static PyArray_DescrProto proto;
  std::memset(&proto, 0, sizeof proto);
  Py_SET_TYPE(&proto, &PyArrayDescr_Type);
  Py_SET_REFCNT(&proto, 1);
  proto.typeobj = g_scalar_type;
  proto.kind = 'f';
  proto.type = 'Q' + 1;  // 'R': an otherwise unused type character
  proto.byteorder = '=';
  proto.flags = char(NPY_NEEDS_PYAPI | NPY_USE_GETITEM | NPY_USE_SETITEM | NPY_NEEDS_INIT |
                     NPY_LIST_PICKLE);
  proto.type_num = 0;
  proto.elsize = int(sizeof(TF));
  proto.alignment = int(alignof(TF));
  proto.f = &g_arrfuncs;
  proto.hash = -1;
  g_typenum = PyArray_RegisterDataType(&proto);
  if (g_typenum < 0) throw py::error_already_set();
  g_descr = PyArray_DescrFromType(g_typenum);
  g_dtmeta = NPY_DTYPE(g_descr);
  if (PyObject_SetAttrString(reinterpret_cast<PyObject*>(g_scalar_type), "dtype",
                             reinterpret_cast<PyObject*>(g_descr)) < 0)
    throw py::error_already_set();

  // Casts into tracked_float, immediately after registration (later ones are ignored).
  struct In {
    int num;
    PyArray_VectorUnaryFunc* fn;
  };
  const In ins[] = {{NPY_BOOL, &cast_in_bool},
                    {NPY_BYTE, &cast_in<npy_byte>},
                    {NPY_UBYTE, &cast_in<npy_ubyte>},
                    {NPY_SHORT, &cast_in<npy_short>},
                    {NPY_USHORT, &cast_in<npy_ushort>},
                    {NPY_INT, &cast_in<npy_int>},
                    {NPY_UINT, &cast_in<npy_uint>},
                    {NPY_LONG, &cast_in<npy_long>},
                    {NPY_ULONG, &cast_in<npy_ulong>},
                    {NPY_LONGLONG, &cast_in<npy_longlong>},
                    {NPY_ULONGLONG, &cast_in<npy_ulonglong>},
                    {NPY_HALF, &cast_in_half},
                    {NPY_FLOAT, &cast_in<npy_float>},
                    {NPY_DOUBLE, &cast_in<npy_double>}};
  for (const In& c : ins) {
    PyArray_Descr* from = PyArray_DescrFromType(c.num);
    if (PyArray_RegisterCastFunc(from, g_typenum, c.fn) < 0 ||
        PyArray_RegisterCanCast(from, g_typenum, NPY_NOSCALAR) < 0) {
      Py_DECREF(from);
      throw py::error_already_set();
    }
    Py_DECREF(from);
  }

  if (PyArray_RegisterCastFunc(g_descr, NPY_BOOL, &cast_to_bool) < 0)
    throw py::error_already_set();

  PyArray_Descr* f64 = PyArray_DescrFromType(NPY_DOUBLE);
  g_f64_dot = PyDataType_GetArrFuncs(f64)->dotfunc;
  Py_DECREF(f64);
  register_finfo();
  wrap_sorting_methods();
  wrap_position_methods();

  // Unary math: the set passes through.
  const char* delegated[] = {
      "sin",     "cos",     "tan",    "arcsin", "arccos", "arctan", "sinh",      "cosh",
      "tanh",    "arcsinh", "arccosh", "arctanh", "degrees", "radians", "deg2rad", "rad2deg",
      "rint",    "floor",   "ceil",   "trunc",  "exp",    "exp2",   "expm1",     "log",
      "log2",    "log10",   "log1p",  "sqrt",   "cbrt",   "square", "reciprocal", "sign",
      "spacing"};
  for (const char* name : delegated) register_unary(name, U_DELEGATE);
  register_unary("negative", U_NEGATIVE);
  register_unary("positive", U_POSITIVE);
  register_unary("conjugate", U_POSITIVE);
  register_unary("absolute", U_ABSOLUTE);
  register_unary("fabs", U_ABSOLUTE);

  const int T = g_typenum;
  register_legacy("equal", &compare_loop<Eq>, {T, T, NPY_BOOL}, nullptr);
  register_legacy("not_equal", &compare_loop<Ne>, {T, T, NPY_BOOL}, nullptr);
  register_legacy("less", &compare_loop<Lt>, {T, T, NPY_BOOL}, nullptr);
  register_legacy("less_equal", &compare_loop<Le>, {T, T, NPY_BOOL}, nullptr);
  register_legacy("greater", &compare_loop<Gt>, {T, T, NPY_BOOL}, nullptr);
  register_legacy("greater_equal", &compare_loop<Ge>, {T, T, NPY_BOOL}, nullptr);
  register_legacy("isnan", &predicate_loop<IsNan>, {T, NPY_BOOL}, nullptr);
  register_legacy("isinf", &predicate_loop<IsInf>, {T, NPY_BOOL}, nullptr);
  register_legacy("isfinite", &predicate_loop<IsFinite>, {T, NPY_BOOL}, nullptr);
  register_legacy("signbit", &predicate_loop<SignBit>, {T, NPY_BOOL}, nullptr);
  try {
    g_f64_clip = find_f64_loop(get_ufunc("clip"));
  } catch (const std::exception&) {
    PyErr_Clear();
    g_f64_clip = F64Loop{};  // no float64 clip loop: the rule alone decides the values
  }
  register_legacy("clip", &clip_loop, {T, T, T, T}, nullptr);
  g_f64_matmul = find_f64_loop(get_ufunc("matmul"));
  register_legacy("matmul", &matmul_loop, {T, T, T}, nullptr);

  register_binary<0>("add", B_ARITH, I_ADD, true, 1, true);
  // NumPy reduces only add pairwise; subtract's reduction is sequential (acc -= x).
  register_binary<1>("subtract", B_ARITH, I_SUB, false, 0, false);
  register_binary<2>("multiply", B_ARITH, I_MUL, false, 2, true);
  register_binary<3>("true_divide", B_ARITH, I_DIV, false, 0, false);
  register_binary<4>("floor_divide", B_ARITH, I_NONE, false, 0, false);
  register_binary<5>("power", B_ARITH, I_NONE, false, 0, false);
  register_binary<6>("float_power", B_ARITH, I_NONE, false, 0, false);
  register_binary<7>("fmod", B_ARITH, I_NONE, false, 0, false);
  register_binary<8>("remainder", B_ARITH, I_NONE, false, 0, false);
  register_binary<9>("hypot", B_ARITH, I_NONE, false, 0, false);
  register_binary<10>("arctan2", B_ARITH, I_NONE, false, 0, false);
  register_binary<11>("logaddexp", B_ARITH, I_NONE, false, 0, false);
  register_binary<12>("logaddexp2", B_ARITH, I_NONE, false, 0, false);
  register_binary<13>("nextafter", B_ARITH, I_NONE, false, 0, false);
  register_binary<14>("copysign", B_ARITH, I_NONE, false, 0, false);
  register_binary<15>("heaviside", B_ARITH, I_NONE, false, 0, false);
  register_binary<16>("maximum", B_PICK, I_MAX, false, 0, true);
  register_binary<17>("minimum", B_PICK, I_MIN, false, 0, true);
  register_binary<18>("fmax", B_PICK, I_FMAX, false, 0, true);
  register_binary<19>("fmin", B_PICK, I_FMIN, false, 0, true);
}

// ---------------------------------------------------------------------------------------------
// Module functions
// ---------------------------------------------------------------------------------------------
PyArrayObject* require_tracked(py::handle obj, const char* what) {
  if (!PyArray_Check(obj.ptr()) ||
      !is_tracked_descr(PyArray_DESCR(reinterpret_cast<PyArrayObject*>(obj.ptr()))))
    throw std::invalid_argument(std::string(what) + " must be a tracked_float array");
  return reinterpret_cast<PyArrayObject*>(obj.ptr());
}

py::object new_tracked(const std::vector<npy_intp>& shape, bool zero = true) {
  // Not zero-filled only for a caller that writes every cell before anything else runs
  // (annotate): NEEDS_INIT is switched off for just this allocation, as new_uninitialised.
  struct Restore {
    npy_uint64 flags;
    ~Restore() { g_descr->flags = flags; }
  } restore{g_descr->flags};
  if (!zero) g_descr->flags &= ~npy_uint64(NPY_NEEDS_INIT);
  Py_INCREF(g_descr);
  PyObject* arr = PyArray_NewFromDescr(&PyArray_Type, g_descr, int(shape.size()),
                                       const_cast<npy_intp*>(shape.data()), nullptr, nullptr, 0,
                                       nullptr);
  if (!arr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(arr);
}

// The lineage of a position array (core/positions.py): cell i carries the union of the sets
// of wins[*][i] (the cells its position names) as contributing and, in considered mode, also lose[i]'s whole set
// as considered (the cells compared to choose it); its value is values[i]. The arena's pick,
// so shared sets stay shared. win, lose (optional) and values have one shape.
py::object positional(py::list win_objs, py::object lose_obj,
                      py::array_t<double, py::array::c_style | py::array::forcecast> values) {
  if (!t_arena) throw std::runtime_error("positional() needs a running capture");
  if (win_objs.empty()) throw std::invalid_argument("positional(): no win array");
  std::vector<PyArrayObject*> wins;
  for (py::handle w : win_objs) wins.push_back(require_tracked(w, "positional(win)"));
  PyArrayObject* lose = lose_obj.is_none() ? nullptr : require_tracked(lose_obj, "positional(lose)");
  std::vector<npy_intp> shape(values.shape(), values.shape() + values.ndim());
  auto same = [&](PyArrayObject* a) {
    return a && PyArray_NDIM(a) == values.ndim() &&
           std::equal(shape.begin(), shape.end(), PyArray_DIMS(a)) && PyArray_IS_C_CONTIGUOUS(a);
  };
  for (PyArrayObject* w : wins)
    if (!same(w)) throw std::invalid_argument("positional(): win and values differ in shape");
  if (lose && !same(lose))
    throw std::invalid_argument("positional(): lose and values differ in shape");
  py::object out = new_tracked(shape);
  char* dst = PyArray_BYTES(reinterpret_cast<PyArrayObject*>(out.ptr()));
  const char* l = lose ? PyArray_BYTES(lose) : nullptr;
  const double* v = values.data();
  Arena& ar = *t_arena;
  ar.begin_call();
  for (npy_intp i = 0, n = npy_intp(values.size()); i < n; ++i) {
    Handle h = 0;
    for (PyArrayObject* w : wins) {
      Handle x = load(PyArray_BYTES(w) + i * 16).h;
      if (!handle_ok(x)) {
        set_handle_error(x);
        throw py::error_already_set();
      }
      h = h == 0 ? x : (x == 0 || x == h ? h : ar.join(h, x));
    }
    Handle k = l ? load(l + i * 16).h : 0;
    if (!handle_ok(k)) {
      set_handle_error(k);
      throw py::error_already_set();
    }
    store(dst + i * 16, v[i], l ? ar.pick(h, k) : h);
  }
  return out;
}

[[noreturn]] void throw_capture_error(const char* msg) {
  PyErr_SetString(g_capture_error, msg);
  throw py::error_already_set();
}

// ---------------------------------------------------------------------------------------------
// Array memory during a capture (issue 23). A capture allocates a few arrays of 16 bytes per
// cell (the annotated inputs, every tracked result) and frees them when it returns. Blocks that
// big come from fresh mmap'ed pages each time, so every capture paid a page fault and a kernel
// page clear per 4 KiB (a third of an element-wise capture at 1M cells). While a capture runs,
// NumPy allocates through this handler (set in begin_capture, the previous one restored in
// end_capture; NumPy keeps the handler per context, i.e. per thread, and frees each array
// through the handler that allocated it): blocks of at least kBigBlock bytes are kept after
// free, up to kCacheBytes in all, and handed out again for an allocation of the same size
// (calloc clears them). Smaller blocks, and everything once the cache is full, go to NumPy's
// default handler. Values are untouched; only where the bytes live changes.
// ---------------------------------------------------------------------------------------------
namespace memcache {
constexpr size_t kBigBlock = size_t(1) << 20;
constexpr size_t kCacheBytes = size_t(256) << 20;
std::mutex g_mu;                                  // arrays may be freed in any thread
std::unordered_map<void*, size_t>* g_big;         // live or cached blocks of ours -> size
std::vector<std::pair<size_t, void*>>* g_free;    // cached blocks (size, pointer)
size_t g_free_bytes = 0;
PyDataMemAllocator* g_default = nullptr;          // NumPy's default handler's allocator
PyObject* g_capsule = nullptr;
thread_local PyObject* t_previous = nullptr;      // the handler begin_capture replaced

void* take(size_t n) {  // a cached block of exactly n bytes, or nullptr
  std::lock_guard<std::mutex> lock(g_mu);
  for (size_t i = 0; i < g_free->size(); ++i) {
    if ((*g_free)[i].first != n) continue;
    void* p = (*g_free)[i].second;
    (*g_free)[i] = g_free->back();
    g_free->pop_back();
    g_free_bytes -= n;
    return p;
  }
  return nullptr;
}
void* fresh(size_t n, bool zero) {
  void* p = zero ? std::calloc(n, 1) : std::malloc(n);
  if (p) {
    std::lock_guard<std::mutex> lock(g_mu);
    (*g_big)[p] = n;
  }
  return p;
}
void* h_malloc(void* ctx, size_t n) {
  if (n < kBigBlock) return g_default->malloc(g_default->ctx, n);
  if (void* p = take(n)) return p;
  (void)ctx;
  return fresh(n, false);
}
void* h_calloc(void* ctx, size_t k, size_t sz) {
  size_t n;
  if (__builtin_mul_overflow(k, sz, &n) || n < kBigBlock)
    return g_default->calloc(g_default->ctx, k, sz);
  if (void* p = take(n)) return std::memset(p, 0, n);
  (void)ctx;
  return fresh(n, true);
}
void* h_realloc(void* ctx, void* p, size_t n) {
  (void)ctx;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_big->find(p);
    if (it == g_big->end()) return g_default->realloc(g_default->ctx, p, n);
    void* q = std::realloc(p, n ? n : 1);
    if (!q) return nullptr;
    g_big->erase(it);
    (*g_big)[q] = n ? n : 1;
    return q;
  }
}
void h_free(void* ctx, void* p, size_t size) {
  (void)ctx;
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_big->find(p);
    if (it != g_big->end()) {
      const size_t n = it->second;  // our own record: NumPy's `size` is not relied on
      if (g_free_bytes + n <= kCacheBytes) {
        g_free->push_back({n, p});
        g_free_bytes += n;
        return;
      }
      g_big->erase(it);
    } else {
      g_default->free(g_default->ctx, p, size);
      return;
    }
  }
  std::free(p);
}
PyDataMem_Handler g_handler = {"dslog_capture_cache", 1, {nullptr, h_malloc, h_calloc, h_realloc, h_free}};

// Called once at import: the capsule NumPy holds for this handler (never freed).
void init() {
  g_big = new std::unordered_map<void*, size_t>();
  g_free = new std::vector<std::pair<size_t, void*>>();
  g_default = static_cast<PyDataMemAllocator*>(
      &static_cast<PyDataMem_Handler*>(PyCapsule_GetPointer(PyDataMem_DefaultHandler, "mem_handler"))
           ->allocator);
  if (!g_default) throw py::error_already_set();
  g_capsule = PyCapsule_New(&g_handler, "mem_handler", nullptr);
  if (!g_capsule) throw py::error_already_set();
}
// Install for this thread's context (with the GIL); the previous handler is kept to restore.
void install() {
  PyObject* old = PyDataMem_SetHandler(g_capsule);
  if (!old) throw py::error_already_set();
  Py_XDECREF(t_previous);
  t_previous = old;
}
void restore() {
  if (!t_previous) return;
  PyObject* old = PyDataMem_SetHandler(t_previous);
  Py_CLEAR(t_previous);
  if (!old) throw py::error_already_set();
  Py_DECREF(old);
}
// Cached bytes (tests and benchmarks).
size_t cached_bytes() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_free_bytes;
}
}  // namespace memcache

// Start a capture in the calling thread (called with the GIL held, which serialises the epoch
// counter). Refused, never wrapped, once every epoch has been issued.
uint32_t begin_capture(int mode) {
  if (t_arena)
    throw_capture_error(
        "A capture is already running in this thread; captures do not nest. Capture the outer "
        "function only, or run the inner capture after the outer one has returned.");
  if (g_last_epoch >= hnd::kMaxEpoch)
    throw_capture_error(
        "This process has started 524,287 captures, every epoch a tracked value can carry; "
        "another would reuse an epoch and could accept a stale tracked array with wrong "
        "lineage, so captures are refused. Run further captures in a new process (Dagster "
        "runs each materialization in its own).");
  t_arena_owner.armed = true;  // first use registers the thread-exit cleanup
  const uint32_t ep = g_last_epoch + 1;
  t_arena = new Arena(ep, mode ? dslog::Mode::kConsidered : dslog::Mode::kContributing);
  g_last_epoch = ep;
  try {
    memcache::install();
  } catch (...) {
    delete t_arena;
    t_arena = nullptr;
    throw;
  }
  return ep;
}

// End the calling thread's capture if it is the one of `epoch`: a path that ends a capture
// ends only its own. True when a capture was freed.
bool end_capture(uint32_t epoch) {
  if (!t_arena || t_arena->epoch() != epoch) return false;
  delete t_arena;
  t_arena = nullptr;
  memcache::restore();
  return true;
}

// Test hook (not a user API): the next capture gets epoch `last + 1`. Only forward, so no epoch
// is ever issued twice; lets tests reach the epochs forged bytes carry, and exhaustion.
void skip_epochs(uint32_t last) {
  if (last < g_last_epoch || last > hnd::kMaxEpoch)
    throw std::invalid_argument("skip_epochs: only forward, up to the last epoch");
  g_last_epoch = last;
}

// Annotate a C-contiguous float64 array: cell i gets the singleton {base + i}.
py::tuple annotate(py::array_t<double, py::array::c_style | py::array::forcecast> values) {
  if (!t_arena) throw std::runtime_error("annotate() needs a running capture");
  std::vector<npy_intp> shape(values.shape(), values.shape() + values.ndim());
  uint64_t size = uint64_t(values.size());
  uint64_t base = t_arena->add_input(size);
  py::object out = new_tracked(shape, false);  // every cell is written below
  char* dst = PyArray_BYTES(reinterpret_cast<PyArrayObject*>(out.ptr()));
  const double* src = values.data();
  const Arena& ar = *t_arena;
  {
    py::gil_scoped_release nogil;
    // Cell base + i has the handle of cell base plus i (the id is the payload, in the low
    // bits; ids stay below 2^34): one add per cell, no re-encoding.
    const Handle h0 = size ? ar.cell(base) : 0;
    // A big input is written around the cache (streaming stores: no read for ownership of
    // lines that are overwritten whole), as the element-wise kernels write their outputs.
    if (streamable(dst, npy_intp(size), 16)) {
      for (uint64_t i = 0; i < size; ++i) store_nt(dst + i * 16, src[i], h0 + i);
      stream_fence();
    } else {
      for (uint64_t i = 0; i < size; ++i) store(dst + i * 16, src[i], h0 + i);
    }
  }
  return py::make_tuple(out, base);
}

// Overwrite the values of a C-contiguous, writeable tracked array with `values` (same size, C
// order), keeping every cell's handle. The deferred capture (core/deferred.py) rebuilds a
// result's handles by re-running its element-wise chain under annotation when the run turns to
// tracked arrays; the values the user's run already computed with plain NumPy are put back, so
// what it computed never changes, whatever the re-run's inputs now hold.
void assign_values(py::handle obj, py::array_t<double, py::array::c_style | py::array::forcecast> values) {
  PyArrayObject* arr = require_tracked(obj, "assign_values()");
  if (!PyArray_IS_C_CONTIGUOUS(arr) || !PyArray_ISWRITEABLE(arr))
    throw std::invalid_argument("assign_values(): the tracked array must be C-contiguous and writeable");
  const npy_intp n = PyArray_SIZE(arr);
  if (npy_intp(values.size()) != n)
    throw std::invalid_argument("assign_values(): values have " + std::to_string(values.size()) +
                                " cells, the tracked array " + std::to_string(n));
  char* d = PyArray_BYTES(arr);
  const double* s = values.data();
  py::gil_scoped_release nogil;
  for (npy_intp i = 0; i < n; ++i) std::memcpy(d + i * 16, s + i, sizeof(double));
}

// Plain float64 copy of the values (C order).
py::array_t<double> values_of(py::handle obj) {
  PyArrayObject* arr = require_tracked(obj, "values()");
  py::object keep;
  auto* ca = arr;
  if (!PyArray_IS_C_CONTIGUOUS(arr)) {  // read in place when already C order (no 2nd copy)
    PyObject* c = PyArray_NewCopy(arr, NPY_CORDER);
    if (!c) throw py::error_already_set();
    keep = py::reinterpret_steal<py::object>(c);
    ca = reinterpret_cast<PyArrayObject*>(c);
  }
  std::vector<py::ssize_t> shape(PyArray_DIMS(ca), PyArray_DIMS(ca) + PyArray_NDIM(ca));
  py::array_t<double> out(shape);
  double* d = out.mutable_data();
  const char* s = PyArray_BYTES(ca);
  npy_intp n = PyArray_SIZE(ca);
  {
    py::gil_scoped_release nogil;
    for (npy_intp i = 0; i < n; ++i) d[i] = load_v(s + i * 16);
  }
  return out;
}

template <class T>
py::array_t<T> adopt(std::vector<T>&& v, std::vector<py::ssize_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  py::capsule owner(heap, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, heap->data(), owner);
}

// floor(x / d) for 0 <= x < 2^52 and d >= 1 through a double reciprocal plus one correction
// step: a 64-bit integer division per coordinate would dominate extraction.
struct FastDiv {
  uint64_t d;
  double inv;
  explicit FastDiv(uint64_t d_) : d(d_ ? d_ : 1), inv(1.0 / double(int64_t(d_ ? d_ : 1))) {}
  uint64_t operator()(uint64_t x) const {
    // signed conversions: one instruction each (the unsigned ones are not, before AVX-512)
    uint64_t q = uint64_t(int64_t(double(int64_t(x)) * inv));
    if (q * d > x)
      --q;
    else if ((q + 1) * d <= x)
      ++q;
    return q;
  }
};

// Every cell of q is below `ncells` (a sorted span's last cell is its largest).
__attribute__((noinline)) bool cells_below(const dslog::CellSeq& q, uint64_t ncells) {
  if (q.count == 0) return true;
  uint64_t last;
  if (q.data != nullptr) return q.data[q.count - 1] < ncells;
  if (__builtin_mul_overflow(q.count - 1, q.stride, &last) ||
      __builtin_add_overflow(last, q.start, &last))
    return false;
  return last < ncells;
}

// Owned int64 buffer handed to NumPy without zero-filling or copying.
py::array_t<int64_t> adopt_buffer(int64_t* data, py::ssize_t rows, py::ssize_t cols) {
  py::capsule owner(data, [](void* p) { delete[] static_cast<int64_t*>(p); });
  return py::array_t<int64_t>({rows, cols}, data, owner);
}

// Cells of consecutive output cells that carry the same set (a considered sort gives a whole
// lane one shared set, which may hold references to flatten) are flattened once.
struct SeqMemo {
  Handle last = 0;
  dslog::CellSeq q{nullptr, 0, 0, 0};
  std::vector<uint64_t> scratch;
  const dslog::CellSeq& operator()(Arena& ar, Handle h) {
    if (h != last || h == 0) {
      q = ar.seq(h, scratch);
      last = h;
    }
    return q;
  }
};

// The tracked output `out_obj` in C order (itself when it already is, else a copy), which
// both extractions read cell by cell.
py::object c_order_output(py::handle out_obj) {
  PyArrayObject* raw = require_tracked(out_obj, "the output");
  if (PyArray_IS_C_CONTIGUOUS(raw)) return py::reinterpret_borrow<py::object>(out_obj);
  PyObject* c = PyArray_NewCopy(raw, NPY_CORDER);
  if (!c) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(c);
}

// Extract the relation of one output against every input: per input, (out_cols (l, n),
// in_cols (m, n)) int64, sorted lexicographically (outputs, then inputs) and duplicate-free.
//
// Two passes over the output cells: the first counts the pairs per input, the second writes
// them straight into the final columns. Output coordinates advance like an odometer (cells
// are visited in C order); input cells are unravelled with FastDiv. Single cells, kCell2 and
// progression sets are read without expanding them into a list. Each set's cells are sorted,
// so the columns come out sorted without a sort.
py::list extract(py::handle out_obj, const std::vector<std::vector<int64_t>>& in_shapes,
                 bool considered) {
  if (!t_arena) throw std::runtime_error("extract() needs a running capture");
  py::object keep = c_order_output(out_obj);
  PyArrayObject* ca = reinterpret_cast<PyArrayObject*>(keep.ptr());
  std::vector<int64_t> out_shape(PyArray_DIMS(ca), PyArray_DIMS(ca) + PyArray_NDIM(ca));
  const char* data = PyArray_BYTES(ca);
  const npy_intp ncell = PyArray_SIZE(ca);
  Arena& ar = *t_arena;
  const size_t k = in_shapes.size();
  if (k != ar.bases().size())
    throw std::invalid_argument("extract(): one input shape per annotated input is required");
  const std::vector<uint64_t> bases = ar.bases();
  std::vector<uint64_t> ends(k);
  for (size_t j = 0; j < k; ++j) {
    uint64_t size = 1;
    for (int64_t d : in_shapes[j]) size *= uint64_t(d);
    if (size != ar.sizes()[j])
      throw std::invalid_argument("extract(): an input shape does not match its annotated size");
    ends[j] = bases[j] + size;
  }
  // Inputs are numbered back to back, so a cell id names an input cell iff it is below this.
  const uint64_t ncells = ar.n_cells();
  const int l = int(out_shape.size());
  std::vector<int64_t> counts(k, 0);
  std::vector<int64_t*> cols(k, nullptr);  // per input: l + m columns of counts[j] values
  bool stale = false;
  Handle bad = 0;  // an invalid handle met (or, for cells outside the inputs, kForgedCell)
  constexpr Handle kForgedCell = ~Handle(0);
  // Calls f(input j, first cell, stride, count) for each run of a set's cells in one input.
  auto runs = [&](const dslog::CellSeq& q, auto&& f) {
    if (q.data == nullptr) {
      uint64_t kk = 0;
      while (kk < q.count) {
        const uint64_t c = q.start + kk * q.stride;
        size_t j = k == 1 ? 0 : ar.input_of(c);
        // cells of this progression in input j: c + t * stride < ends[j] (usually all)
        uint64_t t = q.count - kk;
        if (c + (t - 1) * q.stride >= ends[j]) t = (ends[j] - c + q.stride - 1) / q.stride;
        f(j, c, q.stride, t);
        kk += t;
      }
      return;
    }
    size_t i = 0;
    while (i < q.count) {
      size_t j = k == 1 ? 0 : ar.input_of(q.data[i]);
      size_t e = size_t(std::lower_bound(q.data + i, q.data + q.count, ends[j]) - q.data);
      f(j, uint64_t(i), 0, uint64_t(e - i));  // stride 0: a span of q.data from index i
      i = e;
    }
  };
  {
    py::gil_scoped_release nogil;
    SeqMemo memo_seq;
    for (npy_intp i = 0; i < ncell && !stale; ++i) {
      Handle h = load(data + i * 16).h;
      if (h == 0) continue;
      if (!handle_ok(h)) {  // also checks kCell and kCell2 ids against the inputs
        stale = true;
        bad = h;
        break;
      }
      if (hnd::kind(h) == hnd::kCell) {
        ++counts[k == 1 ? 0 : ar.input_of(hnd::payload(h))];
        continue;
      }
      if (hnd::kind(h) == hnd::kCell2) {  // two cells, often in two inputs (x + y)
        const uint64_t c = hnd::payload(h), c2 = c + ar.cell2_delta(h);
        ++counts[k == 1 ? 0 : ar.input_of(c)];
        ++counts[k == 1 ? 0 : ar.input_of(c2)];
        continue;
      }
      const dslog::CellSeq q = memo_seq(ar, considered ? ar.considered(h) : ar.contrib(h));
      // Sets reached through other sets may hold cells of forged bytes (cell ids are plain
      // numbers until here): every cell must be an input cell, or the coordinates computed
      // below would be garbage. Sorted spans: the last is the largest.
      if (!cells_below(q, ncells)) {
        stale = true;
        bad = kForgedCell;
        break;
      }
      if (k == 1) {
        counts[0] += int64_t(q.count);
      } else {
        runs(q, [&](size_t j, uint64_t, uint64_t, uint64_t t) { counts[j] += int64_t(t); });
      }
    }
  }
  if (stale) {
    if (bad == kForgedCell)
      set_forged_error();
    else
      set_handle_error(bad);
    throw py::error_already_set();
  }
  for (size_t j = 0; j < k; ++j) {
    const size_t width = size_t(l) + in_shapes[j].size();
    cols[j] = new int64_t[std::max<size_t>(width * size_t(counts[j]), 1)];
  }
  {
    py::gil_scoped_release nogil;
    SeqMemo memo_seq;
    // Per input: pointers to its columns (outputs first) and where the next pair goes.
    std::vector<std::vector<int64_t*>> colp(k);
    std::vector<std::vector<FastDiv>> divs(k);
    std::vector<int64_t> pos(k, 0);
    for (size_t j = 0; j < k; ++j) {
      const size_t m = in_shapes[j].size();
      for (size_t c = 0; c < size_t(l) + m; ++c) colp[j].push_back(cols[j] + c * size_t(counts[j]));
      for (int64_t d : in_shapes[j]) divs[j].emplace_back(uint64_t(d));
    }
    std::vector<int64_t> oc(size_t(l) + 1, 0);  // coordinates of output cell i
    auto put = [&](size_t j, uint64_t cell) __attribute__((always_inline)) {
      int64_t* const* cp = colp[j].data();
      const int64_t p = pos[j]++;
      for (int d = 0; d < l; ++d) cp[d][p] = oc[size_t(d)];
      const size_t m = divs[j].size();
      if (m == 0) return;
      uint64_t f = cell - bases[j];
      const FastDiv* dv = divs[j].data();
      for (size_t d = m - 1; d > 0; --d) {
        const uint64_t qq = dv[d](f);
        cp[size_t(l) + d][p] = int64_t(f - qq * dv[d].d);
        f = qq;
      }
      cp[l][p] = int64_t(f);
    };
    for (npy_intp i = 0; i < ncell; ++i) {
      if (i > 0) {  // odometer: oc = unravel(i)
        for (int d = l - 1; d >= 0; --d) {
          if (++oc[size_t(d)] < out_shape[size_t(d)]) break;
          oc[size_t(d)] = 0;
        }
      }
      Handle h = load(data + i * 16).h;
      if (h == 0) continue;
      if (hnd::kind(h) == hnd::kCell) {  // the common case: one cell
        const uint64_t c = hnd::payload(h);
        put(k == 1 ? 0 : ar.input_of(c), c);
        continue;
      }
      if (hnd::kind(h) == hnd::kCell2) {
        const uint64_t c = hnd::payload(h), c2 = c + ar.cell2_delta(h);
        put(k == 1 ? 0 : ar.input_of(c), c);
        put(k == 1 ? 0 : ar.input_of(c2), c2);
        continue;
      }
      const dslog::CellSeq q = memo_seq(ar, considered ? ar.considered(h) : ar.contrib(h));
      if (k == 1) {
        if (q.data == nullptr) {
          for (uint64_t u = 0; u < q.count; ++u) put(0, q.start + u * q.stride);
        } else {
          for (uint64_t u = 0; u < q.count; ++u) put(0, q.data[u]);
        }
        continue;
      }
      runs(q, [&](size_t j, uint64_t first, uint64_t stride, uint64_t t) {
        if (q.data == nullptr) {
          for (uint64_t u = 0; u < t; ++u) put(j, first + u * stride);
        } else {
          for (uint64_t u = 0; u < t; ++u) put(j, q.data[first + u]);
        }
      });
    }
  }
  py::list result;
  for (size_t j = 0; j < k; ++j) {
    const py::ssize_t n = counts[j], m = py::ssize_t(in_shapes[j].size());
    int64_t* block = cols[j];
    // One allocation per input: the output columns, then the input columns.
    py::array_t<int64_t> all = adopt_buffer(block, py::ssize_t(l) + m, n);
    py::slice outs(0, l, 1), ins(l, l + m, 1);
    result.append(py::make_tuple(all[outs], all[ins]));
  }
  return result;
}

// The factorised extraction (native/src/extract.cpp): the ProvRC table of one output against
// every input, straight from the handles, never writing a pair per (output, input) cell. Per
// input a tuple (rows, n_pairs, out_lo, out_hi, in_ref, in_q, in_r, in_mult, in_lo, in_hi)
// with (l, rows) / (m, rows) int64 fields; and a dict of statistics. The work runs without
// the GIL.
//
// `values` (optional): a writable C-contiguous float64 array of the output's size that
// receives the output's values (C order, as values() gives them) in the same pass.
py::tuple extract_tables(py::handle out_obj, const std::vector<std::vector<int64_t>>& in_shapes,
                         bool considered, py::object values) {
  if (!t_arena) throw std::runtime_error("extract_tables() needs a running capture");
  py::object keep = c_order_output(out_obj);
  PyArrayObject* ca = reinterpret_cast<PyArrayObject*>(keep.ptr());
  double* vdst = nullptr;
  if (!values.is_none()) {
    PyObject* v = values.ptr();
    PyArrayObject* va = reinterpret_cast<PyArrayObject*>(v);
    if (!PyArray_Check(v) || PyArray_TYPE(va) != NPY_DOUBLE || !PyArray_IS_C_CONTIGUOUS(va) ||
        !PyArray_ISWRITEABLE(va) || PyArray_SIZE(va) != PyArray_SIZE(ca))
      throw std::invalid_argument(
          "extract_tables(): `values` must be a writable C-contiguous float64 array of the "
          "output's size");
    vdst = reinterpret_cast<double*>(PyArray_BYTES(va));
  }
  const std::vector<int64_t> out_shape(PyArray_DIMS(ca), PyArray_DIMS(ca) + PyArray_NDIM(ca));
  Arena& ar = *t_arena;
  if (in_shapes.size() != ar.bases().size())
    throw std::invalid_argument("extract_tables(): one input shape per annotated input");
  for (size_t j = 0; j < in_shapes.size(); ++j) {
    uint64_t size = 1;
    for (int64_t d : in_shapes[j]) size *= uint64_t(d);
    if (size != ar.sizes()[j])
      throw std::invalid_argument("extract_tables(): an input shape does not match its size");
  }
  std::vector<dslog::ProvRCTable> tables;
  dslog::ExtractStats st;
  Handle bad = 0;
  bool forged = false;
  {
    py::gil_scoped_release nogil;
    try {
      tables = dslog::extract_tables(ar, PyArray_BYTES(ca) + offsetof(TF, h), 16,
                                     int64_t(PyArray_SIZE(ca)), out_shape, in_shapes,
                                     considered, &st, PyArray_BYTES(ca) + offsetof(TF, v), vdst);
    } catch (const dslog::BadHandle& e) {
      bad = e.handle;
    } catch (const dslog::ForgedCell&) {
      forged = true;
    }
  }
  if (forged) {
    set_forged_error();
    throw py::error_already_set();
  }
  if (bad != 0) {
    set_handle_error(bad);
    throw py::error_already_set();
  }
  py::list result;
  const py::ssize_t l = py::ssize_t(out_shape.size());
  for (size_t j = 0; j < tables.size(); ++j) {
    dslog::ProvRCTable& t = tables[j];
    const py::ssize_t m = py::ssize_t(in_shapes[j].size()), n = py::ssize_t(t.rows);
    const int64_t pairs = (l + m == 0) ? int64_t(t.rows) : dslog::count_pairs(t);
    auto field = [&](std::vector<int64_t>& v, py::ssize_t rank) {
      if (l + m == 0) v.clear();
      return adopt(std::move(v), {rank, (l + m == 0) ? py::ssize_t(0) : n});
    };
    result.append(py::make_tuple(n, pairs, field(t.out_lo, l), field(t.out_hi, l),
                                 field(t.in_ref, m), field(t.in_q, m), field(t.in_r, m),
                                 field(t.in_mult, m), field(t.in_lo, m), field(t.in_hi, m)));
  }
  py::dict d;
  d["cells"] = st.cells;
  d["runs"] = st.runs;
  d["loose_pairs"] = st.loose_pairs;
  d["atoms"] = st.atoms;
  d["groups"] = st.groups;
  d["records"] = st.records;
  return py::make_tuple(result, d);
}

py::dict stats() {
  py::dict d;
  d["active"] = (t_arena != nullptr);
  if (t_arena) {
    d["bytes_used"] = t_arena->bytes_used();
    d["bytes_reserved"] = t_arena->bytes_reserved();
    d["lists"] = t_arena->n_lists();
    d["joins"] = t_arena->n_joins();
    d["pairs"] = t_arena->n_pairs();
    d["epoch"] = t_arena->epoch();
  }
  return d;
}

}  // namespace

PYBIND11_MODULE(_annotator, m) {
  m.doc() = "The tracked_float NumPy dtype and its capture arena (see core/capture.py).";
  if (_import_array() < 0) throw py::error_already_set();
  memcache::init();
  if (_import_umath() < 0) throw py::error_already_set();
  if (PyArray_RUNTIME_VERSION < NPY_2_0_API_VERSION)
    throw std::runtime_error("dslog's annotator needs NumPy >= 2.0 at run time");
  py::module_ errors = py::module_::import("dslog_dagster.errors");
  register_dtype(errors.ptr());
  // A forged handle met inside the arena outside a NumPy loop (extract): ForgedLineageError.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const dslog::ForgedHandle&) {
      set_forged_error();
    }
  });
  m.attr("tracked_float") = py::handle(reinterpret_cast<PyObject*>(g_scalar_type));
  m.attr("dtype") = py::handle(reinterpret_cast<PyObject*>(g_descr));
  m.attr("typenum") = g_typenum;
  m.def("begin", &begin_capture, py::arg("mode"),
        "Start a capture in this thread (0 = contributing, 1 = considered); returns its epoch.");
  m.def("end", &end_capture, py::arg("epoch"),
        "Free this thread's capture if it is the one of `epoch`; True when one was freed.");
  m.def("active", []() { return t_arena != nullptr; }, "Is a capture running in this thread?");
  m.def("cached_bytes", &memcache::cached_bytes,
        "Bytes of freed capture arrays kept for reuse by the next capture (at most 256 MiB).");
  m.def(
      "considered", []() { return t_arena && t_arena->mode() == dslog::Mode::kConsidered; },
      "Does this thread's running capture record considered sets?");
  m.def("last_epoch", []() { return g_last_epoch; }, "The last epoch issued in this process.");
  m.def("_skip_epochs", &skip_epochs, py::arg("last"),
        "Test hook: the next capture gets epoch last + 1 (forward only).");
  py::dict layout;
  layout["payload_bits"] = hnd::kPayloadBits;
  layout["est_shift"] = hnd::kEstShift;
  layout["kind_shift"] = hnd::kKindShift;
  layout["epoch_shift"] = hnd::kEpochShift;
  layout["member_bits"] = hnd::kMemberBits;
  layout["max_epoch"] = hnd::kMaxEpoch;
  m.attr("handle_layout") = layout;
  m.def("annotate", &annotate, py::arg("values"),
        "Tracked copy of a float64 array whose cells are annotated; returns (array, base).");
  m.def("values", &values_of, py::arg("arr"), "Plain float64 values of a tracked array.");
  m.def("assign_values", &assign_values, py::arg("arr"), py::arg("values"),
        "Overwrite a C-contiguous tracked array's values in place, keeping its handles.");
  m.def("extract", &extract, py::arg("out"), py::arg("in_shapes"), py::arg("considered") = false);
  m.def("extract_tables", &extract_tables, py::arg("out"), py::arg("in_shapes"),
        py::arg("considered") = false, py::arg("values") = py::none());
  m.def("stats", &stats);
  m.def("positional", &positional, py::arg("wins"), py::arg("lose"), py::arg("values"),
        "Tracked array: contributing set of win, considered also lose's, values given.");
  m.def("set_position_hook", &set_position_hook, py::arg("hook"), py::arg("positions_type"),
        "Install the hook of core/positions.py for index methods and tracked indexing.");
  m.def("original_method", &original_method, py::arg("name"),
        "NumPy's own ndarray method `name`, as it was before the positions hook.");
}
