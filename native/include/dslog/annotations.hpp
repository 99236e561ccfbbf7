// Annotation arena for the tracked_float annotator (pure C++, no Python).
//
// An annotated element carries a 64-bit handle naming a *set* of input cells. Cells are
// numbered globally within one capture: input array k owns ids [base_k, base_k + size_k), so a
// cell annotation is one uint64 (array id and flat int64 index are recovered at extraction).
//
// Handle layout (0 = empty set):
//   bits 50..63  epoch of the capture that created it (never 0 for a non-empty handle)
//   bits 48..49  kind: kList (sorted vector), kCell (a single cell), kJoin (lazy union of two
//                handles), kPair (considered mode: {contributing set, considered set})
//   bits 40..47  est: upper bound on the number of cells reachable (255 = "many")
//   bits  0..39  payload: cell id, or index into the list / join / pair tables
//
// Sets are immutable once the ufunc call that built them returned, because NumPy copies
// elements (and so handles) with memcpy and calls no hook on copy or free. The one exception
// is an accumulator list created *during the current call* by a reduction: it is referenced by
// exactly one accumulator slot, so appending to it in place is safe and amortised O(1).
// Everything is freed in bulk when the capture ends.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

namespace dslog {

using Handle = uint64_t;

namespace hnd {
constexpr int kEstShift = 40;
constexpr int kKindShift = 48;
constexpr int kEpochShift = 50;
constexpr uint64_t kPayloadMask = (uint64_t{1} << 40) - 1;
constexpr uint32_t kEstMany = 255;
constexpr uint32_t kMaxEpoch = (1u << 14) - 1;
enum Kind : uint32_t { kList = 0, kCell = 1, kJoin = 2, kPair = 3 };

inline Kind kind(Handle h) { return Kind((h >> kKindShift) & 3u); }
inline uint32_t epoch(Handle h) { return uint32_t(h >> kEpochShift); }
inline uint64_t payload(Handle h) { return h & kPayloadMask; }
inline uint32_t est(Handle h) { return uint32_t((h >> kEstShift) & 0xffu); }
inline Handle make(uint32_t ep, Kind k, uint32_t e, uint64_t p) {
  return (uint64_t(ep) << kEpochShift) | (uint64_t(k) << kKindShift) |
         (uint64_t(std::min(e, kEstMany)) << kEstShift) | p;
}
}  // namespace hnd

enum class Mode { kContributing = 0, kConsidered = 1 };

// Growable table of trivially copyable records in fixed-size chunks: addresses never move, so
// growth costs no copy and no 2x peak (which matters at 1e8 elements).
template <class T, int kShift = 20>
class ChunkedTable {
 public:
  static constexpr size_t kChunk = size_t{1} << kShift;
  ChunkedTable() = default;
  ChunkedTable(const ChunkedTable&) = delete;
  ChunkedTable& operator=(const ChunkedTable&) = delete;
  ~ChunkedTable() {
    for (T* c : chunks_) std::free(c);
  }
  size_t push(const T& v) {
    if ((size_ >> kShift) == chunks_.size()) {
      T* c = static_cast<T*>(std::malloc(kChunk * sizeof(T)));
      if (!c) throw std::bad_alloc();
      chunks_.push_back(c);
    }
    size_t i = size_++;
    chunks_[i >> kShift][i & (kChunk - 1)] = v;
    return i;
  }
  T& operator[](size_t i) { return chunks_[i >> kShift][i & (kChunk - 1)]; }
  const T& operator[](size_t i) const { return chunks_[i >> kShift][i & (kChunk - 1)]; }
  size_t size() const { return size_; }
  size_t bytes_used() const { return size_ * sizeof(T); }
  size_t bytes_reserved() const { return chunks_.size() * kChunk * sizeof(T); }

 private:
  std::vector<T*> chunks_;
  size_t size_ = 0;
};

// A sorted list of cell ids. `dirty` = may be unsorted or hold duplicates (an accumulator
// that received out-of-order cells); it is normalised in place the first time it is read.
struct ListNode {
  uint64_t* data;
  uint32_t len : 31;
  uint32_t dirty : 1;
  uint32_t cap : 30;
  uint32_t heap : 1;  // data came from malloc (else from the bump pool)
  uint32_t acc : 1;   // created by an accumulation: its call may append to it in place
};
static_assert(sizeof(ListNode) == 16, "ListNode must stay 16 bytes");

// Per-input slice of an extracted relation: flat output index -> flat input index pairs,
// sorted lexicographically and duplicate-free.
struct FlatPairs {
  std::vector<int64_t> out_flat;
  std::vector<int64_t> in_flat;
};

class Arena {
 public:
  static constexpr uint32_t kJoinMax = 16;          // lazy unions stay this small
  static constexpr size_t kPoolChunk = size_t{1} << 20;  // uint64 entries per pool chunk
  static constexpr uint32_t kMaxLen = (1u << 30) - 1;

  Arena(uint32_t epoch, Mode mode) : epoch_(epoch), mode_(mode) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    for (size_t i : heap_lists_) std::free(lists_[i].data);
    for (uint64_t* c : pool_chunks_) std::free(c);
  }

  uint32_t epoch() const { return epoch_; }
  Mode mode() const { return mode_; }

  // ---- inputs --------------------------------------------------------------------------
  // Reserve a range of cell ids for an input of `size` cells; returns its base id.
  uint64_t add_input(uint64_t size) {
    uint64_t base = next_cell_;
    if (size > hnd::kPayloadMask - next_cell_)
      throw std::length_error("a capture may annotate at most 2^40 input cells in total");
    next_cell_ += size;
    bases_.push_back(base);
    sizes_.push_back(size);
    return base;
  }
  Handle cell(uint64_t id) const { return hnd::make(epoch_, hnd::kCell, 1, id); }
  const std::vector<uint64_t>& bases() const { return bases_; }

  // ---- per-call ownership --------------------------------------------------------------
  // Called once per ufunc call (ArrayMethod get_loop): lists created from here on by an
  // accumulation belong to this call and may be appended to in place.
  void begin_call() { call_list_start_ = lists_.size(); }

  bool valid(Handle h) const { return h == 0 || hnd::epoch(h) == epoch_; }

  // ---- value-semantics operations ------------------------------------------------------
  Handle contrib(Handle h) const {
    return hnd::kind(h) == hnd::kPair ? pairs_[hnd::payload(h)][0] : h;
  }
  Handle considered(Handle h) const {
    return hnd::kind(h) == hnd::kPair ? pairs_[hnd::payload(h)][1] : h;
  }

  // Union of two sets (arithmetic).
  Handle join(Handle a, Handle b) {
    if (hnd::kind(a) == hnd::kPair || hnd::kind(b) == hnd::kPair)
      return make_pair(join_plain(contrib(a), contrib(b)),
                       join_plain(considered(a), considered(b)));
    return join_plain(a, b);
  }

  // A value picked by comparison: only the winner contributes; in considered mode the loser
  // is recorded in the considered set.
  Handle pick(Handle win, Handle lose) {
    if (mode_ == Mode::kContributing) return share(win);
    return make_pair(share(contrib(win)), join_plain(considered(win), considered(lose)));
  }

  // acc <- acc ∪ x, in place when acc is this call's accumulator. `hint`: how many more
  // cells this accumulator is expected to receive (sizes the first allocation).
  void acc_join(Handle& acc, Handle x, size_t hint) {
    if (x == 0 || acc == x) return;
    if (hnd::kind(acc) != hnd::kPair && hnd::kind(x) != hnd::kPair) {
      acc_join_plain(acc, x, hint);
      return;
    }
    Handle c = contrib(acc), k = considered(acc);
    if (c == k && owned(k)) k = clone_owned(k, hint);
    acc_join_plain(c, contrib(x), hint);
    acc_join_plain(k, considered(x), hint);
    acc = (acc != 0 && hnd::kind(acc) == hnd::kPair && contrib(acc) == c && considered(acc) == k)
              ? acc
              : make_pair(c, k);
  }

  // acc <- pick(acc, x) in a reduction (maximum.reduce & co).
  void acc_pick(Handle& acc, Handle x, bool x_wins, size_t hint) {
    if (mode_ == Mode::kContributing) {
      if (x_wins) acc = share(x);
      return;
    }
    Handle c = x_wins ? share(contrib(x)) : contrib(acc);
    Handle k = considered(acc);
    if (k == c && owned(k)) k = clone_owned(k, hint);
    acc_join_plain(k, considered(x), hint);
    if (hnd::kind(acc) == hnd::kPair && contrib(acc) == c && considered(acc) == k) return;
    acc = make_pair(c, k);
  }

  // h's contributing set with `k` as its considered set (considered mode; sorts).
  Handle with_considered(Handle h, Handle k) {
    if (mode_ == Mode::kContributing) return h;
    return make_pair(share(contrib(h)), k);
  }

  // ---- n-ary union (dot products) --------------------------------------------------------
  // Collects many handles, then builds one set. Reusable; not thread-safe.
  class Builder {
   public:
    explicit Builder(Arena& a) : a_(a) {}
    void reset() {
      c_.clear();
      k_.clear();
      any_pair_ = false;
    }
    void add(Handle h) {
      if (h == 0) return;
      if (hnd::kind(h) == hnd::kPair) {
        if (!any_pair_) {
          k_ = c_;
          any_pair_ = true;
        }
        a_.collect(a_.contrib(h), c_);
        a_.collect(a_.considered(h), k_);
      } else {
        a_.collect(h, c_);
        if (any_pair_) a_.collect(h, k_);
      }
    }
    Handle finish() {
      Handle c = a_.from_cells(c_);
      if (!any_pair_) return c;
      return a_.make_pair(c, a_.from_cells(k_));
    }

   private:
    Arena& a_;
    std::vector<uint64_t> c_, k_;
    bool any_pair_ = false;
  };

  // ---- reading -------------------------------------------------------------------------
  // Sorted, duplicate-free cells of a non-pair handle. The pointer stays valid until the next
  // arena call; `scratch` is used for lazy unions.
  std::pair<const uint64_t*, size_t> cells(Handle h, std::vector<uint64_t>& scratch) {
    switch (hnd::kind(h)) {
      case hnd::kCell:
        scratch.assign(1, hnd::payload(h));
        return {scratch.data(), 1};
      case hnd::kList: {
        if (h == 0) return {nullptr, 0};
        ListNode& n = lists_[hnd::payload(h)];
        normalise(n);
        return {n.data, size_t(n.len)};
      }
      case hnd::kJoin:
        scratch.clear();
        collect(h, scratch);
        sort_unique(scratch);
        return {scratch.data(), scratch.size()};
      default:
        throw std::logic_error("cells() of a pair handle");
    }
  }

  // Split cell ids by input: which input owns `id`.
  size_t input_of(uint64_t id) const {
    auto it = std::upper_bound(bases_.begin(), bases_.end(), id);
    return size_t(it - bases_.begin()) - 1;
  }

  // ---- accounting ----------------------------------------------------------------------
  size_t bytes_used() const {
    return lists_.bytes_used() + joins_.bytes_used() + pairs_.bytes_used() + pool_used_ * 8 +
           heap_bytes_;
  }
  size_t bytes_reserved() const {
    return lists_.bytes_reserved() + joins_.bytes_reserved() + pairs_.bytes_reserved() +
           pool_chunks_.size() * kPoolChunk * 8 + heap_bytes_;
  }
  size_t n_lists() const { return lists_.size(); }
  size_t n_joins() const { return joins_.size(); }
  size_t n_pairs() const { return pairs_.size(); }

 private:
  friend class Builder;

  bool owned(Handle h) const {
    if (hnd::kind(h) != hnd::kList || h == 0) return false;
    size_t i = hnd::payload(h);
    return i >= call_list_start_ && lists_[i].acc;
  }

  // A handle about to be stored in a second slot: an accumulator of the running call must
  // not be shared (it may still grow), so it is copied.
  Handle share(Handle h) {
    if (!owned(h)) return h;
    ListNode& n = lists_[hnd::payload(h)];
    normalise(n);
    return new_list(n.data, n.len, n.len, false);
  }

  Handle make_pair(Handle c, Handle k) {
    if (c == k) return c;
    size_t i = pairs_.push({c, k});
    check_index(i);
    return hnd::make(epoch_, hnd::kPair, hnd::kEstMany, i);
  }

  Handle join_plain(Handle a, Handle b) {
    if (a == 0 || a == b) return share(b);
    if (b == 0) return share(a);
    uint32_t e = hnd::est(a) + hnd::est(b);
    if (e <= kJoinMax) {
      size_t i = joins_.push({a, b});
      check_index(i);
      return hnd::make(epoch_, hnd::kJoin, e, i);
    }
    // Materialise: sorted merge of both sides.
    // Both spans stay valid below: normalising works in place and allocation never moves
    // existing lists.
    auto [pa, na] = cells(a, scratch_a_);
    auto [pb, nb] = cells(b, scratch_b_);
    size_t cap = na + nb;
    check_len(cap);
    uint64_t* dst;
    bool heap;
    alloc(cap, dst, heap);
    size_t n = size_t(std::set_union(pa, pa + na, pb, pb + nb, dst) - dst);
    if (n == na && hnd::kind(a) == hnd::kList && !owned(a)) {
      release_last(dst, cap, heap);
      return a;
    }
    if (n == nb && hnd::kind(b) == hnd::kList && !owned(b)) {
      release_last(dst, cap, heap);
      return b;
    }
    return adopt_list(dst, uint32_t(n), uint32_t(cap), heap, false);
  }

  void acc_join_plain(Handle& acc, Handle x, size_t hint) {
    if (x == 0 || acc == x) return;
    if (acc == 0) {
      acc = share(x);
      return;
    }
    if (owned(acc)) {
      append(hnd::payload(acc), x, hint);
      return;
    }
    if (hnd::est(acc) + hnd::est(x) <= kJoinMax) {
      acc = join_plain(acc, x);
      return;
    }
    acc = clone_owned(acc, hint);
    append(hnd::payload(acc), x, hint);
  }

  Handle clone_owned(Handle h, size_t hint) {
    auto [p, n] = cells(h, scratch_a_);
    size_t cap = std::max<size_t>(n + std::min<size_t>(hint, kMaxLen), 4);
    cap = std::min<size_t>(cap, kMaxLen);
    return new_list(p, n, cap, true);
  }

  void append(size_t idx, Handle x, size_t hint) {
    ListNode& node = lists_[idx];
    if (hnd::kind(x) == hnd::kCell) {
      uint64_t id = hnd::payload(x);
      if (node.len == node.cap) grow(idx, 1, hint);
      if (node.len && node.data[node.len - 1] >= id) node.dirty = 1;
      node.data[node.len] = id;
      node.len = node.len + 1;
      return;
    }
    auto [p, n] = cells(x, scratch_b_);
    if (n == 0) return;
    if (node.len + n > node.cap) grow(idx, n, hint);
    if (node.len && node.data[node.len - 1] >= p[0]) node.dirty = 1;
    std::memcpy(node.data + node.len, p, n * 8);
    node.len = uint32_t(node.len + n);
  }

  void grow(size_t idx, size_t extra, size_t hint) {
    ListNode& node = lists_[idx];
    size_t need = size_t(node.len) + extra;
    check_len(need);
    size_t cap = std::max({need, size_t(node.cap) + size_t(node.cap) / 2, size_t(16)});
    cap = std::max(cap, std::min(need + hint, size_t(kMaxLen)));
    cap = std::min(cap, size_t(kMaxLen));
    if (node.heap) {
      void* p = std::realloc(node.data, cap * 8);
      if (!p) throw std::bad_alloc();
      heap_bytes_ += (cap - node.cap) * 8;
      node.data = static_cast<uint64_t*>(p);
    } else {
      auto* p = static_cast<uint64_t*>(std::malloc(cap * 8));
      if (!p) throw std::bad_alloc();
      std::memcpy(p, node.data, size_t(node.len) * 8);
      node.data = p;
      node.heap = 1;
      heap_bytes_ += cap * 8;
      heap_lists_.push_back(idx);
    }
    node.cap = uint32_t(cap);
  }

  Handle new_list(const uint64_t* src, size_t n, size_t cap, bool acc) {
    check_len(cap);
    uint64_t* dst;
    bool heap;
    alloc(cap, dst, heap);
    if (n) std::memcpy(dst, src, n * 8);
    return adopt_list(dst, uint32_t(n), uint32_t(cap), heap, acc);
  }

  Handle adopt_list(uint64_t* data, uint32_t n, uint32_t cap, bool heap, bool acc) {
    ListNode node{};
    node.data = data;
    node.len = n;
    node.cap = cap;
    node.heap = heap;
    node.acc = acc;
    node.dirty = 0;
    size_t i = lists_.size();
    check_index(i);
    lists_.push(node);
    if (heap) {
      heap_lists_.push_back(i);
      heap_bytes_ += size_t(cap) * 8;
    }
    return hnd::make(epoch_, hnd::kList, acc ? hnd::kEstMany : n, i);
  }

  Handle from_cells(std::vector<uint64_t>& v) {
    sort_unique(v);
    if (v.empty()) return 0;
    if (v.size() == 1) return cell(v[0]);
    if (v.size() == 2) {
      size_t i = joins_.push({cell(v[0]), cell(v[1])});
      check_index(i);
      return hnd::make(epoch_, hnd::kJoin, 2, i);
    }
    return new_list(v.data(), v.size(), v.size(), false);
  }

  // Append every cell reachable from a non-pair handle to `out` (may hold duplicates).
  void collect(Handle h, std::vector<uint64_t>& out) {
    if (h == 0) return;
    switch (hnd::kind(h)) {
      case hnd::kCell:
        out.push_back(hnd::payload(h));
        return;
      case hnd::kList: {
        ListNode& n = lists_[hnd::payload(h)];
        out.insert(out.end(), n.data, n.data + n.len);
        return;
      }
      case hnd::kJoin: {
        stack_.clear();
        stack_.push_back(h);
        while (!stack_.empty()) {
          Handle t = stack_.back();
          stack_.pop_back();
          if (t == 0) continue;
          switch (hnd::kind(t)) {
            case hnd::kCell:
              out.push_back(hnd::payload(t));
              break;
            case hnd::kList: {
              ListNode& n = lists_[hnd::payload(t)];
              out.insert(out.end(), n.data, n.data + n.len);
              break;
            }
            case hnd::kJoin: {
              const auto& j = joins_[hnd::payload(t)];
              stack_.push_back(j[0]);
              stack_.push_back(j[1]);
              break;
            }
            default:
              throw std::logic_error("pair inside a join");
          }
        }
        return;
      }
      default:
        throw std::logic_error("collect() of a pair handle");
    }
  }

  static void sort_unique(std::vector<uint64_t>& v) {
    if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }

  static void normalise(ListNode& n) {
    if (!n.dirty) return;
    uint64_t* e = n.data + n.len;
    if (!std::is_sorted(n.data, e)) std::sort(n.data, e);
    n.len = uint32_t(std::unique(n.data, e) - n.data) & kMaxLen;
    n.dirty = 0;
  }

  void alloc(size_t n, uint64_t*& dst, bool& heap) {
    if (n > kPoolChunk / 8) {
      dst = static_cast<uint64_t*>(std::malloc(std::max<size_t>(n, 1) * 8));
      if (!dst) throw std::bad_alloc();
      heap = true;
      return;
    }
    if (pool_chunks_.empty() || pool_top_ + n > kPoolChunk) {
      auto* c = static_cast<uint64_t*>(std::malloc(kPoolChunk * 8));
      if (!c) throw std::bad_alloc();
      pool_chunks_.push_back(c);
      pool_top_ = 0;
    }
    dst = pool_chunks_.back() + pool_top_;
    pool_top_ += n;
    pool_used_ += n;
    heap = false;
  }

  void release_last(uint64_t* p, size_t n, bool heap) {
    if (heap) {
      std::free(p);
      return;
    }
    pool_top_ -= n;
    pool_used_ -= n;
  }

  static void check_len(size_t n) {
    if (n > kMaxLen)
      throw std::length_error("an output cell would carry more than 2^31-1 annotations");
  }
  static void check_index(size_t i) {
    if (i > hnd::kPayloadMask) throw std::length_error("annotation table exceeds 2^40 entries");
  }

  uint32_t epoch_;
  Mode mode_;
  ChunkedTable<ListNode> lists_;
  ChunkedTable<std::array<Handle, 2>> joins_;
  ChunkedTable<std::array<Handle, 2>> pairs_;
  std::vector<uint64_t*> pool_chunks_;
  size_t pool_top_ = 0;
  size_t pool_used_ = 0;
  size_t heap_bytes_ = 0;
  std::vector<size_t> heap_lists_;
  size_t call_list_start_ = 0;
  std::vector<uint64_t> bases_, sizes_;
  uint64_t next_cell_ = 0;
  std::vector<uint64_t> scratch_a_, scratch_b_;
  std::vector<Handle> stack_;
};

}  // namespace dslog
