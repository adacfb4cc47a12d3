#include <algorithm>
#include <string>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"

namespace attnkit {

AttentionMask causal_mask(CausalAlignment alignment) {
  AttentionMask mask;
  mask.kind = MaskKind::causal;
  mask.causal_alignment = alignment;
  return mask;
}

AttentionMask neighborhood_mask(std::initializer_list<int64_t> kernel_size, std::initializer_list<int64_t> dilation,
                                std::initializer_list<int64_t> stride, std::initializer_list<bool> causal) {
  const auto dims = static_cast<int32_t>(kernel_size.size());
  if (dims < 1 || dims > kMaxTokenDims || dilation.size() > kernel_size.size() || stride.size() > kernel_size.size() ||
      causal.size() > kernel_size.size()) {
    throw Error(Status::invalid_argument,
                "neighborhood_mask: kernel_size has " + std::to_string(dims) +
                    " entries; allowed: 1 to 3 (one per token dimension), and dilation/stride/causal may not have "
                    "more entries than kernel_size");
  }
  AttentionMask mask;
  mask.kind = MaskKind::neighborhood;
  mask.dims = dims;
  for (int d = 0; d < dims; ++d) {
    auto& nd = mask.neighborhood[d];
    nd.kernel_size = kernel_size.begin()[d];
    nd.dilation = d < static_cast<int>(dilation.size()) ? dilation.begin()[d] : 1;
    nd.stride = d < static_cast<int>(stride.size()) ? stride.begin()[d] : 1;
    nd.causal = d < static_cast<int>(causal.size()) ? causal.begin()[d] : false;
  }
  return mask;
}

AttentionMask block_sparse_mask(TensorView block_mask, int64_t block_q, int64_t block_k) {
  AttentionMask mask;
  mask.kind = MaskKind::block;
  mask.block_mask = block_mask;
  mask.block_q = block_q;
  mask.block_k = block_k;
  return mask;
}

AttentionMask element_sparse_mask(TensorView element_mask, ElementMaskPath path) {
  AttentionMask mask;
  mask.kind = MaskKind::element;
  mask.element_mask = element_mask;
  mask.element_path = path;
  return mask;
}

}  // namespace attnkit
