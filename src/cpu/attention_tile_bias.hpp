// The relative positional bias (AttentionMask::rpb, core/positional_bias.hpp) on a tile of query rows:
// added to the rows' scores at the slots they visit (forward and backward), and, in the backward, the
// score gradients gathered into the bias's gradient. Part of attention_kernels.hpp: compiled once per
// instruction set inside ATTNKIT_CPU_ISA_NAMESPACE, so no include guard.
//
// The table is read once per call into a dense [Hq][entries] array of the accumulator type. Each visited
// (row, key) pair costs one coordinate decode of the key and one table look-up, a small fraction of the
// pair's dot products.

namespace attnkit::cpu::ATTNKIT_CPU_ISA_NAMESPACE {

template <class Acc>
class TileBias {
 public:
  TileBias(const AttentionMask& mask, const detail::AttentionShape& shape, const AttentionMaskVisitor& visitor)
      : present_(mask.rpb.defined()), visitor_(visitor), index_(mask, shape) {
    if (present_) table_ = detail::load_positional_bias<Acc>(mask.rpb, shape.heads_q, index_.entries_per_head());
  }

  bool present() const { return present_; }
  int64_t entries_per_head() const { return index_.entries_per_head(); }

  // scores[r][slot] += rpb of (head, tokens[r], the slot's key) for rows [0, rows) at the slots they visit.
  void add(const TileKeys& keys, int rows, int64_t head, const std::array<int64_t, kTileRows>& tokens, Acc* scores,
           int64_t stride) const {
    const Acc* table = table_.data() + head * index_.entries_per_head();
    for_each_visited(keys, rows, tokens,
                     [&](int r, int64_t slot, int64_t entry) { scores[r * stride + slot] += table[entry]; });
  }

  // grads[entry] += factor * dscores[r][slot] over the same (row, slot) pairs; grads is one head's table.
  void gather(const TileKeys& keys, int rows, const std::array<int64_t, kTileRows>& tokens, const Acc* dscores,
              int64_t stride, Acc factor, Acc* grads) const {
    for_each_visited(keys, rows, tokens,
                     [&](int r, int64_t slot, int64_t entry) { grads[entry] += factor * dscores[r * stride + slot]; });
  }

 private:
  template <class Visit>
  void for_each_visited(const TileKeys& keys, int rows, const std::array<int64_t, kTileRows>& tokens,
                        const Visit& visit) const {
    for (int r = 0; r < rows; ++r) {
      const auto query = index_.coordinates(tokens[r]);
      const std::vector<KeyRun>& runs = keys.row_runs[r];
      const std::vector<KeyRun>& slots = keys.row_slots[r];
      for (size_t i = 0; i < runs.size(); ++i) {
        for (int64_t position = runs[i].begin; position < runs[i].end; ++position) {
          const int64_t entry = index_.entry(query, index_.coordinates(visitor_.key_token(position)));
          visit(r, slots[i].begin + (position - runs[i].begin), entry);
        }
      }
    }
  }

  bool present_;
  const AttentionMaskVisitor& visitor_;
  detail::PositionalBiasIndex index_;
  std::vector<Acc> table_;
};

}  // namespace attnkit::cpu::ATTNKIT_CPU_ISA_NAMESPACE
