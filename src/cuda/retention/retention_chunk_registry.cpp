#include "cuda/retention/retention_chunk_registry.hpp"

#include <set>
#include <string>
#include <vector>

namespace attnkit::cuda::retention {

namespace {

// The first instance of `dtype`'s table (f16 or bf16) that `match` accepts, or null.
template <class Match>
const ChunkKernel* find_instance(const ChunkKernel* (*f16)(int*), const ChunkKernel* (*bf16)(int*), DType dtype,
                                 Match&& match) {
  int count = 0;
  const ChunkKernel* table = nullptr;
  if (dtype == DType::f16) {
    table = f16(&count);
  } else if (dtype == DType::bf16) {
    table = bf16(&count);
  }
  for (int i = 0; i < count; ++i) {
    if (match(table[i])) return &table[i];
  }
  return nullptr;
}

}  // namespace

const ChunkKernel* find_chunk_kernel(DType dtype, int head_dim, int value_block) {
  return find_instance(&chunk_kernels_f16, &chunk_kernels_bf16, dtype,
                       [&](const ChunkKernel& k) { return k.head_dim == head_dim && k.value_block == value_block; });
}

const ChunkKernel* find_wgmma_chunk_kernel(DType dtype, int head_dim, int value_block) {
  return find_instance(&wgmma_chunk_kernels_f16, &wgmma_chunk_kernels_bf16, dtype,
                       [&](const ChunkKernel& k) { return k.head_dim == head_dim && k.value_block == value_block; });
}

const ChunkKernel* find_wgmma_matrix_kernel(DType dtype, int head_dim, int value_block) {
  return find_instance(&wgmma_matrix_kernels_f16, &wgmma_matrix_kernels_bf16, dtype,
                       [&](const ChunkKernel& k) { return k.head_dim == head_dim && k.value_block == value_block; });
}

std::vector<const ChunkKernel*> chunk_kernels() {
  std::vector<const ChunkKernel*> kernels;
  for (const auto table_of : {&chunk_kernels_f16, &chunk_kernels_bf16}) {
    int count = 0;
    const ChunkKernel* table = table_of(&count);
    for (int i = 0; i < count; ++i) kernels.push_back(&table[i]);
  }
  return kernels;
}

const ChunkKernel* find_decode_kernel(DType dtype, int head_dim) {
  return find_instance(&decode_kernels_f16, &decode_kernels_bf16, dtype,
                       [&](const ChunkKernel& k) { return k.head_dim == head_dim; });
}

const ChunkKernel* find_normalized_kernel(DType dtype, int head_dim, int members) {
  return find_instance(&normalized_kernels_f16, &normalized_kernels_bf16, dtype,
                       [&](const ChunkKernel& k) { return k.head_dim == head_dim && k.members == members; });
}

const ChunkKernel* find_parallel_backward_kernel(DType dtype, int head_dim, bool key_side, int members) {
  const std::string family =
      std::string(key_side ? "parallel_bwd_key" : "parallel_bwd_query") + (members > 1 ? "_grouped" : "");
  return find_instance(
      &parallel_backward_kernels_f16, &parallel_backward_kernels_bf16, dtype,
      [&](const ChunkKernel& k) { return k.head_dim == head_dim && k.members == members && family == k.family; });
}

std::string chunk_head_dims_text() {
  int count = 0;
  const ChunkKernel* table = chunk_kernels_f16(&count);
  std::set<int> dims;
  for (int i = 0; i < count; ++i) dims.insert(table[i].head_dim);
  std::string text;
  for (const int d : dims) text += (text.empty() ? "" : ", ") + std::to_string(d);
  return text;
}

}  // namespace attnkit::cuda::retention
