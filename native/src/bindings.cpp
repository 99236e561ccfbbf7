// pybind11 bindings for the ProvRC kernels. Inputs are validated in Python
// (dslog_dagster.core.provrc) before they get here; this layer only converts buffers and
// releases the GIL around the native work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "dslog/provrc.hpp"

namespace py = pybind11;
using I64Array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

namespace {

dslog::RelationView view_of(const std::vector<I64Array>& cols, int l, std::vector<I64Array>& keep) {
  dslog::RelationView v;
  v.l = l;
  v.m = static_cast<int>(cols.size()) - l;
  if (v.m < 0) throw std::invalid_argument("output rank exceeds the number of columns");
  v.n = cols.empty() ? 0 : static_cast<int64_t>(cols[0].size());
  for (const auto& c : cols) {
    if (c.ndim() != 1) throw std::invalid_argument("relation columns must be 1-D");
    if (static_cast<int64_t>(c.size()) != v.n)
      throw std::invalid_argument("relation columns must have equal length");
    keep.push_back(c);
    v.cols.push_back(c.data());
  }
  return v;
}

py::array_t<int64_t> matrix(const std::vector<int64_t>& data, int64_t nrows, int64_t ncols) {
  py::array_t<int64_t> out({nrows, ncols});
  if (!data.empty()) std::memcpy(out.mutable_data(), data.data(), sizeof(int64_t) * data.size());
  return out;
}

py::dict table_dict(const dslog::ProvRCTable& t) {
  py::dict d;
  d["rows"] = t.rows;
  d["out_lo"] = matrix(t.out_lo, t.l, t.rows);
  d["out_hi"] = matrix(t.out_hi, t.l, t.rows);
  d["in_ref"] = matrix(t.in_ref, t.m, t.rows);
  d["in_q"] = matrix(t.in_q, t.m, t.rows);
  d["in_r"] = matrix(t.in_r, t.m, t.rows);
  d["in_mult"] = matrix(t.in_mult, t.m, t.rows);
  d["in_lo"] = matrix(t.in_lo, t.m, t.rows);
  d["in_hi"] = matrix(t.in_hi, t.m, t.rows);
  return d;
}

std::vector<int64_t> flat(const I64Array& a, int64_t expect_rows, int64_t expect_cols, const char* name) {
  if (a.ndim() != 2 || a.shape(0) != expect_rows || a.shape(1) != expect_cols)
    throw std::invalid_argument(std::string("table field `") + name + "` has the wrong shape");
  return std::vector<int64_t>(a.data(), a.data() + a.size());
}

dslog::ProvRCTable table_of(int l, int m, int64_t rows, const I64Array& out_lo, const I64Array& out_hi,
                            const I64Array& in_ref, const I64Array& in_q, const I64Array& in_r,
                            const I64Array& in_mult, const I64Array& in_lo, const I64Array& in_hi) {
  dslog::ProvRCTable t;
  t.l = l;
  t.m = m;
  t.rows = rows;
  t.out_lo = flat(out_lo, l, rows, "out_lo");
  t.out_hi = flat(out_hi, l, rows, "out_hi");
  t.in_ref = flat(in_ref, m, rows, "in_ref");
  t.in_q = flat(in_q, m, rows, "in_q");
  t.in_r = flat(in_r, m, rows, "in_r");
  t.in_mult = flat(in_mult, m, rows, "in_mult");
  t.in_lo = flat(in_lo, m, rows, "in_lo");
  t.in_hi = flat(in_hi, m, rows, "in_hi");
  for (int64_t i = 0; i < m * rows; ++i) {
    if (t.in_ref[i] >= l || t.in_ref[i] < -1)
      throw std::invalid_argument("table field `in_ref` names an output attribute out of range");
    if (t.in_ref[i] >= 0 && t.in_q[i] < 1)
      throw std::invalid_argument("table field `in_q` must be >= 1");
  }
  return t;
}

}  // namespace

PYBIND11_MODULE(_native, mod) {
  mod.doc() = "dslog native kernels: ProvRC compression, decompression and helpers.";

  mod.def(
      "sort_unique",
      [](const std::vector<I64Array>& cols, int l) {
        std::vector<I64Array> keep;
        auto view = view_of(cols, l, keep);
        dslog::Relation rel;
        {
          py::gil_scoped_release release;
          rel = dslog::sort_unique(view);
        }
        return py::make_tuple(matrix(rel.materialize(), rel.l + rel.m, rel.n), rel.n);
      },
      py::arg("cols"), py::arg("l"),
      "Sort a relation lexicographically and drop duplicates; returns ((l+m, n) array, n).");

  mod.def(
      "compress",
      [](const std::vector<I64Array>& cols, int l, bool relative, bool mirrored, bool progression,
         double abort_ratio, int threads, int sample_windows) {
        std::vector<I64Array> keep;
        auto view = view_of(cols, l, keep);
        dslog::CompressOptions opts;
        opts.relative = relative;
        opts.mirrored = mirrored;
        opts.progression = progression;
        opts.abort_ratio = abort_ratio;
        opts.threads = threads;
        opts.sample_windows = sample_windows;
        dslog::CompressResult res;
        {
          py::gil_scoped_release release;
          res = dslog::compress(view, opts);
        }
        py::dict d = table_dict(res.table);
        d["aborted"] = res.aborted;
        // The sorted relation is only needed when the columnar encoding may be chosen.
        const bool need_sorted = res.aborted || res.table.rows * 16 > res.sorted.n;
        d["sorted"] = need_sorted ? py::object(matrix(res.sorted.materialize(),
                                                      res.sorted.l + res.sorted.m, res.sorted.n))
                                  : py::object(py::none());
        d["n_unique"] = res.sorted.n;
        return d;
      },
      py::arg("cols"), py::arg("l"), py::arg("relative") = true, py::arg("mirrored") = true,
      py::arg("progression") = true, py::arg("abort_ratio") = 0.0, py::arg("threads") = 1,
      py::arg("sample_windows") = 0,
      "ProvRC-compress a relation given as l + m int64 columns.");

  mod.def(
      "decompress",
      [](int l, int m, int64_t rows, const I64Array& out_lo, const I64Array& out_hi,
         const I64Array& in_ref, const I64Array& in_q, const I64Array& in_r, const I64Array& in_mult,
         const I64Array& in_lo, const I64Array& in_hi) {
        auto t = table_of(l, m, rows, out_lo, out_hi, in_ref, in_q, in_r, in_mult, in_lo, in_hi);
        dslog::Relation rel;
        {
          py::gil_scoped_release release;
          rel = dslog::decompress(t);
        }
        return py::make_tuple(matrix(rel.materialize(), rel.l + rel.m, rel.n), rel.n);
      },
      "Expand a ProvRC table into its sorted, duplicate-free relation.");
}
