// Annotation arena for the tracked_float annotator (pure C++, no Python).
//
// An annotated element carries a 64-bit handle naming a *set* of input cells. Cells are
// numbered globally within one capture: input array k owns ids [base_k, base_k + size_k), so a
// cell annotation is one uint64 (array id and flat int64 index are recovered at extraction).
//
// Handle layout (0 = empty set; widths and why in `namespace hnd` below):
//   bits 45..63  epoch of the capture that created it (never 0 for a non-empty handle)
//   bits 42..44  kind: kList (sorted vector), kCell (a single cell), kJoin (lazy union of two
//                handles), kPair (considered mode: {contributing set, considered set}),
//                kCell2 (two cells {c, c + d}, stored inline: d is entry `est` of the arena's
//                small table of distances), kProg (an arithmetic progression of cells
//                {start + k * stride : k < count}, an entry of the progression table)
//                kGroup (member j of a group: the progression {start0 + j * cstep + k * stride :
//                k < count}; one group holds the accumulators of a whole row of a reduction
//                along a non-contiguous axis, which then grow by one shared counter per row)
//                kCellSet (a few cells and a shared set {c} ∪ {c + r : r ∈ R} ∪ S: R (at most
//                16 positive offsets) and S (a set, or none) are entry `est` of the arena's
//                small table; its est is "many")
//   bits 34..41  est: upper bound on the number of cells reachable (255 = "many"); for kCell2
//                the index of its distance (its est is 2)
//   bits  0..33  payload: cell id, or index into the list / join / pair / progression tables
//
// kCell2 is what an element-wise binary operation of two annotated arrays produces: no table
// entry per element. kCellSet is what an element-wise operation of an annotated array with a
// broadcast annotated scalar produces (min-max scaling: x - x.min(), then / (max - min)): the
// scalar's set is entered once, every element names its own cell and that entry. It is also
// what a stencil produces (a 3×3 blur adds nine shifted slices): the offsets of the other
// cells from the first are one entry for every interior element. kProg is what a reduction along an axis accumulates (its cells arrive
// with a constant stride): appending is a counter increment, and no cell id is stored.
//
// Sets are immutable once the ufunc call that built them returned, because NumPy copies
// elements (and so handles) with memcpy and calls no hook on copy or free. The one exception
// is an accumulator list created *during the current call* by a reduction: it is referenced by
// exactly one accumulator slot, so appending to it in place is safe and amortised O(1).
// Everything is freed in bulk when the capture ends.
//
// Handles are read from array memory, which user code can fill with any bytes
// (`np.arange(8.0).view(tracked_float)`, `np.frombuffer(buf, tracked_float)`): nothing in NumPy
// lets a dtype refuse that. So every handle is validated where it is *dereferenced* (a table
// entry, a distance, a group member is read): the epoch must be the arena's, the kind a
// defined one and the payload inside its table (and a group member inside its group); else
// ForgedHandle is thrown. Copying a handle (negative, reshape, a lazy union that only stores
// it) needs no check, since every later dereference checks. Cell ids are plain numbers until
// extraction turns them into coordinates; extraction checks that they lie inside the inputs.
// A forged handle that happens to be in range with the right epoch is indistinguishable from
// a real one: it yields wrong lineage, never a wrong memory access.
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

// A handle that this arena never issued (bytes not produced by the capture). Never a logic
// error of the arena: the caller turns it into dslog_dagster.errors.ForgedLineageError.
class ForgedHandle : public std::runtime_error {
 public:
  explicit ForgedHandle(Handle h)
      : std::runtime_error("annotation handle not issued by the running capture"), handle(h) {}
  Handle handle;
};

namespace hnd {
// The 64 bits of a handle, narrowest first:
// * kind, 3 bits: the eight kinds below.
// * est, 8 bits: a size hint compared with thresholds up to kMaterialiseMax (64), and for
//   kCell2 the index of its distance in a table of 256 (kMaxDeltas): an element-wise binary
//   operation of two annotated arrays stores no table entry per element while its cells are
//   at most 256 distinct distances apart, which covers every stencil and shift we have seen.
// * payload, 34 bits: a cell id or a table index. Every input cell is a 16-byte element and
//   every table entry at least 16 bytes, so 2^34 of either is 256 GiB of annotations in one
//   capture, beyond the machines the annotator runs on; the limit is checked (add_input,
//   check_index), never wrapped. kGroup splits it into a group (14 bits) and a member (20).
// * epoch, the remaining 19 bits: which capture issued the handle. Epochs are issued once
//   per process, never reused, so a handle kept from an earlier capture (or from a capture in
//   another thread) never matches the running arena: 524,287 captures per process. The
//   counter is checked when a capture starts: once it is exhausted, captures are refused
//   (CaptureError), never aliased. The 13 bits of the first layout wrapped after 8,191
//   captures and then accepted stale handles with wrong lineage.
constexpr int kPayloadBits = 34;
constexpr int kEstShift = kPayloadBits;
constexpr int kKindShift = kEstShift + 8;
constexpr int kEpochShift = kKindShift + 3;
constexpr int kEpochBits = 64 - kEpochShift;
constexpr uint64_t kPayloadMask = (uint64_t{1} << kPayloadBits) - 1;
constexpr uint32_t kEstMany = 255;
constexpr uint32_t kMaxEpoch = (uint32_t{1} << kEpochBits) - 1;
static_assert(kEpochShift == 45 && kEpochBits == 19, "handle layout: see the comment above");
enum Kind : uint32_t {
  kList = 0,
  kCell = 1,
  kJoin = 2,
  kPair = 3,
  kCell2 = 4,
  kProg = 5,
  kGroup = 6,
  kCellSet = 7
};
// kGroup payload: group index in bits 20..39, member (column) in bits 0..19.
constexpr int kMemberBits = 20;
constexpr uint64_t kMemberMask = (uint64_t{1} << kMemberBits) - 1;

inline Kind kind(Handle h) { return Kind((h >> kKindShift) & 7u); }
// Epoch and kind together (bits 42..63), to check both with one compare.
inline uint32_t tag(Handle h) { return uint32_t(h >> kKindShift); }
inline uint32_t make_tag(uint32_t ep, Kind k) { return (ep << (kEpochShift - kKindShift)) | k; }
inline uint32_t epoch(Handle h) { return uint32_t(h >> kEpochShift); }
inline uint64_t payload(Handle h) { return h & kPayloadMask; }
inline uint32_t field8(Handle h) { return uint32_t((h >> kEstShift) & 0xffu); }
inline uint32_t est(Handle h) {
  const Kind k = kind(h);
  return k == kCell2 ? 2u : k == kCellSet ? kEstMany : field8(h);
}
// kCellSet payload: the cell in bits 0..29, the high 4 bits of its entry index above (the low
// 8 bits are the est field): 4096 entries, for captures of at most 2^30 cells (bigger ones
// never make kCellSet handles). A cell + 1 never carries into the index: cells stay below
// the capture's cell count.
constexpr int kWithCellBits = 30;
constexpr uint64_t kWithCellMask = (uint64_t{1} << kWithCellBits) - 1;
inline uint64_t with_cell(Handle h) { return h & kWithCellMask; }
inline uint32_t with_index(Handle h) {
  return field8(h) | uint32_t(((h & kPayloadMask) >> kWithCellBits) << 8);
}
// A kCellSet handle without its cell (epoch, kind, entry): `| cell` completes it.
inline Handle with_entry_bits(Handle h) { return h & ~kWithCellMask; }
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
//
// `refs`: some entries are not cells but handles (>= kRefMin: every handle has a non-zero
// epoch, every cell id is < 2^34) of shared sets this list includes *by reference*. That is
// how a reduction over `x - x.mean()` stays linear: every element carries {i} ∪ M with M the
// whole-array set, and the accumulator stores the cells i plus one reference to M instead of
// copying M per element. Sorted, references come after the cells. Readers flatten them.
constexpr uint64_t kRefMin = uint64_t{1} << hnd::kEpochShift;
struct ListNode {
  uint64_t* data;
  uint32_t len : 30;
  uint32_t refs : 1;
  uint32_t dirty : 1;
  uint32_t cap : 30;
  uint32_t heap : 1;  // data came from malloc (else from the bump pool)
  uint32_t acc : 1;   // created by an accumulation: its call may append to it in place
};
static_assert(sizeof(ListNode) == 16, "ListNode must stay 16 bytes");

// An arithmetic progression of cells {start, start + stride, ..., next - stride}, stride > 0,
// at least 2 cells. `acc` = created by an accumulation of the running call, which may extend
// it in place. The end is kept as `next` (the cell that would extend it), so extending is a
// compare and an add.
struct ProgNode {
  uint64_t next;  // plain words (no bit fields): the hot loop reads and writes them per cell
  uint64_t stride;
  uint64_t start;
  uint64_t acc;
  uint64_t count() const { return (next - start) / stride; }
};
static_assert(sizeof(ProgNode) == 32, "ProgNode must stay 32 bytes");

// A row of progressions sharing stride and count: member j = {start0 + j * cstep + k * stride}.
struct GroupNode {
  uint64_t start0;
  int64_t cstep;
  uint64_t stride;
  uint64_t count;
  uint64_t ncols;
  uint64_t acc;
};

// The cells of a set as either a progression or a sorted span (see Arena::seq).
struct CellSeq {
  const uint64_t* data;  // nullptr: the progression below
  uint64_t start, stride, count;
};

// Per-input slice of an extracted relation: flat output index -> flat input index pairs,
// sorted lexicographically and duplicate-free.
struct FlatPairs {
  std::vector<int64_t> out_flat;
  std::vector<int64_t> in_flat;
};

// Entry of the kCellSet table: the cells {c} ∪ {c + rel[k] : k < nrel} ∪ the set `shared`
// (0: none) for the cell c a handle names. rel ascending, positive.
struct WithNode {
  static constexpr uint32_t kMaxRel = 16;
  Handle shared;
  uint32_t nrel;
  uint32_t lead;  // bit k: own cell k (0: c, k: c + rel[k - 1]) is not one after another
  uint64_t rel[kMaxRel];
  uint64_t max_rel() const { return nrel ? rel[nrel - 1] : 0; }
};

class Arena {
 public:
  static constexpr uint32_t kJoinMax = 16;          // lazy unions stay this small
  // A union of two sets of together at most this many cells is materialised (a sorted,
  // duplicate-free list); a larger one becomes a lazy union node (16 bytes) that references
  // both sides, so a union with a big shared set costs O(1), never a copy of the set.
  static constexpr uint32_t kMaterialiseMax = 64;
  // An accumulator copies the cells of a set of at most this many cells; a larger set is
  // included by reference (see ListNode::refs).
  static constexpr uint64_t kInlineMax = 32;
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
      throw std::length_error("a capture may annotate at most 2^34 input cells in total");
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
  void begin_call() {
    call_list_start_ = lists_.size();
    call_prog_start_ = progs_.size();
    call_group_start_ = groups_.size();
  }

  bool valid(Handle h) const { return h == 0 || hnd::epoch(h) == epoch_; }

  // Exact validation of a handle read from array memory: 0, or this arena's epoch, a defined
  // kind and a payload that names an existing entry (cells: an id of an input; kCell2: an
  // existing distance and both cells inputs' ids; kGroup: a member inside its group). The
  // est field is a size hint only and never trusted, so it is not checked.
  bool check(Handle h) const {
    if (h == 0) return true;
    if (hnd::epoch(h) != epoch_) return false;
    const uint64_t p = hnd::payload(h);
    switch (hnd::kind(h)) {
      case hnd::kList:
        return p < lists_.size();
      case hnd::kCell:
        return p < next_cell_;
      case hnd::kJoin:
        return p < joins_.size();
      case hnd::kPair:
        return p < pairs_.size();
      case hnd::kCell2:
        return hnd::field8(h) < deltas_.size() && p + deltas_[hnd::field8(h)] < next_cell_;
      case hnd::kProg:
        return p < progs_.size();
      case hnd::kGroup: {
        const uint64_t g = p >> hnd::kMemberBits;
        return g < groups_.size() && (p & hnd::kMemberMask) < groups_[size_t(g)].ncols;
      }
      case hnd::kCellSet:
        return hnd::with_index(h) < withs_.size() &&
               hnd::with_cell(h) + withs_[hnd::with_index(h)].max_rel() < next_cell_;
    }
    return false;
  }
  // Total number of input cells (every valid cell id is below it).
  uint64_t n_cells() const { return next_cell_; }
  const std::vector<uint64_t>& sizes() const { return sizes_; }

  // ---- value-semantics operations ------------------------------------------------------
  Handle contrib(Handle h) const {
    return hnd::kind(h) == hnd::kPair ? pair_at(h)[0] : h;
  }
  Handle considered(Handle h) const {
    return hnd::kind(h) == hnd::kPair ? pair_at(h)[1] : h;
  }

  // Union of two sets (arithmetic).
  Handle join(Handle a, Handle b) {
    if (hnd::kind(a) == hnd::kPair || hnd::kind(b) == hnd::kPair)
      return make_pair(join_plain(contrib(a), contrib(b)),
                       join_plain(considered(a), considered(b)));
    return join_plain(a, b);
  }

  // A value picked by comparison: only the winner contributes; in considered mode the loser
  // is recorded in the considered set. `tie`: both operands compare equal (0.0 == -0.0; a NaN
  // never ties), so both are picked: the union of both sets, in both relations.
  Handle pick(Handle win, Handle lose, bool tie = false) {
    if (tie) return join(win, lose);
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

  // acc <- pick(acc, x) in a reduction (maximum.reduce & co). `tie`: x compares equal to the
  // accumulator's value, so x's sets join the accumulator's (every tied cell contributes).
  void acc_pick(Handle& acc, Handle x, bool x_wins, size_t hint, bool tie = false) {
    if (tie) {
      acc_join(acc, x, hint);
      return;
    }
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
        ListNode& n = list_at(h);
        normalise(n);
        if (!n.refs) return {n.data, size_t(n.len)};
        scratch.clear();
        collect(h, scratch);
        sort_unique(scratch);
        return {scratch.data(), scratch.size()};
      }
      case hnd::kJoin:
      case hnd::kCellSet:
        scratch.clear();
        collect(h, scratch);
        sort_unique(scratch);
        return {scratch.data(), scratch.size()};
      case hnd::kCell2:
      case hnd::kProg:
      case hnd::kGroup:
        scratch.clear();
        collect(h, scratch);
        return {scratch.data(), scratch.size()};
      default:  // a pair: only forged bytes put one here
        throw ForgedHandle(h);
    }
  }

  // The cells of a non-pair handle as a progression (kCell, kCell2, kProg: no expansion) or a
  // sorted duplicate-free span (valid until the next arena call), for fast extraction.
  CellSeq seq(Handle h, std::vector<uint64_t>& scratch) {
    switch (hnd::kind(h)) {
      case hnd::kCell:
        return {nullptr, hnd::payload(h), 1, 1};
      case hnd::kCell2:
        return {nullptr, hnd::payload(h), delta_at(h), 2};
      case hnd::kProg: {
        const ProgNode& p = prog_at(h);
        return {nullptr, p.start, p.stride, p.count()};
      }
      case hnd::kGroup: {
        const ProgNode p = member(h);
        return {nullptr, p.start, p.stride, p.count()};
      }
      default: {
        auto [p, n] = cells(h, scratch);
        return {p, 0, 0, n};
      }
    }
  }

  // Fast path of acc_join for a reduction step: `acc` is this call's progression and `x` its
  // next cell. False (nothing done) in every other case; the caller then uses acc_join.
  bool prog_extend(Handle acc, Handle x) {
    if (hnd::kind(acc) != hnd::kProg || hnd::kind(x) != hnd::kCell) return false;
    const size_t i = hnd::payload(acc);
    if (i < call_prog_start_ || i >= progs_.size() || hnd::epoch(acc) != epoch_) return false;
    ProgNode& p = progs_[i];
    if (!p.acc || hnd::payload(x) != p.next) return false;
    p.next = p.next + p.stride;
    return true;
  }

  // This call's progression behind `acc` (to extend in place), or nullptr.
  ProgNode* owned_prog(Handle acc) {
    if (hnd::kind(acc) != hnd::kProg) return nullptr;
    const size_t i = hnd::payload(acc);
    if (i < call_prog_start_ || i >= progs_.size() || hnd::epoch(acc) != epoch_) return nullptr;
    ProgNode& p = progs_[i];
    return p.acc ? &p : nullptr;
  }

  // The most recently used kCell2 distance and its index (0, -1 if none), so that hot loops
  // can keep them in registers.
  uint64_t last_delta() const { return last_delta_ < 0 ? 0 : deltas_[size_t(last_delta_)]; }
  int last_delta_index() const { return last_delta_; }
  // First progression index owned by the running call, and the node of index i (nodes of
  // indices in the same 2^20 block are contiguous).
  size_t call_prog_start() const { return call_prog_start_; }
  ProgNode* prog_node(size_t i) { return &progs_[i]; }
  static constexpr size_t kProgBlockShift = 20;

  // The kCell2 handle of cells {c, c + d} if d is the most recently used distance, else 0.
  Handle cell2_cached(uint64_t c, uint64_t d) const {
    if (last_delta_ < 0 || deltas_[size_t(last_delta_)] != d) return 0;
    return pack_cell2(c, uint32_t(last_delta_));
  }

  // ---- cells with a shared set (kCellSet) -----------------------------------------------
  // The kCellSet handle {c} ∪ s for a valid, immutable, non-pair, non-empty set s (never an
  // accumulator of the running call), or 0 when the table of shared sets is full (the caller
  // then builds the union as before). c must be an input cell.
  // The handle bits (epoch, kind, entry) of {c} ∪ s without the cell: `| c` completes them;
  // 0 when the table is full.
  Handle with_bits(Handle s) {
    if (s == 0) return 0;
    return with_bits(s, nullptr, 0);
  }
  // The bits of {c} ∪ {c + rel[k] : k < nrel} ∪ s (s may be 0 when nrel > 0); 0 when s is
  // not a set an entry may hold (a pair, this call's accumulator), rel is too long, or the
  // table is full. rel ascending, positive.
  Handle with_bits(Handle s, const uint64_t* rel, uint32_t nrel) {
    if ((s == 0 && nrel == 0) || nrel > WithNode::kMaxRel) return 0;
    if (next_cell_ > hnd::kWithCellMask + 1) return 0;  // cells must fit 30 bits
    if (s != 0 && (hnd::kind(s) == hnd::kPair || owned(s))) return 0;
    auto same = [&](const WithNode& w) {
      return w.shared == s && w.nrel == nrel && std::equal(rel, rel + nrel, w.rel);
    };
    if (last_with_ >= 0 && same(withs_[size_t(last_with_)]))
      return pack_with(uint32_t(last_with_));
    // An open-addressing index over the entries (4 slots per entry: never full).
    uint64_t key = s * 0x9E3779B97F4A7C15ull + nrel;
    for (uint32_t k = 0; k < nrel; ++k) key = (key ^ rel[k]) * 0x100000001b3ull;
    if (with_slots_.empty()) with_slots_.assign(2 * kMaxWiths, -1);
    size_t slot = size_t(key >> 40) & (with_slots_.size() - 1);
    for (; with_slots_[slot] >= 0; slot = (slot + 1) & (with_slots_.size() - 1))
      if (same(withs_[size_t(with_slots_[slot])]))
        return pack_with(uint32_t(last_with_ = with_slots_[slot]));
    if (withs_.size() >= kMaxWiths) return 0;
    with_slots_[slot] = int(withs_.size());
    WithNode w{s, nrel, 0, {}};
    std::copy(rel, rel + nrel, w.rel);
    // The cells of {c + 1} ∪ ... that {c} ∪ ... lacks: own cell k unless it is one after
    // another own cell (a reduction over consecutive cells appends only these).
    for (uint32_t k = 0; k <= nrel; ++k) {
      const uint64_t off = k == 0 ? 0 : rel[k - 1];
      if (!std::binary_search(rel, rel + nrel, off + 1)) w.lead |= 1u << k;
    }
    withs_.push_back(w);
    last_with_ = int(withs_.size() - 1);
    return pack_with(uint32_t(last_with_));
  }
  // No entry can be added any more (every new shape of cells goes through lazy unions).
  bool withs_full() const { return withs_.size() >= kMaxWiths; }
  // The entry of a kCellSet handle (checked).
  const WithNode& with_node(Handle h) const { return withs_[with_index(h)]; }
  // f(cell) for each own cell of kCellSet handle h, first cell first (checked: every one is
  // an input cell, else ForgedHandle). Its shared set is with_node(h).shared.
  template <class F>
  void each_own_cell(Handle h, F&& f) const {
    const WithNode& w = with_node(h);
    const uint64_t c = hnd::with_cell(h);
    if (c + w.max_rel() >= next_cell_) throw ForgedHandle(h);
    f(c);
    for (uint32_t k = 0; k < w.nrel; ++k) f(c + w.rel[k]);
  }

  // A cell-like handle (kCell, kCell2, kCellSet): its first cell and its entry's parts.
  struct CellLike {
    uint64_t base;
    uint32_t n;       // own cells: base + off[k], k < n (off[0] = 0, ascending)
    uint64_t off[WithNode::kMaxRel + 1];
    Handle shared;
  };
  // h (checked, cell-like) in parts; false for other kinds.
  bool cell_like(Handle h, CellLike& out) const {
    out.base = hnd::kind(h) == hnd::kCellSet ? hnd::with_cell(h) : hnd::payload(h);
    out.off[0] = 0;
    out.shared = 0;
    switch (hnd::kind(h)) {
      case hnd::kCell:
        out.n = 1;
        return true;
      case hnd::kCell2:
        out.n = 2;
        out.off[1] = delta_at(h);
        return true;
      case hnd::kCellSet: {
        const WithNode& w = with_node(h);
        out.n = 1 + w.nrel;
        std::copy(w.rel, w.rel + w.nrel, out.off + 1);
        out.shared = w.shared;
        return true;
      }
      default:
        return false;
    }
  }
  // The union of two cell-like handles x and y (checked) as one cell-like handle: a stencil
  // (x + shifted x) names its cells by offsets from its first, its shared sets joined. 0 when
  // the union has more than kMaxRel + 1 own cells or the table is full (the caller then
  // builds a lazy union).
  Handle cell_like_union(Handle x, Handle y) {
    CellLike a, b;
    if (!cell_like(x, a) || !cell_like(y, b)) return 0;
    const uint64_t base = std::min(a.base, b.base);
    uint64_t cells[2 * (WithNode::kMaxRel + 1)];
    uint32_t n = 0;
    for (uint32_t k = 0; k < a.n; ++k) cells[n++] = a.base - base + a.off[k];
    for (uint32_t k = 0; k < b.n; ++k) cells[n++] = b.base - base + b.off[k];
    std::sort(cells, cells + n);
    n = uint32_t(std::unique(cells, cells + n) - cells);
    if (n > WithNode::kMaxRel + 1) return 0;
    Handle sh = a.shared;
    if (b.shared != 0 && b.shared != sh) sh = sh == 0 ? b.shared : join_plain(sh, b.shared);
    if (sh == 0 && n == 1) return cell(base);
    if (sh == 0 && n == 2) {
      const Handle h2 = cell2_of(base, base + cells[1]);
      if (h2 != 0) return h2;
    }
    const Handle bits = with_bits(sh, cells + 1, n - 1);
    return bits ? (bits | base) : 0;
  }
  // acc <- acc ∪ x for a reduction step where x (kCellSet) is the handle after the previous
  // element's (the same entry, the next cell) and acc, this call's accumulator list, already
  // holds the previous element's set: only the cells x adds are appended (a sum over a blurred
  // image: 3 of the 9 cells per element). False (nothing done) otherwise.
  bool acc_join_next(Handle acc, Handle x, Handle prev) {
    if (acc == 0 || hnd::kind(acc) != hnd::kList || !owned(acc)) return false;
    if (x != prev + 1 || hnd::with_entry_bits(x) != hnd::with_entry_bits(prev)) return false;
    const WithNode& w = with_node(x);
    const uint64_t c = hnd::with_cell(x);
    if (c + w.max_rel() >= next_cell_) throw ForgedHandle(x);
    const size_t idx = hnd::payload(acc);
    for (uint32_t k = 0, m = w.lead; m != 0; ++k, m >>= 1)
      if (m & 1u) push_entry(idx, k == 0 ? c : c + w.rel[k - 1], 0);
    return true;
  }

  // Every cell of the small set s lies in b (see covers(); false when not decidable cheaply).
  bool covers_set(Handle b, Handle s) { return covers(b, s); }

  // The cells of list h form one interval [lo, hi] (sorted, no references): then a cell is
  // in it by two compares.
  bool dense_list(Handle h, uint64_t& lo, uint64_t& hi) const {
    if (h == 0 || hnd::kind(h) != hnd::kList) return false;
    const ListNode& n = list_at(h);
    if (n.refs || n.dirty || n.len == 0) return false;
    lo = n.data[0];
    hi = n.data[n.len - 1];
    return hi - lo == uint64_t(n.len) - 1;
  }

  // The largest offset of a cell-like handle's own cells from its first (checked).
  uint64_t cell_like_max(Handle h) const {
    switch (hnd::kind(h)) {
      case hnd::kCell2:
        return delta_at(h);
      case hnd::kCellSet:
        return with_node(h).max_rel();
      default:
        return 0;
    }
  }
  // Every cell of kCellSet handle s (checked) lies in set b, decided as covers() does.
  bool with_covered(Handle b, Handle s) {
    const WithNode& w = with_node(s);
    const uint64_t c = hnd::with_cell(s);
    if (!holds(b, c, 2)) return false;
    for (uint32_t k = 0; k < w.nrel; ++k)
      if (!holds(b, c + w.rel[k], 2)) return false;
    return w.shared == 0 || w.shared == b || covers(b, w.shared);
  }
  // Sort list h in place now (it is sorted on first read anyway), so that membership tests
  // (covers, holds) can decide against it: a statistic broadcast over an array is tested
  // once per element.
  void normalise_list(Handle h) {
    if (h != 0 && hnd::kind(h) == hnd::kList) normalise(list_at(h));
  }

  // ---- groups (row-wise reductions) -------------------------------------------------------
  // A new group of this call with `ncols` members, each {start0 + j * cstep + k * stride :
  // k < count}; returns the handle of member 0 (member j is that + j), or 0 when the group
  // does not fit the handle layout (then the caller goes element by element).
  Handle new_group(uint64_t start0, int64_t cstep, uint64_t stride, uint64_t count,
                   uint64_t ncols) {
    if (ncols == 0 || ncols > hnd::kMemberMask + 1 ||
        groups_.size() >= (size_t{1} << (hnd::kPayloadBits - hnd::kMemberBits)))
      return 0;
    size_t g = groups_.push(GroupNode{start0, cstep, stride, count, ncols, 1});
    return hnd::make(epoch_, hnd::kGroup, hnd::kEstMany, uint64_t(g) << hnd::kMemberBits);
  }
  // This call's group behind member handle `h`, or nullptr.
  GroupNode* owned_group(Handle h) {
    if (hnd::kind(h) != hnd::kGroup) return nullptr;
    const size_t g = size_t(hnd::payload(h) >> hnd::kMemberBits);
    if (g < call_group_start_ || g >= groups_.size() || hnd::epoch(h) != epoch_) return nullptr;
    GroupNode& n = groups_[g];
    return n.acc && (hnd::payload(h) & hnd::kMemberMask) < n.ncols ? &n : nullptr;
  }
  // The distance d of a kCell2 handle {c, c + d}.
  uint64_t cell2_delta(Handle h) const { return delta_at(h); }
  // Handle of the single cell c (for comparisons in hot loops).
  Handle cell_handle(uint64_t c) const { return cell(c); }

  // The kCell2 handle of the cells {a, b} (a != b), or 0 when their distance has no entry
  // left in the table (nothing is allocated).
  Handle cell2_of(uint64_t a, uint64_t b) {
    if (a > b) std::swap(a, b);
    const int d = delta_index(b - a);
    return d >= 0 ? pack_cell2(a, uint32_t(d)) : 0;
  }

  // Element-wise union of two single cells without a table entry when possible (kCell2).
  Handle join_cells(uint64_t a, uint64_t b) {
    if (a == b) return cell(a);
    if (a > b) std::swap(a, b);
    int d = delta_index(b - a);
    if (d >= 0) return pack_cell2(a, uint32_t(d));
    size_t i = joins_.push({cell(a), cell(b)});
    check_index(i);
    return hnd::make(epoch_, hnd::kJoin, 2, i);
  }

  // Split cell ids by input: which input owns `id`.
  size_t input_of(uint64_t id) const {
    auto it = std::upper_bound(bases_.begin(), bases_.end(), id);
    return size_t(it - bases_.begin()) - 1;
  }

  // ---- structure, for the factorised extraction (extract.cpp) -----------------------------
  // Both sides of a lazy union (checked).
  std::array<Handle, 2> join_sides(Handle h) const { return join_at(h); }
  // The entries of a list, normalised (sorted, duplicate-free): cells (< kRefMin) first, then
  // references to shared sets. Valid until the next arena call that adds entries.
  std::pair<const uint64_t*, size_t> list_entries(Handle h) {
    ListNode& n = list_at(h);
    normalise(n);
    return {n.data, size_t(n.len)};
  }
  bool list_has_refs(Handle h) const { return list_at(h).refs; }
  // The progression of a kProg or kGroup handle (checked).
  ProgNode progression(Handle h) const {
    return hnd::kind(h) == hnd::kGroup ? member(h) : prog_at(h);
  }
  // The group of member handle h (checked), and whether h is a set the running call may
  // still grow (an accumulator: never stored in a second slot as is, see share()).
  const GroupNode& group_of(Handle h) const { return group_at(h); }
  // A new (immutable) progression {start + t * stride : t < count}, count >= 1.
  Handle make_progression(uint64_t start, uint64_t stride, uint64_t count) {
    return count == 1 ? cell(start) : new_prog(start, stride, count, false);
  }
  bool is_owned(Handle h) const { return owned(h); }

  // ---- accounting ----------------------------------------------------------------------
  size_t bytes_used() const {
    return lists_.bytes_used() + joins_.bytes_used() + pairs_.bytes_used() +
           progs_.bytes_used() + groups_.bytes_used() + pool_used_ * 8 + heap_bytes_;
  }
  size_t bytes_reserved() const {
    return lists_.bytes_reserved() + joins_.bytes_reserved() + pairs_.bytes_reserved() +
           progs_.bytes_reserved() + groups_.bytes_reserved() +
           pool_chunks_.size() * kPoolChunk * 8 + heap_bytes_;
  }
  size_t n_lists() const { return lists_.size(); }
  size_t n_joins() const { return joins_.size(); }
  size_t n_pairs() const { return pairs_.size(); }
  size_t n_progs() const { return progs_.size(); }

 private:
  friend class Builder;

  bool owned(Handle h) const {
    if (h == 0) return false;
    size_t i = hnd::payload(h);
    switch (hnd::kind(h)) {
      case hnd::kList:
        return i >= call_list_start_ && list_at(h).acc;
      case hnd::kProg:
        return i >= call_prog_start_ && prog_at(h).acc;
      case hnd::kGroup: {
        const size_t g = i >> hnd::kMemberBits;
        return g >= call_group_start_ && group_at(h).acc;
      }
      default:
        return false;
    }
  }

  // The progression of group member h.
  ProgNode member(Handle h) const {
    const GroupNode& g = group_at(h);
    const uint64_t j = hnd::payload(h) & hnd::kMemberMask;
    const uint64_t start = g.start0 + uint64_t(int64_t(j) * g.cstep);
    return ProgNode{start + g.count * g.stride, g.stride, start, 0};
  }

  // ---- checked access to the tables (see "Handles are read from array memory" above) ------
  // The table index of h, which must be this arena's handle of kind k with payload < n.
  size_t index_of(Handle h, hnd::Kind k, size_t n) const {
    const uint64_t p = hnd::payload(h);
    if (hnd::tag(h) != hnd::make_tag(epoch_, k) || p >= n) throw ForgedHandle(h);
    return size_t(p);
  }
  ListNode& list_at(Handle h) { return lists_[index_of(h, hnd::kList, lists_.size())]; }
  const ListNode& list_at(Handle h) const {
    return lists_[index_of(h, hnd::kList, lists_.size())];
  }
  const std::array<Handle, 2>& join_at(Handle h) const {
    return joins_[index_of(h, hnd::kJoin, joins_.size())];
  }
  const std::array<Handle, 2>& pair_at(Handle h) const {
    return pairs_[index_of(h, hnd::kPair, pairs_.size())];
  }
  ProgNode& prog_at(Handle h) { return progs_[index_of(h, hnd::kProg, progs_.size())]; }
  const ProgNode& prog_at(Handle h) const {
    return progs_[index_of(h, hnd::kProg, progs_.size())];
  }
  // The group of member handle h (the member must be inside it).
  const GroupNode& group_at(Handle h) const {
    const uint64_t p = hnd::payload(h);
    const uint64_t g = p >> hnd::kMemberBits;
    if (hnd::tag(h) != hnd::make_tag(epoch_, hnd::kGroup) || g >= groups_.size() ||
        (p & hnd::kMemberMask) >= groups_[size_t(g)].ncols)
      throw ForgedHandle(h);
    return groups_[size_t(g)];
  }
  // The distance d of a kCell2 handle {c, c + d}.
  uint64_t delta_at(Handle h) const {
    const uint32_t i = hnd::field8(h);
    if (hnd::tag(h) != hnd::make_tag(epoch_, hnd::kCell2) || i >= deltas_.size())
      throw ForgedHandle(h);
    return deltas_[i];
  }

  // The table index of kCellSet handle h (checked).
  size_t with_index(Handle h) const {
    const uint32_t i = hnd::with_index(h);
    if (hnd::tag(h) != hnd::make_tag(epoch_, hnd::kCellSet) || i >= withs_.size())
      throw ForgedHandle(h);
    return i;
  }
  static constexpr size_t kMaxWiths = 4096;
  Handle pack_with(uint32_t e) const {
    return (uint64_t(epoch_) << hnd::kEpochShift) |
           (uint64_t(hnd::kCellSet) << hnd::kKindShift) | (uint64_t(e & 255u) << hnd::kEstShift) |
           (uint64_t(e >> 8) << hnd::kWithCellBits);
  }

  // ---- distances of kCell2 handles (a small open-addressing map) --------------------------
  static constexpr size_t kMaxDeltas = 256;
  static constexpr size_t kDeltaSlots = 1024;
  Handle pack_cell2(uint64_t c, uint32_t d) const {
    return (uint64_t(epoch_) << hnd::kEpochShift) | (uint64_t(hnd::kCell2) << hnd::kKindShift) |
           (uint64_t(d) << hnd::kEstShift) | c;
  }
  // Index of distance d > 0 in the table (added if new), or -1 when the table is full.
  int delta_index(uint64_t d) {
    if (last_delta_ >= 0 && deltas_[size_t(last_delta_)] == d) return last_delta_;
    if (delta_slots_.empty()) delta_slots_.assign(kDeltaSlots, -1);
    size_t s = size_t((d * 0x9E3779B97F4A7C15ull) >> 54) & (kDeltaSlots - 1);
    while (delta_slots_[s] >= 0) {
      if (deltas_[size_t(delta_slots_[s])] == d) return last_delta_ = delta_slots_[s];
      s = (s + 1) & (kDeltaSlots - 1);
    }
    if (deltas_.size() >= kMaxDeltas) return -1;
    delta_slots_[s] = int(deltas_.size());
    deltas_.push_back(d);
    return last_delta_ = int(deltas_.size() - 1);
  }

  // ---- progressions ----------------------------------------------------------------------
  Handle new_prog(uint64_t start, uint64_t stride, uint64_t count, bool acc) {
    size_t i = progs_.push(ProgNode{start + count * stride, stride, start, acc ? 1u : 0u});
    check_index(i);
    return hnd::make(epoch_, hnd::kProg,
                     acc ? hnd::kEstMany : uint32_t(std::min<uint64_t>(count, hnd::kEstMany)), i);
  }
  // The cells of an owned progression as an owned list with room for `extra` more.
  Handle prog_to_list(Handle h, size_t extra) {
    const ProgNode p = prog_at(h);
    const uint64_t count = p.count();
    check_len(size_t(count));
    size_t cap = std::min<size_t>(size_t(count) + std::max<size_t>(extra, 16), kMaxLen);
    uint64_t* dst;
    bool heap;
    alloc(cap, dst, heap);
    for (uint64_t k = 0; k < count; ++k) dst[k] = p.start + k * p.stride;
    return adopt_list(dst, uint32_t(count), uint32_t(cap), heap, true);
  }

  // A handle about to be stored in a second slot: an accumulator of the running call must
  // not be shared (it may still grow), so it is copied.
  Handle share(Handle h) {
    if (!owned(h)) return h;
    if (hnd::kind(h) == hnd::kGroup) {
      const ProgNode p = member(h);
      return new_prog(p.start, p.stride, p.count(), false);
    }
    if (hnd::kind(h) == hnd::kProg) {
      const ProgNode p = prog_at(h);
      return new_prog(p.start, p.stride, p.count(), false);
    }
    ListNode& n = list_at(h);
    normalise(n);
    Handle out = new_list(n.data, n.len, n.len, false);
    if (!lists_[hnd::payload(h)].refs) return out;
    // With references its size is unknown: "many", so it is never materialised by a union.
    lists_[hnd::payload(out)].refs = 1;
    return hnd::make(epoch_, hnd::kList, hnd::kEstMany, hnd::payload(out));
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
    if (hnd::kind(a) == hnd::kCell && hnd::kind(b) == hnd::kCell)
      return join_cells(hnd::payload(a), hnd::payload(b));
    uint32_t e = hnd::est(a) + hnd::est(b);
    if (e <= kJoinMax) {
      size_t i = joins_.push({a, b});
      check_index(i);
      return hnd::make(epoch_, hnd::kJoin, e, i);
    }
    if (e > kMaterialiseMax) {
      // A small set inside the big one (x - x.mean(): {i} ∪ M with i ∈ M; standardize's
      // column statistics): the union is the big set itself, no node and no set work.
      if (hnd::est(a) <= kJoinMax && covers(b, a)) return share(b);
      if (hnd::est(b) <= kJoinMax && covers(a, b)) return share(a);
      if (same_progression(a, b)) return share(a);
      // Lazy union by reference: O(1) whatever the sizes (x - x.mean() gives every cell
      // {i} ∪ M; copying M per cell would cost cells² annotations). Readers flatten.
      a = share(a);
      b = share(b);
      if (has_child(a, b)) return a;  // (A ∪ B) ∪ B, e.g. (x - m) - m
      if (has_child(b, a)) return b;
      size_t i = joins_.push({a, b});
      check_index(i);
      return hnd::make(epoch_, hnd::kJoin, e, i);
    }
    // Materialise: sorted merge of both sides (at most kMaterialiseMax cells).
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
      if (hnd::kind(acc) == hnd::kGroup) {  // leaves its group: a progression of its own
        const ProgNode p = member(acc);
        acc = new_prog(p.start, p.stride, p.count(), true);
      }
      if (hnd::kind(acc) == hnd::kProg) {
        ProgNode& p = prog_at(acc);
        if (hnd::kind(x) == hnd::kCell && hnd::payload(x) == p.next) {
          p.next = p.next + p.stride;
          return;
        }
        acc = prog_to_list(acc, hint);
      }
      append(hnd::payload(acc), x, hint);
      return;
    }
    // Reductions along an axis: cells arriving with a constant stride become a progression.
    if (hnd::kind(x) == hnd::kCell) {
      const uint64_t c = hnd::payload(x);
      if (hnd::kind(acc) == hnd::kCell && c > hnd::payload(acc)) {
        const uint64_t a0 = hnd::payload(acc);
        int d = delta_index(c - a0);
        acc = d >= 0 ? pack_cell2(a0, uint32_t(d)) : new_prog(a0, c - a0, 2, true);
        return;
      }
      if (hnd::kind(acc) == hnd::kCell2) {
        const uint64_t a0 = hnd::payload(acc), d = delta_at(acc);
        if (c == a0 + 2 * d) {
          acc = new_prog(a0, d, 3, true);
          return;
        }
      }
    }
    if (hnd::est(acc) + hnd::est(x) <= kJoinMax) {
      acc = join_plain(acc, x);
      return;
    }
    acc = clone_owned(acc, hint);
    append(hnd::payload(acc), x, hint);
  }

  // A new accumulator list of this call holding the set h (big parts by reference), with
  // room for `hint` more entries.
  Handle clone_owned(Handle h, size_t hint) {
    // + a few entries for references (the hint counts elements still to come).
    size_t cap = std::max<size_t>(std::min<size_t>(hint + 8, kMaxLen), 4);
    if (hnd::kind(h) == hnd::kList && h != 0) {
      // Copy the entries as they are (references stay references).
      const ListNode& src = list_at(h);
      cap = std::min<size_t>(size_t(src.len) + cap, kMaxLen);
      Handle out = new_list(src.data, src.len, cap, true);
      ListNode& dst = lists_[hnd::payload(out)];
      const ListNode& s2 = lists_[hnd::payload(h)];
      dst.refs = s2.refs;
      dst.dirty = s2.dirty;
      return out;
    }
    Handle out = new_list(nullptr, 0, std::min<size_t>(cap, kMaxLen), true);
    append(hnd::payload(out), h, hint);
    return out;
  }

  // Append the set x to this call's accumulator list `idx`: small sets as cells, big ones
  // (more than kInlineMax cells) as one reference each, found down to `depth` levels of lazy
  // unions, so {i} ∪ M appends the cell i and (once per accumulator) a reference to M.
  void append(size_t idx, Handle x, size_t hint, int depth = 3) {
    if (x == 0) return;
    switch (hnd::kind(x)) {
      case hnd::kCell:
        push_entry(idx, hnd::payload(x), hint);
        return;
      case hnd::kCell2:
        push_entry(idx, hnd::payload(x), hint);
        push_entry(idx, hnd::payload(x) + delta_at(x), hint);
        return;
      case hnd::kProg:
      case hnd::kGroup: {
        const ProgNode p = hnd::kind(x) == hnd::kGroup ? member(x) : prog_at(x);
        if (p.count() > kInlineMax) {
          push_ref(idx, share(x), hint);
          return;
        }
        for (uint64_t c = p.start; c < p.next; c += p.stride) push_entry(idx, c, hint);
        return;
      }
      case hnd::kList: {
        const ListNode& n = list_at(x);
        if (n.refs || n.len > kInlineMax) {
          push_ref(idx, share(x), hint);
          return;
        }
        const size_t len = n.len;
        if (len == 0) return;
        if (lists_[idx].len + len > lists_[idx].cap) grow(idx, len, hint);
        ListNode& node = lists_[idx];
        const ListNode& src = lists_[hnd::payload(x)];
        if (src.dirty || (node.len && node.data[node.len - 1] >= src.data[0])) node.dirty = 1;
        std::memcpy(node.data + node.len, src.data, len * 8);
        node.len = uint32_t(node.len + len) & kMaxLen;
        return;
      }
      case hnd::kCellSet:
        each_own_cell(x, [&](uint64_t c) { push_entry(idx, c, hint); });
        append(idx, with_node(x).shared, hint, depth);
        return;
      case hnd::kJoin: {
        if (hnd::est(x) <= kInlineMax) {  // small: its cells (bounded by est)
          std::vector<uint64_t>& tmp = scratch_b_;
          tmp.clear();
          collect(x, tmp);
          for (uint64_t c : tmp) push_entry(idx, c, hint);
          return;
        }
        if (depth == 0) {
          push_ref(idx, x, hint);
          return;
        }
        const auto j = join_at(x);
        append(idx, j[0], hint, depth - 1);
        append(idx, j[1], hint, depth - 1);
        return;
      }
      default:  // a pair: only forged bytes put one here
        throw ForgedHandle(x);
    }
  }

  void push_entry(size_t idx, uint64_t e, size_t hint) {
    ListNode* node = &lists_[idx];
    if (node->len == node->cap) {
      grow(idx, 1, hint);
      node = &lists_[idx];
    }
    if (node->len && node->data[node->len - 1] >= e) node->dirty = 1;
    node->data[node->len] = e;
    node->len = (node->len + 1) & kMaxLen;
  }

  // A reference to the immutable set r, skipped when this accumulator already holds it (a
  // small direct-mapped memo; a miss only costs a duplicate entry, removed when normalised).
  void push_ref(size_t idx, Handle r, size_t hint) {
    if (ref_memo_.empty()) ref_memo_.assign(kRefMemo, {~uint64_t(0), 0});
    const uint64_t key = uint64_t(idx);
    size_t s = size_t(((key * 0x9E3779B97F4A7C15ull) ^ (r * 0xC2B2AE3D27D4EB4Full)) >> 52) &
               (kRefMemo - 1);
    if (ref_memo_[s].first == key && ref_memo_[s].second == r) return;
    ref_memo_[s] = {key, r};
    push_entry(idx, r, hint);
    lists_[idx].refs = 1;
  }

  // Whether every cell of the small set `s` (est <= kJoinMax: cells, two-cell handles, a
  // clean list, lazy unions of those) lies in the big set `b`, decided without expanding b
  // (see holds()). Then s ∪ b = b: an element-wise operation of a cell with a broadcast
  // statistic whose set holds that cell keeps the statistic's handle. False whenever that
  // cannot be decided cheaply (the caller then builds the lazy union, equally exact).
  bool covers(Handle b, Handle s) {
    Handle st[kJoinMax + 1];
    int top = 0, leaves = 0;
    st[top++] = s;
    while (top > 0) {
      const Handle t = st[--top];
      if (t == 0) continue;
      if (++leaves > int(2 * kJoinMax)) return false;
      switch (hnd::kind(t)) {
        case hnd::kCell:
          if (!holds(b, hnd::payload(t), 2)) return false;
          break;
        case hnd::kCell2:
          if (!holds(b, hnd::payload(t), 2) || !holds(b, hnd::payload(t) + delta_at(t), 2))
            return false;
          break;
        case hnd::kList: {
          const ListNode& n = list_at(t);
          if (n.refs || n.dirty || n.len > kJoinMax) return false;
          for (uint32_t i = 0; i < n.len; ++i)
            if (!holds(b, n.data[i], 2)) return false;
          break;
        }
        case hnd::kJoin: {
          if (top + 2 > int(kJoinMax) + 1) return false;
          const auto& j = join_at(t);
          st[top++] = j[0];
          st[top++] = j[1];
          break;
        }
        default:
          return false;
      }
    }
    return true;
  }

  // Cell c is in set b: a progression (arithmetic), a clean list without references (its
  // bounds when dense, else a binary search), a cell, two cells, or a lazy union of those
  // down to `depth` levels. False when not decidable that way.
  bool holds(Handle b, uint64_t c, int depth) const {
    switch (hnd::kind(b)) {
      case hnd::kCell:
        return hnd::payload(b) == c;
      case hnd::kCell2:
        return c == hnd::payload(b) || c == hnd::payload(b) + delta_at(b);
      case hnd::kProg:
      case hnd::kGroup: {
        const ProgNode p = hnd::kind(b) == hnd::kGroup ? member(b) : prog_at(b);
        return c >= p.start && c < p.next && (c - p.start) % p.stride == 0;
      }
      case hnd::kList: {
        if (b == 0) return false;
        const ListNode& n = list_at(b);
        if (n.refs || n.dirty || n.len == 0) return false;
        if (c < n.data[0] || c > n.data[n.len - 1]) return false;
        if (n.data[n.len - 1] - n.data[0] == uint64_t(n.len) - 1) return true;  // dense
        return std::binary_search(n.data, n.data + n.len, c);
      }
      case hnd::kJoin: {
        if (depth == 0) return false;
        const auto& j = join_at(b);
        return holds(j[0], c, depth - 1) || holds(j[1], c, depth - 1);
      }
      case hnd::kCellSet: {
        const WithNode& w = with_node(b);
        const uint64_t c0 = hnd::with_cell(b);
        if (c == c0 || (c > c0 && std::binary_search(w.rel, w.rel + w.nrel, c - c0))) return true;
        return depth > 0 && w.shared != 0 && holds(w.shared, c, depth - 1);
      }
      default:
        return false;
    }
  }

  // a and b are progressions (kProg, kGroup members) of the same cells: the statistics of
  // one column computed twice (standardize's mean and std each reduce the column).
  bool same_progression(Handle a, Handle b) const {
    const auto ka = hnd::kind(a), kb = hnd::kind(b);
    if ((ka != hnd::kProg && ka != hnd::kGroup) || (kb != hnd::kProg && kb != hnd::kGroup))
      return false;
    const ProgNode p = progression(a), q = progression(b);
    return p.start == q.start && p.stride == q.stride && p.next == q.next;
  }

  // a is a lazy union with b as one side.
  bool has_child(Handle a, Handle b) const {
    if (hnd::kind(a) != hnd::kJoin) return false;
    const auto& j = join_at(a);
    return j[0] == b || j[1] == b;
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

  // Append every cell reachable from a non-pair handle to `out` (may hold duplicates). In a
  // DAG of lazy unions and references, a big node (est "many") reachable along several paths
  // is expanded once per call (memo `seen_`), so flattening costs O(nodes + cells).
  void collect(Handle h, std::vector<uint64_t>& out) {
    if (h == 0) return;
    switch (hnd::kind(h)) {
      case hnd::kCell:
        out.push_back(hnd::payload(h));
        return;
      case hnd::kCell2:
      case hnd::kProg:
      case hnd::kGroup:
        push_prog(h, out);
        return;
      case hnd::kList: {
        const ListNode& n = list_at(h);
        if (!n.refs) {
          out.insert(out.end(), n.data, n.data + n.len);
          return;
        }
        break;
      }
      case hnd::kJoin:
        join_at(h);  // validates it before the walk
        break;
      case hnd::kCellSet:
        with_index(h);  // validates it before the walk
        break;
      default:  // a pair: only forged bytes put one here
        throw ForgedHandle(h);
    }
    seen_.clear();
    stack_.clear();
    stack_.push_back(h);
    while (!stack_.empty()) {
      Handle t = stack_.back();
      stack_.pop_back();
      if (t == 0) continue;
      const bool big = hnd::est(t) >= hnd::kEstMany;
      switch (hnd::kind(t)) {
        case hnd::kCell:
          out.push_back(hnd::payload(t));
          break;
        case hnd::kCell2:
        case hnd::kProg:
        case hnd::kGroup:
          if (big && !seen_.insert(t)) break;
          push_prog(t, out);
          break;
        case hnd::kList: {
          if (big && !seen_.insert(t)) break;
          const ListNode& n = list_at(t);
          if (!n.refs) {
            out.insert(out.end(), n.data, n.data + n.len);
            break;
          }
          for (uint32_t i = 0; i < n.len; ++i) {
            const uint64_t e = n.data[i];
            if (e < kRefMin)
              out.push_back(e);
            else
              stack_.push_back(e);
          }
          break;
        }
        case hnd::kJoin: {
          if (big && !seen_.insert(t)) break;
          const auto& j = join_at(t);
          stack_.push_back(j[0]);
          stack_.push_back(j[1]);
          break;
        }
        case hnd::kCellSet:  // never deduplicated: the cells differ per handle
          each_own_cell(t, [&](uint64_t c) { out.push_back(c); });
          stack_.push_back(with_node(t).shared);
          break;
        default:  // a pair inside a union: only forged bytes put one there
          throw ForgedHandle(t);
      }
    }
  }

  // Open-addressing set of handles, cleared in O(entries) (one flattening at a time).
  class SeenSet {
   public:
    bool insert(uint64_t k) {  // false if already present
      if ((used_.size() + 1) * 2 > slots_.size()) grow();
      size_t m = slots_.size() - 1;
      size_t s = size_t((k * 0x9E3779B97F4A7C15ull) >> 20) & m;
      while (slots_[s] != 0) {
        if (slots_[s] == k) return false;
        s = (s + 1) & m;
      }
      slots_[s] = k;
      used_.push_back(s);
      return true;
    }
    void clear() {
      for (size_t s : used_) slots_[s] = 0;
      used_.clear();
    }

   private:
    void grow() {
      std::vector<uint64_t> keys;
      keys.reserve(used_.size());
      for (size_t s : used_) keys.push_back(slots_[s]);
      slots_.assign(std::max<size_t>(64, slots_.size() * 2), 0);
      used_.clear();
      for (uint64_t k : keys) insert(k);
    }
    std::vector<uint64_t> slots_;
    std::vector<size_t> used_;
  };

  void push_prog(Handle h, std::vector<uint64_t>& out) const {
    if (hnd::kind(h) == hnd::kCell2) {
      out.push_back(hnd::payload(h));
      out.push_back(hnd::payload(h) + delta_at(h));
      return;
    }
    const ProgNode p = hnd::kind(h) == hnd::kGroup ? member(h) : prog_at(h);
    for (uint64_t c = p.start; c < p.next; c += p.stride) out.push_back(c);
  }

  // Sort and deduplicate. A flattened union is a few sorted runs (a big shared set and a
  // few cells): those are merged (O(n log runs)) instead of sorted.
  static void sort_unique(std::vector<uint64_t>& v) {
    v.resize(sort_unique_in_place(v.data(), v.size()));
  }

  // Sort d[0, n) and drop duplicates; returns the new length. A big set of cells that
  // repeats many cells over a narrow range (the sum of a blurred image: nine entries per
  // cell) goes through a bitmap over its range, O(n + range / 64), instead of a sort.
  static size_t sort_unique_in_place(uint64_t* d, size_t n) {
    constexpr size_t kBitmapMin = size_t{1} << 16;
    if (n >= kBitmapMin) {
      uint64_t lo = d[0], hi = d[0];
      for (size_t i = 1; i < n; ++i) {
        lo = std::min(lo, d[i]);
        hi = std::max(hi, d[i]);
      }
      // cells only (references are >= kRefMin), and a range at most 16 times the entries
      if (hi < kRefMin && hi - lo < 16 * uint64_t(n)) {
        std::vector<uint64_t> bits(size_t((hi - lo) / 64 + 1), 0);
        for (size_t i = 0; i < n; ++i) {
          const uint64_t t = d[i] - lo;
          bits[size_t(t >> 6)] |= uint64_t{1} << (t & 63);
        }
        size_t w = 0;
        for (size_t k = 0; k < bits.size(); ++k)
          for (uint64_t b = bits[k]; b != 0; b &= b - 1)
            d[w++] = lo + uint64_t(k) * 64 + uint64_t(__builtin_ctzll(b));
        return w;
      }
    }
    sort_runs(d, n);
    return size_t(std::unique(d, d + n) - d);
  }

  static void sort_runs(uint64_t* d, size_t n) {
    if (n < 2) return;
    constexpr size_t kMaxRuns = 32;
    size_t bounds[kMaxRuns + 1];
    size_t nr = 0;
    bounds[0] = 0;
    for (size_t i = 1; i < n; ++i) {
      if (d[i] < d[i - 1]) {
        if (++nr == kMaxRuns) {
          std::sort(d, d + n);
          return;
        }
        bounds[nr] = i;
      }
    }
    if (nr == 0) return;
    bounds[++nr] = n;
    // Bottom-up merge of adjacent runs.
    while (nr > 1) {
      size_t w = 0;
      for (size_t r = 0; r + 1 < nr; r += 2) {
        std::inplace_merge(d + bounds[r], d + bounds[r + 1], d + bounds[r + 2]);
        bounds[w++] = bounds[r];
      }
      if (nr % 2) bounds[w++] = bounds[nr - 1];
      bounds[w] = n;
      nr = w;
    }
  }

  static void normalise(ListNode& n) {
    if (!n.dirty) return;
    n.len = uint32_t(sort_unique_in_place(n.data, n.len)) & kMaxLen;
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
    if (i > hnd::kPayloadMask) throw std::length_error("annotation table exceeds 2^34 entries");
  }

  uint32_t epoch_;
  Mode mode_;
  ChunkedTable<ListNode> lists_;
  ChunkedTable<std::array<Handle, 2>> joins_;
  ChunkedTable<std::array<Handle, 2>> pairs_;
  ChunkedTable<ProgNode, kProgBlockShift> progs_;
  ChunkedTable<GroupNode, 12> groups_;
  size_t call_group_start_ = 0;
  std::vector<uint64_t> deltas_;
  std::vector<int> delta_slots_;
  int last_delta_ = -1;
  std::vector<WithNode> withs_;  // the entries of kCellSet handles (immutable, checked)
  std::vector<int> with_slots_;   // index of withs_ by content (with_bits)
  int last_with_ = -1;
  size_t call_prog_start_ = 0;
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
  SeenSet seen_;
  static constexpr size_t kRefMemo = 4096;
  std::vector<std::pair<uint64_t, Handle>> ref_memo_;
};

}  // namespace dslog
