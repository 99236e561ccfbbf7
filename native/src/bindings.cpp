// pybind11 bindings for the ProvRC kernels. Inputs are validated in Python
// (dslog_dagster.core.provrc) before they get here; this layer only converts buffers and
// releases the GIL around the native work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <stdexcept>
#include <vector>

#include "dslog/provrc.hpp"
#include "dslog/query.hpp"

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

// The relation as an (l + m, n) array: an owned buffer is handed over without a copy.
py::array_t<int64_t> relation_matrix(dslog::Relation&& rel) {
  const int64_t ncols = rel.l + rel.m;
  if (!rel.data.empty() && static_cast<int64_t>(rel.data.size()) == ncols * rel.n) {
    auto* owned = new dslog::ColumnBuffer(std::move(rel.data));
    py::capsule free_when_done(owned, [](void* p) { delete static_cast<dslog::ColumnBuffer*>(p); });
    return py::array_t<int64_t>({ncols, rel.n}, owned->data(), free_when_done);
  }
  py::array_t<int64_t> out({ncols, rel.n});
  rel.copy_to(out.mutable_data());
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

// (K, d) int64 arrays of inclusive box bounds <-> dslog::Boxes.
dslog::Boxes boxes_of(const I64Array& lo, const I64Array& hi) {
  if (lo.ndim() != 2 || hi.ndim() != 2 || lo.shape(0) != hi.shape(0) || lo.shape(1) != hi.shape(1))
    throw std::invalid_argument("box bounds must be two (K, d) arrays of equal shape");
  dslog::Boxes b;
  b.k = lo.shape(0);
  b.d = static_cast<int>(lo.shape(1));
  b.lo.assign(lo.data(), lo.data() + lo.size());
  b.hi.assign(hi.data(), hi.data() + hi.size());
  return b;
}

py::tuple boxes_out(const dslog::Boxes& b) {
  return py::make_tuple(matrix(b.lo, b.k, b.d), matrix(b.hi, b.k, b.d));
}

std::vector<int64_t> shape_of(const std::vector<int64_t>& shape, int d) {
  if (static_cast<int>(shape.size()) != d)
    throw std::invalid_argument("boxes and shape have different ranks");
  for (int64_t s : shape)
    if (s < 0) throw std::invalid_argument("negative extent in shape");
  return shape;
}

// Names and modification times (ns) of the subdirectories of `path` whose names do not start
// with '.': one readdir pass, then an fstatat per entry relative to the open directory (no
// path resolution per entry), split over a few threads (the stat calls are the cost: ~2 us
// each here, 10^5 of them in a store of 10^6 operations), all without the GIL. An entry gone
// between readdir and fstatat is skipped, as a listing a moment later would not have it.
// Returns false with errno set when the directory cannot be opened or read.
bool subdir_mtimes(const std::string& path, std::vector<std::string>& names,
                   std::vector<int64_t>& times) {
  DIR* d = opendir(path.c_str());
  if (!d) return false;
  const int fd = dirfd(d);
  std::vector<std::string> found;
  errno = 0;
  while (struct dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) continue;
    found.emplace_back(e->d_name);
  }
  const int read_err = errno;
  std::vector<int64_t> mt(found.size(), -1);  // -1: gone, or not a directory
  auto stat_range = [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      struct stat st;
      if (fstatat(fd, found[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
        continue;
#ifdef __APPLE__
      const auto& t = st.st_mtimespec;
#else
      const auto& t = st.st_mtim;
#endif
      mt[i] = int64_t(t.tv_sec) * 1000000000 + int64_t(t.tv_nsec);
    }
  };
  constexpr size_t kPerThread = 4096;
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads = std::min<size_t>({hw, 8, (found.size() + kPerThread - 1) / kPerThread});
  if (n_threads <= 1) {
    stat_range(0, found.size());
  } else {
    std::vector<std::thread> pool;
    const size_t step = (found.size() + n_threads - 1) / n_threads;
    for (size_t t = 0; t < n_threads; ++t)
      pool.emplace_back(stat_range, std::min(found.size(), t * step),
                        std::min(found.size(), (t + 1) * step));
    for (auto& th : pool) th.join();
  }
  closedir(d);
  if (read_err) {
    errno = read_err;
    return false;
  }
  for (size_t i = 0; i < found.size(); ++i) {
    if (mt[i] < 0) continue;
    names.push_back(std::move(found[i]));
    times.push_back(mt[i]);
  }
  return true;
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
        const int64_t n = rel.n;
        return py::make_tuple(relation_matrix(std::move(rel)), n);
      },
      py::arg("cols"), py::arg("l"),
      "Sort a relation lexicographically and drop duplicates; returns ((l+m, n) array, n).");

  mod.def(
      "sort_runs_unique",
      [](py::array_t<int64_t, py::array::c_style> mat) {
        if (mat.ndim() != 2 || mat.shape(0) != 2) {
          throw std::invalid_argument("sort_runs_unique takes a (2, n) int64 matrix");
        }
        const int64_t n = mat.shape(1);
        int64_t* p = mat.mutable_data();
        py::gil_scoped_release release;
        return dslog::sort_runs_unique(p, p + n, n);
      },
      py::arg("mat"),
      "Sort a (2, n) matrix of pairs ordered by its first row within each run of it, in "
      "place, dropping repeats; returns the pairs kept (at the front) or -1 when the first "
      "row decreases.");

  mod.def(
      "repeat_into",
      [](py::array_t<int64_t, py::array::c_style> out, I64Array values, I64Array counts) {
        if (out.ndim() != 1 || values.ndim() != 1 || counts.ndim() != 1 ||
            values.shape(0) != counts.shape(0)) {
          throw std::invalid_argument(
              "repeat_into takes a 1-D int64 output and 1-D values and counts of one length");
        }
        int64_t* o = out.mutable_data();
        const int64_t n = out.shape(0);
        const int64_t g = values.shape(0);
        const int64_t* v = values.data();
        const int64_t* c = counts.data();
        int64_t r;
        {
          py::gil_scoped_release release;
          r = dslog::repeat_into(o, n, v, c, g);
        }
        if (r < 0) {
          throw std::invalid_argument(
              "repeat_into: counts must be positive and add up to the output's size");
        }
      },
      py::arg("out").noconvert(), py::arg("values"), py::arg("counts"),
      "Write each value repeated its count into out (C-contiguous int64, written in place: "
      "never converted), in one pass.");

  mod.def(
      "compress",
      [](const std::vector<I64Array>& cols, int l, bool relative, bool mirrored, bool progression,
         double abort_ratio, int threads, int sample_windows, bool fast_paths) {
        std::vector<I64Array> keep;
        auto view = view_of(cols, l, keep);
        dslog::CompressOptions opts;
        opts.relative = relative;
        opts.mirrored = mirrored;
        opts.progression = progression;
        opts.abort_ratio = abort_ratio;
        opts.threads = threads;
        opts.sample_windows = sample_windows;
        opts.fast_paths = fast_paths;
        dslog::CompressResult res;
        {
          py::gil_scoped_release release;
          res = dslog::compress(view, opts);
        }
        py::dict d = table_dict(res.table);
        d["aborted"] = res.aborted;
        // The sorted relation is only needed when the columnar encoding may be chosen.
        const bool need_sorted = res.aborted || res.table.rows * 16 > res.sorted.n;
        d["n_unique"] = res.sorted.n;
        // An input already sorted and duplicate-free is the sorted relation itself (not
        // copied: the caller holds it).
        d["presorted"] = !res.sorted.owns();
        d["sorted"] = need_sorted && res.sorted.owns()
                          ? py::object(relation_matrix(std::move(res.sorted)))
                          : py::object(py::none());
        return d;
      },
      py::arg("cols"), py::arg("l"), py::arg("relative") = true, py::arg("mirrored") = true,
      py::arg("progression") = true, py::arg("abort_ratio") = 0.0, py::arg("threads") = 1,
      py::arg("sample_windows") = 0, py::arg("fast_paths") = true,
      "ProvRC-compress a relation given as l + m int64 columns.");

  mod.def(
      "constant_columns",
      [](const std::vector<I64Array>& cols) {
        std::vector<I64Array> keep;
        auto view = view_of(cols, 0, keep);
        std::vector<bool> flags;
        {
          py::gil_scoped_release release;
          flags = dslog::constant_columns(view);
        }
        return flags;
      },
      py::arg("cols"),
      "Per column: does every pair hold the same value? (Stops at a column's first change.)");

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
        const int64_t n = rel.n;
        return py::make_tuple(relation_matrix(std::move(rel)), n);
      },
      "Expand a ProvRC table into its sorted, duplicate-free relation.");

  py::class_<dslog::PreparedTable>(mod, "PreparedTable",
                                   "A ProvRC table prepared for repeated in-situ queries.")
      .def(py::init([](int l, int m, int64_t rows, const I64Array& out_lo, const I64Array& out_hi,
                       const I64Array& in_ref, const I64Array& in_q, const I64Array& in_r,
                       const I64Array& in_mult, const I64Array& in_lo, const I64Array& in_hi) {
        auto t = table_of(l, m, rows, out_lo, out_hi, in_ref, in_q, in_r, in_mult, in_lo, in_hi);
        py::gil_scoped_release release;
        return new dslog::PreparedTable(std::move(t));
      }))
      .def(
          "hop",
          [](const dslog::PreparedTable& self, const I64Array& lo, const I64Array& hi,
             bool forward) {
            auto q = boxes_of(lo, hi);
            dslog::Boxes res;
            {
              py::gil_scoped_release release;
              res = self.hop(q, forward);
            }
            return boxes_out(res);
          },
          py::arg("lo"), py::arg("hi"), py::arg("forward"),
          "Cells linked to the query boxes, as normalised (lo, hi) boxes of the other side.");

  mod.def(
      "run_hops",
      [](const std::vector<const dslog::PreparedTable*>& tables, const std::vector<bool>& forwards,
         const I64Array& lo, const I64Array& hi) {
        if (tables.size() != forwards.size())
          throw std::invalid_argument("one direction per table is needed");
        auto cur = boxes_of(lo, hi);
        {
          py::gil_scoped_release release;
          for (size_t i = 0; i < tables.size(); ++i) cur = tables[i]->hop(cur, forwards[i]);
        }
        return boxes_out(cur);
      },
      py::arg("tables"), py::arg("forwards"), py::arg("lo"), py::arg("hi"),
      "Carry boxes through several prepared tables (shapes are checked by the caller).");

  mod.def(
      "normalize_boxes",
      [](const I64Array& lo, const I64Array& hi, bool dense) {
        auto b = boxes_of(lo, hi);
        dslog::Boxes res;
        {
          py::gil_scoped_release release;
          res = dslog::normalize(b, dense);
        }
        return boxes_out(res);
      },
      py::arg("lo"), py::arg("hi"), py::arg("dense") = true,
      "Union of boxes as disjoint boxes in canonical slab order (adjacent boxes merged).");

  mod.def(
      "boxes_to_flat",
      [](const I64Array& lo, const I64Array& hi, const std::vector<int64_t>& shape) {
        auto b = boxes_of(lo, hi);
        auto ext = shape_of(shape, b.d);
        const int64_t n = dslog::count_cells(b);
        py::array_t<int64_t> out(n);
        int64_t* o = out.mutable_data();
        {
          py::gil_scoped_release release;
          const auto stride = dslog::row_major_strides(ext);
          const std::vector<int64_t> origin(ext.size(), 0);
          int64_t w = 0;
          for (int64_t k = 0; k < b.k; ++k) {
            if (b.d == 0) {
              o[w++] = 0;
              continue;
            }
            dslog::for_each_run(b.lo.data() + k * b.d, b.hi.data() + k * b.d, stride, origin,
                                [&](int64_t off, int64_t len) {
                                  for (int64_t x = 0; x < len; ++x) o[w++] = off + x;
                                });
          }
          std::sort(o, o + n);
        }
        return out;
      },
      py::arg("lo"), py::arg("hi"), py::arg("shape"),
      "Sorted flat (C-order) indices of the cells of disjoint boxes.");

  mod.def(
      "flat_to_boxes",
      [](const I64Array& flat, const std::vector<int64_t>& shape) {
        const int d = static_cast<int>(shape.size());
        auto ext = shape_of(shape, d);
        std::vector<int64_t> f(flat.data(), flat.data() + flat.size());
        dslog::Boxes b;
        b.d = d;
        {
          py::gil_scoped_release release;
          std::sort(f.begin(), f.end());
          f.erase(std::unique(f.begin(), f.end()), f.end());
          if (d == 0) {
            b.k = f.empty() ? 0 : 1;
          } else {
            // Runs of consecutive flat indices along the last axis become one box each.
            const int64_t last = ext[d - 1];
            std::vector<int64_t> cell(static_cast<size_t>(d));
            size_t i = 0;
            while (i < f.size()) {
              size_t j = i + 1;
              while (j < f.size() && f[j] == f[j - 1] + 1 && f[j] % last != 0) ++j;
              int64_t rem = f[i];
              for (int a = d - 1; a >= 0; --a) {
                cell[a] = rem % ext[a];
                rem /= ext[a];
              }
              for (int a = 0; a < d; ++a) {
                b.lo.push_back(cell[a]);
                b.hi.push_back(a == d - 1 ? cell[a] + static_cast<int64_t>(j - i) - 1 : cell[a]);
              }
              ++b.k;
              i = j;
            }
          }
          b = dslog::normalize(b);
        }
        return boxes_out(b);
      },
      py::arg("flat"), py::arg("shape"),
      "Normalised boxes covering the given flat (C-order) cell indices (validated by the caller).");

  mod.def(
      "fill_mask",
      [](const I64Array& lo, const I64Array& hi, py::array_t<uint8_t, py::array::c_style> mask) {
        auto b = boxes_of(lo, hi);
        if (mask.ndim() != b.d) throw std::invalid_argument("mask and boxes have different ranks");
        std::vector<int64_t> ext(mask.shape(), mask.shape() + mask.ndim());
        uint8_t* o = mask.mutable_data();
        {
          py::gil_scoped_release release;
          const auto stride = dslog::row_major_strides(ext);
          const std::vector<int64_t> origin(ext.size(), 0);
          for (int64_t k = 0; k < b.k; ++k) {
            if (b.d == 0) {
              o[0] = 1;
              continue;
            }
            dslog::for_each_run(b.lo.data() + k * b.d, b.hi.data() + k * b.d, stride, origin,
                                [&](int64_t off, int64_t len) {
                                  std::memset(o + off, 1, static_cast<size_t>(len));
                                });
          }
        }
      },
      py::arg("lo"), py::arg("hi"), py::arg("mask"),
      "Set the cells of in-bounds boxes in a C-contiguous uint8/bool mask (validated by the caller).");

  mod.def(
      "subdir_mtimes",
      [](const std::string& path) {
        std::vector<std::string> names;
        std::vector<int64_t> times;
        bool ok;
        int err = 0;
        {
          py::gil_scoped_release release;
          ok = subdir_mtimes(path, names, times);
          if (!ok) err = errno;
        }
        if (!ok) {
          errno = err;
          PyErr_SetFromErrnoWithFilename(PyExc_OSError, path.c_str());
          throw py::error_already_set();
        }
        py::list out_names(names.size());
        for (size_t i = 0; i < names.size(); ++i) {
          // the file system's encoding, as os.scandir decodes names (undecodable bytes kept)
          PyObject* u = PyUnicode_DecodeFSDefaultAndSize(names[i].data(),
                                                          Py_ssize_t(names[i].size()));
          if (!u) throw py::error_already_set();
          out_names[i] = py::reinterpret_steal<py::object>(u);
        }
        py::array_t<int64_t> out_times(py::ssize_t(times.size()));
        if (!times.empty())
          std::memcpy(out_times.mutable_data(), times.data(), times.size() * sizeof(int64_t));
        return py::make_tuple(out_names, out_times);
      },
      py::arg("path"),
      "Names and modification times (ns) of the subdirectories of `path` not starting with '.' "
      "(OSError as os.scandir raises it).");
}
