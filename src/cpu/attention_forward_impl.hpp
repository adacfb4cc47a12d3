// CPU attention forward (the threaded oracle). Part of attention_kernels.hpp: compiled once per
// instruction set inside ATTNKIT_CPU_ISA_NAMESPACE, so no include guard.
//
// Work is split by (batch, kv head) pair: a chunk of pairs gets its K (transposed) and V (by rows)
// converted once into accumulator buffers, in parallel over key blocks; then threads take tasks of
// (pair, query head of its GQA group, block of rows_per_task query rows) dynamically. A task walks
// its rows in tiles of kTileRows rows of one line (so that, for neighborhood masks, they share
// their windows in all but the last dimension), asks the mask visitor for each row's key runs and
// runs forward_tile. Rows never depend on which thread or tile neighbours they had, except through
// the set of keys a tile scores, which is the same for any thread count: results are identical
// for any number of threads. A positional bias (mask.rpb) is added to the scaled scores of the visited
// keys before the softmax (attention_tile_bias.hpp). Memory beyond the inputs: the K/V copy of one
// chunk, and per thread one tile's buffers.

namespace attnkit::cpu::ATTNKIT_CPU_ISA_NAMESPACE {

template <class Storage>
void run_forward(const AttentionForward& problem, const detail::AttentionShape& shape, const RunOptions& options,
                 const CpuAttentionConfig& config) {
  using Acc = typename AccumulatorOf<Storage>::type;
  // Whole tiles per task, so tile boundaries (and results) do not depend on the tuned block.
  const int64_t requested_rows = config.query_block > 0 ? config.query_block : kDefaultForwardQueryBlock;
  const int64_t rows_per_task = (requested_rows + kTileRows - 1) / kTileRows * kTileRows;
  const AttentionMaskVisitor visitor(problem.mask, shape);
  const TileBias<Acc> bias(problem.mask, shape, visitor);
  const KvReader<Storage, Acc> reader(problem.k, problem.v, shape, visitor);
  const int64_t d_pad = reader.d_pad;
  const int64_t dv_pad = reader.dv_pad;
  const int64_t t_stride = reader.t_stride;
  const auto q_strides = detail::token_strides(problem.q, shape.token_dims);
  const auto out_strides = detail::token_strides(problem.out, shape.token_dims);
  const bool write_lse = problem.lse.defined();
  const auto lse_strides = write_lse ? detail::token_strides(problem.lse, shape.token_dims) : detail::TokenStrides{};
  const int64_t group = shape.heads_q / shape.heads_kv;
  const int64_t pairs = shape.batch * shape.heads_kv;
  const int64_t row_blocks = (shape.seq_q + rows_per_task - 1) / rows_per_task;
  const int64_t rows_per_line = visitor.rows_per_line();
  const int64_t keys_size = d_pad * t_stride;        // K transposed, per pair
  const int64_t values_size = shape.seq_k * dv_pad;  // V by rows, per pair
  const int64_t pair_bytes = (keys_size + values_size) * static_cast<int64_t>(sizeof(Acc));
  const int64_t chunk =
      std::clamp<int64_t>(kScratchBudgetBytes / std::max<int64_t>(pair_bytes, 1), 1, std::max<int64_t>(pairs, 1));
  const Acc scale = static_cast<Acc>(shape.scale);
  const int threads =
      resolve_thread_count(options, std::min(chunk, pairs) * group * row_blocks, attention_work_bound(shape, visitor));
  const int64_t capacity =
      tile_slot_capacity(kTileRows, kChunk<Acc>, visitor.max_keys_per_row(), visitor.max_runs_per_row(), shape.seq_k);

  const int64_t acc_size = static_cast<int64_t>(sizeof(Acc));
  ScratchArena arena(ScratchArena::bytes_for({chunk * keys_size * acc_size, chunk * values_size * acc_size}));
  Acc* const keys = arena.take<Acc>(chunk * keys_size);
  Acc* const values = arena.take<Acc>(chunk * values_size);
  std::vector<TileBuffers<Acc>> tiles(static_cast<size_t>(threads));
  std::vector<std::vector<Acc>> blocks(static_cast<size_t>(threads));
  for (size_t t = 0; t < tiles.size(); ++t) {
    tiles[t].allocate(d_pad, dv_pad, capacity, false, 256);
    blocks[t].resize(static_cast<size_t>(kChunk<Acc> * std::max(d_pad, dv_pad)));
  }

  for (int64_t first_pair = 0; first_pair < pairs; first_pair += chunk) {
    const int64_t chunk_pairs = std::min(chunk, pairs - first_pair);
#pragma omp parallel num_threads(threads)
    {
      const auto thread = static_cast<size_t>(omp_get_thread_num());
      TileBuffers<Acc>& tile = tiles[thread];
#pragma omp for schedule(static)
      for (int64_t item = 0; item < chunk_pairs * reader.blocks(); ++item) {
        const int64_t local = item / reader.blocks();
        const int64_t pair = first_pair + local;
        const int64_t p0 = (item % reader.blocks()) * kChunk<Acc>;
        Acc* block = blocks[thread].data();
        reader.load_block(false, pair / shape.heads_kv, pair % shape.heads_kv, p0, block);
        reader.store_block(block, d_pad, p0, nullptr, keys + local * keys_size);
        reader.load_block(true, pair / shape.heads_kv, pair % shape.heads_kv, p0, block);
        reader.store_block(block, dv_pad, p0, values + local * values_size, nullptr);
      }
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < chunk_pairs * group * row_blocks; ++task) {
        const int64_t local = task / (group * row_blocks);
        const int64_t pair = first_pair + local;
        const int64_t b = pair / shape.heads_kv;
        const int64_t head = (pair % shape.heads_kv) * group + (task / row_blocks) % group;
        const int64_t task_end = std::min((task % row_blocks + 1) * rows_per_task, shape.seq_q);
        for (int64_t row = (task % row_blocks) * rows_per_task; row < task_end;) {
          const int64_t line_end = (row / rows_per_line + 1) * rows_per_line;
          const int rows = static_cast<int>(std::min<int64_t>({kTileRows, task_end - row, line_end - row}));
          std::array<int64_t, kTileRows> tokens{};
          for (int r = 0; r < kTileRows; ++r) {
            Acc* q_row = tile.a.data() + r * d_pad;
            if (r >= rows) {
              std::fill(q_row, q_row + d_pad, Acc(0));
              continue;
            }
            tokens[r] = visitor.query_token(row + r);
            load_row(row_pointer<const Storage>(problem.q, q_strides, b, tokens[r], head, shape.tokens), shape.head_dim,
                     d_pad, scale, q_row);
            visitor.visible_keys(b, head, row + r, tile.keys.row_runs[r]);
          }
          std::array<Acc, kTileRows> lse{};
          forward_tile(rows, keys + local * keys_size, t_stride, values + local * values_size, d_pad, dv_pad, tile,
                       lse.data(), [&](const TileKeys& tile_keys, Acc* scores, int64_t stride) {
                         if (bias.present()) bias.add(tile_keys, rows, head, tokens, scores, stride);
                       });
          for (int r = 0; r < rows; ++r) {
            store_row(tile.b.data() + r * dv_pad, shape.head_dim_v, Acc(1),
                      row_pointer<Storage>(problem.out, out_strides, b, tokens[r], head, shape.tokens));
            if (write_lse) {
              *row_pointer<float>(problem.lse, lse_strides, b, tokens[r], head, shape.tokens) =
                  static_cast<float>(lse[r]);
            }
          }
          row += rows;
        }
      }
    }
  }
}

void attention_forward(const AttentionForward& problem, const detail::AttentionShape& shape, const RunOptions& options,
                       const CpuAttentionConfig& config) {
  const RunOptions applied = with_config_threads(options, config);
  dispatch_storage(problem.q.dtype, "q",
                   [&](auto storage) { run_forward<decltype(storage)>(problem, shape, applied, config); });
}

}  // namespace attnkit::cpu::ATTNKIT_CPU_ISA_NAMESPACE
