// CPU attention backward (the threaded oracle). Part of attention_kernels.hpp: compiled once per
// instruction set inside ATTNKIT_CPU_ISA_NAMESPACE, so no include guard.
//
// The rows of one (batch, kv head) pair — every query of every query head in its GQA group — are
// cut into `slice_count` contiguous slices. A slice is one task: it owns private dK/dV accumulators
// covering only the hull of key positions its rows visit (for neighborhood masks a band of the
// image, not all keys), so threads never write the same memory. A slice walks its rows in tiles
// (as the forward does) and runs backward_tile: P = exp(scale q.k - lse) from the given lse,
// dS = scale P (dout.v - delta) with delta = dout.out, dQ written directly, dK/dV added into the
// slice's accumulators. A positional bias (mask.rpb) is added to the scaled scores; its gradient (the
// score gradients dS of the pairs that read an entry) goes to per-slice tables summed in order at the end.
// Afterwards every key sums its slices in slice order. The slice count
// depends only on the problem, never on the thread count, so results are bitwise identical for any
// number of threads.
//
// K is needed transposed (scores) and by rows (dQ), V transposed (dP). Pairs are processed in
// chunks whose copies plus accumulators fit kScratchBudgetBytes.

namespace attnkit::cpu::ATTNKIT_CPU_ISA_NAMESPACE {

inline constexpr int64_t kTargetTasks = 64;

// Slices per pair: enough tasks to balance threads, not so many that slices get smaller than
// min_rows_per_slice (the tuned query_block) or that the worst case (every slice visiting every key)
// exceeds the scratch budget.
inline int64_t plan_slice_count(int64_t pairs, int64_t rows_per_pair, int64_t accumulator_bytes_per_slice,
                                int64_t min_rows_per_slice) {
  int64_t count = (kTargetTasks + pairs - 1) / std::max<int64_t>(pairs, 1);
  count = std::min(count, rows_per_pair / std::max<int64_t>(min_rows_per_slice, 1));
  count = std::min(count, kScratchBudgetBytes / std::max<int64_t>(accumulator_bytes_per_slice, 1) - 1);
  return std::max<int64_t>(count, 1);
}

template <class Acc>
struct BackwardWorkspace {
  TileBuffers<Acc> tile;
  std::vector<Acc> block;  // key block being converted
  std::vector<Acc> out_row;
  std::vector<Acc> dkey, dvalue;  // one key's summed gradients
};

template <class Storage>
void run_backward(const AttentionBackward& problem, const detail::AttentionShape& shape, const RunOptions& options,
                  const CpuAttentionConfig& config) {
  using Acc = typename AccumulatorOf<Storage>::type;
  const AttentionMaskVisitor visitor(problem.mask, shape);
  const TileBias<Acc> bias(problem.mask, shape, visitor);
  const KvReader<Storage, Acc> reader(problem.k, problem.v, shape, visitor);
  const int64_t d_pad = reader.d_pad;
  const int64_t dv_pad = reader.dv_pad;
  const int64_t t_stride = reader.t_stride;
  const int64_t seq_k = shape.seq_k;
  const auto q_strides = detail::token_strides(problem.q, shape.token_dims);
  const auto out_strides = detail::token_strides(problem.out, shape.token_dims);
  const auto lse_strides = detail::token_strides(problem.lse, shape.token_dims);
  const auto dout_strides = detail::token_strides(problem.grad_out, shape.token_dims);
  const auto dq_strides = detail::token_strides(problem.grad_q, shape.token_dims);
  const auto dk_strides = detail::token_strides(problem.grad_k, shape.token_dims_kv);
  const auto dv_strides = detail::token_strides(problem.grad_v, shape.token_dims_kv);
  const int64_t group = shape.heads_q / shape.heads_kv;
  const int64_t pairs = shape.batch * shape.heads_kv;
  const int64_t rows_per_pair = group * shape.seq_q;
  const int64_t rows_per_line = visitor.rows_per_line();
  const int64_t row_bytes = (d_pad + dv_pad) * static_cast<int64_t>(sizeof(Acc));
  const int64_t min_rows_per_slice = config.query_block > 0 ? config.query_block : kDefaultBackwardQueryBlock;
  const int64_t slice_count = plan_slice_count(pairs, rows_per_pair, seq_k * row_bytes, min_rows_per_slice);
  const int64_t keys_t_size = d_pad * t_stride;
  const int64_t values_t_size = dv_pad * t_stride;
  const int64_t keys_size = seq_k * d_pad;
  const int64_t copy_bytes = (keys_t_size + values_t_size + keys_size) * static_cast<int64_t>(sizeof(Acc));
  const Acc scale = static_cast<Acc>(shape.scale);
  const int threads = resolve_thread_count(options, pairs * slice_count, 2 * attention_work_bound(shape, visitor));
  const int64_t capacity =
      tile_slot_capacity(kTileRows, kChunk<Acc>, visitor.max_keys_per_row(), visitor.max_runs_per_row(), seq_k);

  std::vector<BackwardWorkspace<Acc>> workspaces(static_cast<size_t>(threads));
  for (auto& w : workspaces) {
    w.tile.allocate(d_pad, dv_pad, capacity, true, 256);
    w.block.resize(static_cast<size_t>(kChunk<Acc> * std::max(d_pad, dv_pad)));
    w.out_row.resize(static_cast<size_t>(dv_pad));
    w.dkey.resize(static_cast<size_t>(d_pad));
    w.dvalue.resize(static_cast<size_t>(dv_pad));
  }
  // The positional bias's gradient: each slice sums its rows' score gradients into its own tables (one
  // per query head of its group), added up in slice order at the end.
  const bool bias_gradient = bias.present() && problem.grad_rpb.defined();
  const int64_t bias_entries = bias.entries_per_head();
  std::vector<Acc> bias_partials(bias_gradient ? static_cast<size_t>(pairs * slice_count * group * bias_entries) : 0,
                                 Acc(0));
  auto slice_rows = [&](int64_t slice) {
    return KeyRun{slice * rows_per_pair / slice_count, (slice + 1) * rows_per_pair / slice_count};
  };
  auto pair_of = [&](int64_t pair) {
    return std::pair<int64_t, int64_t>{pair / shape.heads_kv, pair % shape.heads_kv};
  };

  // The key positions each (pair, slice) visits, as one hull [begin, end).
  std::vector<KeyRun> hulls(static_cast<size_t>(pairs * slice_count));
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t item = 0; item < pairs * slice_count; ++item) {
    std::vector<KeyRun>& runs = workspaces[static_cast<size_t>(omp_get_thread_num())].tile.keys.row_runs[0];
    const auto [b, kv_head] = pair_of(item / slice_count);
    const KeyRun rows = slice_rows(item % slice_count);
    KeyRun hull{std::numeric_limits<int64_t>::max(), 0};
    for (int64_t r = rows.begin; r < rows.end; ++r) {
      visitor.visible_keys(b, kv_head * group + r / shape.seq_q, r % shape.seq_q, runs);
      if (runs.empty()) continue;
      hull.begin = std::min(hull.begin, runs.front().begin);
      hull.end = std::max(hull.end, runs.back().end);
    }
    hulls[static_cast<size_t>(item)] = hull.begin < hull.end ? hull : KeyRun{0, 0};
  }

  std::vector<int64_t> accumulator_offset(static_cast<size_t>(pairs * slice_count + 1));
  for (int64_t first_pair = 0; first_pair < pairs;) {
    // Greedy chunk: whole pairs while the K/V copies and the accumulators fit the budget.
    int64_t end_pair = first_pair;
    int64_t bytes = 0;
    int64_t positions = 0;
    for (; end_pair < pairs; ++end_pair) {
      int64_t pair_positions = 0;
      for (int64_t s = 0; s < slice_count; ++s) {
        const KeyRun& hull = hulls[static_cast<size_t>(end_pair * slice_count + s)];
        pair_positions += hull.end - hull.begin;
      }
      const int64_t pair_bytes = copy_bytes + pair_positions * row_bytes;
      if (end_pair > first_pair && bytes + pair_bytes > kScratchBudgetBytes) break;
      for (int64_t s = 0; s < slice_count; ++s) {
        const int64_t item = end_pair * slice_count + s;
        accumulator_offset[static_cast<size_t>(item)] = positions;
        positions += hulls[static_cast<size_t>(item)].end - hulls[static_cast<size_t>(item)].begin;
      }
      bytes += pair_bytes;
    }
    const int64_t chunk_pairs = end_pair - first_pair;
    const int64_t acc_size = static_cast<int64_t>(sizeof(Acc));
    ScratchArena arena(ScratchArena::bytes_for(
        {chunk_pairs * keys_t_size * acc_size, chunk_pairs * values_t_size * acc_size,
         chunk_pairs * keys_size * acc_size, positions * d_pad * acc_size, positions * dv_pad * acc_size}));
    Acc* const keys_t = arena.take<Acc>(chunk_pairs * keys_t_size);
    Acc* const values_t = arena.take<Acc>(chunk_pairs * values_t_size);
    Acc* const keys = arena.take<Acc>(chunk_pairs * keys_size);
    Acc* const dkeys = arena.take<Acc>(positions * d_pad);
    Acc* const dvalues = arena.take<Acc>(positions * dv_pad);

#pragma omp parallel num_threads(threads)
    {
      BackwardWorkspace<Acc>& w = workspaces[static_cast<size_t>(omp_get_thread_num())];
      TileBuffers<Acc>& tile = w.tile;
#pragma omp for schedule(static)
      for (int64_t item = 0; item < chunk_pairs * reader.blocks(); ++item) {
        const int64_t local = item / reader.blocks();
        const auto [b, kv_head] = pair_of(first_pair + local);
        const int64_t p0 = (item % reader.blocks()) * kChunk<Acc>;
        reader.load_block(false, b, kv_head, p0, w.block.data());
        reader.store_block(w.block.data(), d_pad, p0, keys + local * keys_size, keys_t + local * keys_t_size);
        reader.load_block(true, b, kv_head, p0, w.block.data());
        reader.store_block(w.block.data(), dv_pad, p0, nullptr, values_t + local * values_t_size);
      }
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < chunk_pairs * slice_count; ++task) {
        const int64_t local = task / slice_count;
        const auto [b, kv_head] = pair_of(first_pair + local);
        const int64_t item = (first_pair + local) * slice_count + task % slice_count;
        const KeyRun hull = hulls[static_cast<size_t>(item)];
        const int64_t offset = accumulator_offset[static_cast<size_t>(item)];
        Acc* slice_dkeys = dkeys + offset * d_pad;
        Acc* slice_dvalues = dvalues + offset * dv_pad;
        std::fill(slice_dkeys, slice_dkeys + (hull.end - hull.begin) * d_pad, Acc(0));
        std::fill(slice_dvalues, slice_dvalues + (hull.end - hull.begin) * dv_pad, Acc(0));
        const KeyRun rows = slice_rows(task % slice_count);
        for (int64_t r = rows.begin; r < rows.end;) {
          const int64_t head = kv_head * group + r / shape.seq_q;
          const int64_t first_row = r % shape.seq_q;
          const int64_t line_end = (first_row / rows_per_line + 1) * rows_per_line;
          const int count = static_cast<int>(
              std::min<int64_t>({kTileRows, rows.end - r, std::min(line_end, shape.seq_q) - first_row}));
          std::array<int64_t, kTileRows> tokens{};
          for (int t = 0; t < kTileRows; ++t) {
            Acc* q_row = tile.a.data() + t * d_pad;
            Acc* dout_row = tile.b.data() + t * dv_pad;
            if (t >= count) {
              std::fill(q_row, q_row + d_pad, Acc(0));
              std::fill(dout_row, dout_row + dv_pad, Acc(0));
              continue;
            }
            const int64_t row = first_row + t;
            tokens[t] = visitor.query_token(row);
            const float lse = *row_pointer<const float>(problem.lse, lse_strides, b, tokens[t], head, shape.tokens);
            tile.row_value[t] = static_cast<Acc>(lse);
            load_row(row_pointer<const Storage>(problem.q, q_strides, b, tokens[t], head, shape.tokens), shape.head_dim,
                     d_pad, Acc(1), q_row);
            load_row(row_pointer<const Storage>(problem.grad_out, dout_strides, b, tokens[t], head, shape.tokens),
                     shape.head_dim_v, dv_pad, Acc(1), dout_row);
            load_row(row_pointer<const Storage>(problem.out, out_strides, b, tokens[t], head, shape.tokens),
                     shape.head_dim_v, dv_pad, Acc(1), w.out_row.data());
            Acc delta = 0;
            for (int64_t x = 0; x < dv_pad; ++x) delta += dout_row[x] * w.out_row[x];
            tile.row_delta[t] = delta;
            if (lse == -std::numeric_limits<float>::infinity()) {
              tile.keys.row_runs[t].clear();  // contributes nothing
            } else {
              visitor.visible_keys(b, head, row, tile.keys.row_runs[t]);
            }
          }
          Acc* head_bias_grads =
              bias_gradient ? bias_partials.data() + (item * group + head % group) * bias_entries : nullptr;
          backward_tile(
              count, scale, keys_t + local * keys_t_size, values_t + local * values_t_size, t_stride,
              keys + local * keys_size, d_pad, dv_pad, tile, hull.begin, slice_dkeys, slice_dvalues,
              [&](const TileKeys& tile_keys, Acc* scores, int64_t stride) {
                if (bias.present()) bias.add(tile_keys, count, head, tokens, scores, stride);
              },
              [&](const TileKeys& tile_keys, const Acc* dscores, int64_t stride) {
                if (bias_gradient)
                  bias.gather(tile_keys, count, tokens, dscores, stride, Acc(1) / scale, head_bias_grads);
              });
          for (int t = 0; t < count; ++t) {
            store_row(tile.c.data() + t * d_pad, shape.head_dim, Acc(1),
                      row_pointer<Storage>(problem.grad_q, dq_strides, b, tokens[t], head, shape.tokens));
          }
          r += count;
        }
      }
#pragma omp for schedule(static)
      for (int64_t item = 0; item < chunk_pairs * seq_k; ++item) {
        const int64_t local = item / seq_k;
        const int64_t position = item % seq_k;
        const auto [b, kv_head] = pair_of(first_pair + local);
        std::fill(w.dkey.begin(), w.dkey.end(), Acc(0));
        std::fill(w.dvalue.begin(), w.dvalue.end(), Acc(0));
        for (int64_t s = 0; s < slice_count; ++s) {
          const int64_t slice_item = (first_pair + local) * slice_count + s;
          const KeyRun hull = hulls[static_cast<size_t>(slice_item)];
          if (position < hull.begin || position >= hull.end) continue;
          const int64_t offset = accumulator_offset[static_cast<size_t>(slice_item)] + position - hull.begin;
          const Acc* dkey = dkeys + offset * d_pad;
          const Acc* dvalue = dvalues + offset * dv_pad;
          for (int64_t x = 0; x < d_pad; ++x) w.dkey[x] += dkey[x];
          for (int64_t x = 0; x < dv_pad; ++x) w.dvalue[x] += dvalue[x];
        }
        const int64_t token = visitor.key_token(position);
        store_row(w.dkey.data(), shape.head_dim, Acc(1),
                  row_pointer<Storage>(problem.grad_k, dk_strides, b, token, kv_head, shape.tokens_kv));
        store_row(w.dvalue.data(), shape.head_dim_v, Acc(1),
                  row_pointer<Storage>(problem.grad_v, dv_strides, b, token, kv_head, shape.tokens_kv));
      }
    }
    first_pair = end_pair;
  }
  if (bias_gradient) {
    std::vector<double> total(static_cast<size_t>(shape.heads_q * bias_entries), 0.0);
    for (int64_t pair = 0; pair < pairs; ++pair) {
      const int64_t kv_head = pair % shape.heads_kv;
      for (int64_t s = 0; s < slice_count; ++s) {
        const Acc* part = bias_partials.data() + (pair * slice_count + s) * group * bias_entries;
        for (int64_t e = 0; e < group * bias_entries; ++e) total[kv_head * group * bias_entries + e] += part[e];
      }
    }
    detail::store_positional_bias_gradient(problem.grad_rpb, total, bias_entries);
  }
}

void attention_backward(const AttentionBackward& problem, const detail::AttentionShape& shape,
                        const RunOptions& options, const CpuAttentionConfig& config) {
  const RunOptions applied = with_config_threads(options, config);
  dispatch_storage(problem.q.dtype, "q",
                   [&](auto storage) { run_backward<decltype(storage)>(problem, shape, applied, config); });
}

}  // namespace attnkit::cpu::ATTNKIT_CPU_ISA_NAMESPACE
