#include "cuda/mask_path/element_mask_plan.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "attnkit/error.hpp"
#include "core/element_mask_path.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/fmha/fmha_backward.hpp"
#include "cuda/fmha/fmha_forward.hpp"
#include "cuda/mask_path/element_mask_stats.hpp"
#include "cuda/sparse/scattered_attention.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"

namespace attnkit::cuda::mask_path {
namespace {

std::atomic<int64_t> tile_runs{0};
std::atomic<int64_t> scattered_runs{0};

struct TileShape {
  int block_m = 0;
  int block_n = 0;
};

// The two directions' entry points of both paths.
struct ForwardPaths {
  using Problem = AttentionForward;
  static constexpr bool kBackward = false;
  static std::string scattered_unsupported(const Problem& p, const detail::AttentionShape& s) {
    return sparse::scattered_forward_unsupported(p, s);
  }
  static int64_t scattered_workspace_bytes(const Problem& p, const detail::AttentionShape& s) {
    return sparse::scattered_forward_workspace_bytes(p, s);
  }
  static void run_scattered(const Problem& p, const detail::AttentionShape& s, void* workspace, void* stream) {
    sparse::run_scattered_forward(p, s, workspace, stream);
  }
  static detail::MadePlan<Problem> make_tiles(const Problem& p, const detail::AttentionShape& s, const RunOptions& o,
                                              TileShape& tiles) {
    fmha::ForwardTileShape shape;
    detail::MadePlan<Problem> made = fmha::make_forward_plan(p, s, o, &shape);
    tiles = TileShape{shape.block_m, shape.block_n};
    return made;
  }
};

struct BackwardPaths {
  using Problem = AttentionBackward;
  static constexpr bool kBackward = true;
  static std::string scattered_unsupported(const Problem& p, const detail::AttentionShape& s) {
    return sparse::scattered_backward_unsupported(p, s);
  }
  static int64_t scattered_workspace_bytes(const Problem& p, const detail::AttentionShape& s) {
    return sparse::scattered_backward_workspace_bytes(p, s);
  }
  static void run_scattered(const Problem& p, const detail::AttentionShape& s, void* workspace, void* stream) {
    sparse::run_scattered_backward(p, s, workspace, stream);
  }
  static detail::MadePlan<Problem> make_tiles(const Problem& p, const detail::AttentionShape& s, const RunOptions& o,
                                              TileShape& tiles) {
    fmha::BackwardTileShape shape;
    detail::MadePlan<Problem> made = fmha::make_backward_plan(p, s, o, &shape);
    tiles = TileShape{shape.block_m, shape.block_n};
    return made;
  }
};

// tiles_ == nullptr: the scattered path only; scattered_ == false: the tile-list plan only.
template <class Paths>
class ElementMaskPlan final : public detail::OpPlan<typename Paths::Problem> {
 public:
  using Problem = typename Paths::Problem;

  ElementMaskPlan(std::unique_ptr<detail::OpPlan<Problem>> tiles, bool scattered, int64_t scattered_workspace,
                  const detail::AttentionShape& shape, const detail::ElementPathProblem& model, int device)
      : tiles_(std::move(tiles)),
        scattered_(scattered),
        scattered_workspace_(scattered_workspace),
        shape_(shape),
        model_(model),
        device_(device) {}

  int64_t workspace_bytes() const override {
    const int64_t tiles = tiles_ != nullptr ? tiles_->workspace_bytes() : 0;
    return scattered_ ? std::max(tiles, scattered_workspace_) : tiles;
  }

  void run(const Problem& problem, const RunOptions& options) const override {
    if (path_of(problem, options) == ElementMaskPath::scattered) {
      const DeviceGuard guard(device_);
      Paths::run_scattered(problem, shape_, options.workspace, options.stream);
      scattered_runs.fetch_add(1, std::memory_order_relaxed);
    } else {
      tiles_->run(problem, options);
      tile_runs.fetch_add(1, std::memory_order_relaxed);
    }
  }

  TunedConfig config() const override {
    return tiles_ != nullptr ? tiles_->config() : TunedConfig{"scattered", "default"};
  }

 private:
  ElementMaskPath path_of(const Problem& problem, const RunOptions& options) const {
    if (!scattered_) return ElementMaskPath::tiles;
    if (tiles_ == nullptr) return ElementMaskPath::scattered;
    const DeviceGuard guard(device_);
    const bool capturing = fmha::stream_is_capturing(options.stream);
    const std::optional<detail::ElementMaskStats> stats =
        element_mask_stats(problem.mask.element_mask, shape_.seq_q, shape_.seq_k, model_.block_m, model_.block_n,
                           static_cast<cudaStream_t>(options.stream), capturing);
    return stats ? detail::choose_element_path(model_, *stats) : ElementMaskPath::tiles;
  }

  std::unique_ptr<detail::OpPlan<Problem>> tiles_;
  bool scattered_ = false;
  int64_t scattered_workspace_ = 0;
  detail::AttentionShape shape_;
  detail::ElementPathProblem model_;
  int device_ = 0;
};

template <class Paths>
detail::MadePlan<typename Paths::Problem> make_plan(const typename Paths::Problem& problem,
                                                    const detail::AttentionShape& shape, const RunOptions& options) {
  using Problem = typename Paths::Problem;
  const ElementMaskPath requested = problem.mask.element_path;
  const int device = problem.q.device.index;
  std::string why_not;
  if (requested != ElementMaskPath::tiles) {
    const DeviceGuard guard(device);
    why_not = Paths::scattered_unsupported(problem, shape);
  }
  const bool scattered = requested != ElementMaskPath::tiles && why_not.empty();
  if (requested == ElementMaskPath::scattered && !scattered) {
    throw Error(Status::unsupported, "mask.element_path: 2 (scattered) cannot run this call: " + why_not +
                                         "; allowed: 0 (automatic) or 1 (tiles) for it");
  }

  detail::MadePlan<Problem> tiles;
  TileShape tile_shape;
  if (requested != ElementMaskPath::scattered) {
    try {
      tiles = Paths::make_tiles(problem, shape, options, tile_shape);
    } catch (const Error& error) {
      // Automatic: a call only the scattered path runs takes it.
      if (requested != ElementMaskPath::automatic || !scattered || error.status() != Status::unsupported) throw;
    }
  }
  if (requested == ElementMaskPath::tiles || (tiles.plan != nullptr && !scattered)) return tiles;

  detail::ElementPathProblem model;
  model.batch = shape.batch;
  model.heads_q = shape.heads_q;
  model.seq_q = shape.seq_q;
  model.seq_k = shape.seq_k;
  model.head_dim = shape.head_dim;
  model.head_dim_v = shape.head_dim_v;
  model.element_bytes = static_cast<int64_t>(dtype_size(problem.q.dtype));
  model.backward = Paths::kBackward;
  model.block_m = tile_shape.block_m;
  model.block_n = tile_shape.block_n;
  int64_t scattered_workspace = 0;
  {
    const DeviceGuard guard(device);
    scattered_workspace = Paths::scattered_workspace_bytes(problem, shape);
  }
  detail::MadePlan<Problem> made;
  made.reusable = tiles.plan == nullptr || tiles.reusable;
  made.plan =
      std::make_unique<ElementMaskPlan<Paths>>(std::move(tiles.plan), true, scattered_workspace, shape, model, device);
  return made;
}

}  // namespace

detail::MadePlan<AttentionForward> make_element_mask_forward_plan(const AttentionForward& problem,
                                                                  const detail::AttentionShape& shape,
                                                                  const RunOptions& options) {
  return make_plan<ForwardPaths>(problem, shape, options);
}

detail::MadePlan<AttentionBackward> make_element_mask_backward_plan(const AttentionBackward& problem,
                                                                    const detail::AttentionShape& shape,
                                                                    const RunOptions& options) {
  return make_plan<BackwardPaths>(problem, shape, options);
}

int64_t element_path_runs(ElementMaskPath path) {
  return path == ElementMaskPath::scattered ? scattered_runs.load(std::memory_order_relaxed)
                                            : tile_runs.load(std::memory_order_relaxed);
}

}  // namespace attnkit::cuda::mask_path
