/* attnkit C ABI. Plain C structs and functions with status codes, usable from C, C++ and through
 * ctypes/cffi. Every function validates its arguments before touching memory; on failure it
 * returns a non-zero attnkit_status and attnkit_last_error() (per thread) says what was wrong and
 * what is allowed. Nothing is written to outputs when validation fails.
 *
 * Layouts (heads-last, token-major): Q [B, *tokens, Hq, D], K [B, *tokens_kv, Hkv, D],
 * V [B, *tokens_kv, Hkv, Dv], O [B, *tokens, Hq, Dv], LSE [B, *tokens, Hq] (float32, natural log).
 * Strides are in elements; the last dimension must be contiguous.
 *
 * Call the *_init function of an argument struct first: it zeroes the struct and sets defaults, so
 * code keeps working when fields are added. ATTNKIT_ABI_VERSION changes when a struct's layout
 * changes; check attnkit_abi_version() at load time. */
#ifndef ATTNKIT_ATTNKIT_H
#define ATTNKIT_ATTNKIT_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ATTNKIT_C_API __declspec(dllexport)
#else
#define ATTNKIT_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNKIT_ABI_VERSION 5
#define ATTNKIT_MAX_RANK 8
#define ATTNKIT_MAX_TOKEN_DIMS 3

typedef enum attnkit_status {
  ATTNKIT_OK = 0,
  ATTNKIT_INVALID_ARGUMENT = 1,
  ATTNKIT_UNSUPPORTED = 2,
  ATTNKIT_CUDA_ERROR = 3,
  ATTNKIT_OUT_OF_MEMORY = 4,
  ATTNKIT_INTERNAL = 5
} attnkit_status;

typedef enum attnkit_dtype {
  ATTNKIT_FLOAT32 = 0,
  ATTNKIT_FLOAT16 = 1,
  ATTNKIT_BFLOAT16 = 2,
  ATTNKIT_FLOAT64 = 3,
  ATTNKIT_BOOL = 4
} attnkit_dtype;

typedef enum attnkit_device_type { ATTNKIT_DEVICE_CPU = 0, ATTNKIT_DEVICE_CUDA = 1 } attnkit_device_type;

typedef enum attnkit_backend {
  ATTNKIT_BACKEND_AUTO = 0,
  ATTNKIT_BACKEND_CPU = 1,
  ATTNKIT_BACKEND_CUDA = 2
} attnkit_backend;

typedef enum attnkit_mask_kind {
  ATTNKIT_MASK_NONE = 0,
  ATTNKIT_MASK_CAUSAL = 1,
  ATTNKIT_MASK_NEIGHBORHOOD = 2,
  ATTNKIT_MASK_BLOCK = 3,
  ATTNKIT_MASK_ELEMENT = 4
} attnkit_mask_kind;

/* How a CUDA call runs an element mask (attnkit::ElementMaskPath); only speed depends on it, never
 * results. The CPU backend ignores it. */
typedef enum attnkit_element_mask_path {
  ATTNKIT_ELEMENT_PATH_AUTOMATIC = 0, /* chosen per mask tensor from its measured density */
  ATTNKIT_ELEMENT_PATH_TILES = 1,     /* tensor-core tile list: every non-empty (Q tile, KV tile) */
  ATTNKIT_ELEMENT_PATH_SCATTERED = 2  /* sparse path: work follows the true entries */
} attnkit_element_mask_path;

typedef enum attnkit_causal_alignment {
  ATTNKIT_CAUSAL_TOP_LEFT = 0,
  ATTNKIT_CAUSAL_BOTTOM_RIGHT = 1
} attnkit_causal_alignment;

typedef enum attnkit_retention_mode {
  ATTNKIT_RETENTION_PARALLEL = 0,
  ATTNKIT_RETENTION_CHUNKWISE = 1,
  ATTNKIT_RETENTION_RECURRENT = 2
} attnkit_retention_mode;

/* A non-owning strided view. data == NULL marks an absent optional tensor, except for a tensor with no
 * elements (rank 1 to ATTNKIT_MAX_RANK with an extent 0): it needs no memory, so NULL is allowed there
 * and the tensor is present (and validated) all the same. A NULL tensor with elements is absent: an
 * error for a required argument (q, k, v, out, ...), "not given" for an optional one (lse, ...). */
typedef struct attnkit_tensor {
  void* data;
  int32_t dtype;       /* attnkit_dtype */
  int32_t device_type; /* attnkit_device_type */
  int32_t device_index;
  int32_t rank;
  int64_t extents[ATTNKIT_MAX_RANK];
  int64_t strides[ATTNKIT_MAX_RANK];
} attnkit_tensor;

typedef struct attnkit_run_options {
  int32_t backend;     /* attnkit_backend */
  int32_t num_threads; /* CPU backend: 0 = all */
  void* stream;        /* cudaStream_t; NULL = default stream */
  /* Scratch memory on the op's device of at least the size the matching *_workspace_size function
   * returns (256-byte aligned). NULL: the library allocates it stream-ordered (cudaMallocAsync) when
   * a kernel needs one. Frameworks pass memory from their own allocator. */
  void* workspace;
  int64_t workspace_bytes;
} attnkit_run_options;

typedef struct attnkit_neighborhood_dim {
  int64_t kernel_size;
  int64_t dilation;
  int64_t stride;
  int32_t causal;
  int32_t reserved;
} attnkit_neighborhood_dim;

typedef struct attnkit_attention_mask {
  int32_t kind;             /* attnkit_mask_kind */
  int32_t causal_alignment; /* attnkit_causal_alignment */
  int32_t dims;             /* neighborhood: number of token dimensions */
  /* attnkit_element_mask_path; other than AUTOMATIC (0) only with kind ELEMENT. The reserved (zero) field
   * of ABI 4, so a zeroed struct keeps its meaning: automatic. */
  int32_t element_path;
  attnkit_neighborhood_dim neighborhood[ATTNKIT_MAX_TOKEN_DIMS];
  attnkit_tensor block_mask; /* bool [B|1, Hq|1, ceil(Sq/block_q), ceil(Sk/block_k)] */
  int64_t block_q;
  int64_t block_k;
  attnkit_tensor element_mask; /* bool [B|1, Hq|1, Sq, Sk] */
  /* Neighborhood only, optional: relative positional bias (NATTEN <= 0.17's rpb), float32 or q's dtype,
   * [Hq, 2*K_0-1, ...]; the score of query i and key j gets rpb[h, (j_0 - i_0)/dilation_0 + K_0 - 1, ...].
   * Stride 1 and no causal dimension. CPU backend only in this version. */
  attnkit_tensor rpb;
} attnkit_attention_mask;

typedef struct attnkit_attention_forward_args {
  attnkit_tensor q, k, v, out, lse; /* lse optional */
  int32_t has_scale;                /* 0: scale = 1/sqrt(D) */
  int32_t reserved;
  double scale;
  attnkit_attention_mask mask;
} attnkit_attention_forward_args;

typedef struct attnkit_attention_backward_args {
  attnkit_tensor q, k, v, out, lse, grad_out;
  attnkit_tensor grad_q, grad_k, grad_v;
  int32_t has_scale;
  /* 0 (fast): dQ partials added with fp32 atomics, dQ may differ in its last bits between runs;
   * 1: bit-identical runs; on Hopper the same additions in a fixed order, about 1.3x the fast mode's time
   * (dense, causal) to 1.7x (3-D neighborhoods) (docs/perf.md); elsewhere a separate dQ kernel. */
  int32_t deterministic;
  double scale;
  attnkit_attention_mask mask;
  /* KV-parallel splitting (CUDA; the CPU backend ignores it and split_workspace_limit): the dK/dV work
   * of each KV tile is shared by kv_splits CTAs, each over a contiguous part of the tile's Q-tile
   * visits; their fp32 partial dK and dV go to the workspace and are summed in a fixed order
   * (deterministic in both modes). 0 = automatic: split while it shortens the dK/dV kernel by the
   * cost model, within split_workspace_limit; 1 = never; N = N CTAs per KV tile, at most 128
   * (attnkit::kMaxBackwardKvSplits). */
  int32_t kv_splits;
  int32_t reserved;
  /* Workspace bytes the automatic choice may spend on partials (kv_splits == 0): -1 = the default
   * bound (64 MiB, attnkit::kDefaultSplitWorkspaceBytes), 0 = never split automatically. An explicit
   * kv_splits is not limited. */
  int64_t split_workspace_limit;
  /* Optional output with mask.rpb: the positional bias's gradient (rpb's shape and dtype). */
  attnkit_tensor grad_rpb;
} attnkit_attention_backward_args;

typedef struct attnkit_retention_forward_args {
  attnkit_tensor q, k, v, out;
  attnkit_tensor initial_state, final_state; /* optional, [B, H, Dk, Dv]: float32, float64 for float64 inputs */
  const double* gamma;                       /* per head; NULL = default 1 - 2^(-5-h) */
  int64_t gamma_count;
  int32_t mode; /* attnkit_retention_mode */
  int32_t normalize;
  int64_t chunk_size;
  int32_t has_scale;
  int32_t reserved;
  double scale;
  /* optional, mode parallel only: explicit decay matrix [H|1, Tq, Tk] (float32 or q's dtype) instead of
   * gamma; k and v then have Tk tokens (attnkit/retention.hpp) */
  attnkit_tensor decay;
} attnkit_retention_forward_args;

typedef struct attnkit_retention_backward_args {
  attnkit_tensor q, k, v, grad_out;
  attnkit_tensor initial_state, grad_final_state; /* optional */
  attnkit_tensor grad_q, grad_k, grad_v;
  attnkit_tensor grad_initial_state; /* optional output */
  const double* gamma;
  int64_t gamma_count;
  int32_t mode;
  int32_t normalize;
  int64_t chunk_size;
  int32_t has_scale;
  int32_t reserved;
  double scale;
  attnkit_tensor decay; /* as in the forward */
} attnkit_retention_backward_args;

typedef struct attnkit_gemm_args {
  attnkit_tensor a, b, c; /* rank 2 [rows, cols] or 3 [batch, rows, cols]; row- or column-major */
  int32_t transpose_a;
  int32_t transpose_b;
  double alpha;
  double beta;
  int32_t allow_tf32;
  int32_t reserved;
} attnkit_gemm_args;

/* Library identity and capabilities. */
ATTNKIT_C_API int32_t attnkit_abi_version(void);
ATTNKIT_C_API const char* attnkit_version(void);
ATTNKIT_C_API int32_t attnkit_cuda_compiled(void);
ATTNKIT_C_API int32_t attnkit_cuda_device_count(void);
/* The last error message of the calling thread ("" after a successful call). */
ATTNKIT_C_API const char* attnkit_last_error(void);
ATTNKIT_C_API const char* attnkit_status_name(int32_t status);

/* Contiguous (row-major) view helper. */
ATTNKIT_C_API attnkit_status attnkit_tensor_contiguous(attnkit_tensor* view, void* data, int32_t dtype,
                                                       int32_t device_type, int32_t device_index, int32_t rank,
                                                       const int64_t* extents);

ATTNKIT_C_API void attnkit_run_options_init(attnkit_run_options* options);
ATTNKIT_C_API void attnkit_attention_forward_args_init(attnkit_attention_forward_args* args);
ATTNKIT_C_API void attnkit_attention_backward_args_init(attnkit_attention_backward_args* args);
ATTNKIT_C_API void attnkit_retention_forward_args_init(attnkit_retention_forward_args* args);
ATTNKIT_C_API void attnkit_retention_backward_args_init(attnkit_retention_backward_args* args);
ATTNKIT_C_API void attnkit_gemm_args_init(attnkit_gemm_args* args);

/* Operations. options may be NULL (automatic backend, default stream). */
ATTNKIT_C_API attnkit_status attnkit_attention_forward(const attnkit_attention_forward_args* args,
                                                       const attnkit_run_options* options);
ATTNKIT_C_API attnkit_status attnkit_attention_backward(const attnkit_attention_backward_args* args,
                                                        const attnkit_run_options* options);
ATTNKIT_C_API attnkit_status attnkit_retention_forward(const attnkit_retention_forward_args* args,
                                                       const attnkit_run_options* options);
ATTNKIT_C_API attnkit_status attnkit_retention_backward(const attnkit_retention_backward_args* args,
                                                        const attnkit_run_options* options);
ATTNKIT_C_API attnkit_status attnkit_gemm(const attnkit_gemm_args* args, const attnkit_run_options* options);

/* Workspace an operation needs on its device for these arguments and options (0 when none). */
ATTNKIT_C_API attnkit_status attnkit_attention_forward_workspace_size(const attnkit_attention_forward_args* args,
                                                                      const attnkit_run_options* options,
                                                                      int64_t* bytes);
ATTNKIT_C_API attnkit_status attnkit_attention_backward_workspace_size(const attnkit_attention_backward_args* args,
                                                                       const attnkit_run_options* options,
                                                                       int64_t* bytes);

/* ---- Plans ----
 * A plan is one call shape of an operation validated, and its backend and kernel configuration chosen,
 * once: every tensor's dtype, device, extents, strides and address alignment (mod 16), the mask, the
 * scale and the options' backend and thread count. Running it then costs its launches only, which is
 * what frameworks calling many small layers need. The operations above use the same cached plans
 * internally. A plan follows the tuner: after a settings change its next run makes its choice again.
 * Several threads may run one plan at once; destroy it when no run is in flight on the host. */
typedef struct attnkit_plan attnkit_plan;

/* Flags of the *_plan functions. */
#define ATTNKIT_PLAN_NO_TUNING 1 /* never time configs for this plan (cached winners or the default) */

/* Validates `args` and `options` exactly as the operation would and returns a new plan in *plan
 * (release it with attnkit_plan_destroy). Tensor memory is not touched, except that a CPU block or
 * element mask is read (its density keys the CPU tuner's choice): give the real mask there. */
ATTNKIT_C_API attnkit_status attnkit_attention_forward_plan(const attnkit_attention_forward_args* args,
                                                            const attnkit_run_options* options, int32_t flags,
                                                            attnkit_plan** plan);
ATTNKIT_C_API attnkit_status attnkit_attention_backward_plan(const attnkit_attention_backward_args* args,
                                                             const attnkit_run_options* options, int32_t flags,
                                                             attnkit_plan** plan);
/* Retention plans; gamma, the mode, chunk size, scale and normalize are the plan's (the args' gamma array is copied).
 */
ATTNKIT_C_API attnkit_status attnkit_retention_forward_plan(const attnkit_retention_forward_args* args,
                                                            const attnkit_run_options* options, int32_t flags,
                                                            attnkit_plan** plan);
ATTNKIT_C_API attnkit_status attnkit_retention_backward_plan(const attnkit_retention_backward_args* args,
                                                             const attnkit_run_options* options, int32_t flags,
                                                             attnkit_plan** plan);
/* A gemm plan; alpha and beta are the plan's (they are run-time values of its kernel, not part of its choice). */
ATTNKIT_C_API attnkit_status attnkit_gemm_plan(const attnkit_gemm_args* args, const attnkit_run_options* options,
                                               int32_t flags, attnkit_plan** plan);
/* Device scratch a run of the plan needs (0 when none). */
ATTNKIT_C_API attnkit_status attnkit_plan_workspace_size(const attnkit_plan* plan, int64_t* bytes);
/* Runs the plan on new tensors of its call shape: data[i] is the data pointer of the i-th tensor field
 * of the args struct, in declaration order (attention forward: q, k, v, out, lse, mask.block_mask,
 * mask.element_mask, mask.rpb: 8 pointers; attention backward: q, k, v, out, lse, grad_out, grad_q, grad_k,
 * grad_v, mask.block_mask, mask.element_mask, mask.rpb, grad_rpb: 13; retention forward: q, k, v, out,
 * initial_state, final_state, decay: 7; retention backward: q, k, v, grad_out, initial_state, grad_final_state,
 * grad_q, grad_k, grad_v, grad_initial_state, decay: 11; gemm: a, b, c: 3). A tensor absent from
 * the plan's args stays NULL; a present one needs the alignment (address mod 16) it had there. A tensor with no
 * elements in the plan's args may be NULL in every run (NULL counts as address mod 16 = 0). workspace: as in
 * attnkit_run_options. */
ATTNKIT_C_API attnkit_status attnkit_plan_run(const attnkit_plan* plan, void* const* data, int32_t count, void* stream,
                                              void* workspace, int64_t workspace_bytes);
ATTNKIT_C_API void attnkit_plan_destroy(attnkit_plan* plan);

/* ---- Auto-tuner (DESIGN §6) ---- */
typedef enum attnkit_tune_mode {
  ATTNKIT_TUNE_OFF = 0,      /* default configs only; the cache is not read */
  ATTNKIT_TUNE_ON = 1,       /* tune a problem without a cached winner on its first call */
  ATTNKIT_TUNE_LOAD_ONLY = 2 /* cached winners or defaults; never benchmark */
} attnkit_tune_mode;

/* Names follow NATTEN's use_autotuner() where it has one. */
typedef struct attnkit_tuner_settings {
  int32_t mode; /* attnkit_tune_mode */
  int32_t deterministic;
  int32_t forward_pass;
  int32_t backward_pass;
  int32_t thorough_mode_forward;
  int32_t thorough_mode_backward;
  int32_t warmup_steps_forward;
  int32_t warmup_steps_backward;
  int32_t steps_forward;
  int32_t steps_backward;
  int32_t top_k;
  int32_t reserved;
  const char* cache_dir; /* "" = memory only; in get_settings, valid until the next configure */
} attnkit_tuner_settings;

/* The settings in force (environment defaults until the first configure). */
ATTNKIT_C_API attnkit_status attnkit_tuner_get_settings(attnkit_tuner_settings* settings);
/* Replaces the settings for every later call in this process (clears the in-memory winners when the
 * cache folder or mode changes). */
ATTNKIT_C_API attnkit_status attnkit_tuner_configure(const attnkit_tuner_settings* settings);

/* Multi-rank agreement through collectives the caller provides (torch.distributed in Python).
 * A callback returns 0 on success and hands its result over with attnkit_bytes_append. */
typedef struct attnkit_bytes attnkit_bytes;
ATTNKIT_C_API void attnkit_bytes_append(attnkit_bytes* result, const char* data, int64_t size);
/* On return `result` holds what rank `root` passed as (data, size). */
typedef int32_t (*attnkit_broadcast_fn)(void* context, const char* data, int64_t size, int32_t root,
                                        attnkit_bytes* result);
/* results[r] (an array of `size` handles) receives rank r's bytes. */
typedef int32_t (*attnkit_all_gather_fn)(void* context, const char* data, int64_t size, attnkit_bytes** results);

typedef enum attnkit_agreement {
  ATTNKIT_AGREE_ROOT_TUNES = 0,   /* rank 0 tunes and broadcasts the winner */
  ATTNKIT_AGREE_SPLIT_CONFIGS = 1 /* ranks time disjoint configs and all-gather the timings */
} attnkit_agreement;

typedef struct attnkit_rank_group {
  int32_t rank;
  int32_t size;
  int32_t agreement; /* attnkit_agreement */
  int32_t reserved;
  void* context;
  attnkit_broadcast_fn broadcast;
  attnkit_all_gather_fn all_gather;
} attnkit_rank_group;

/* NULL: this process alone. The callbacks must stay valid until the group is replaced. */
ATTNKIT_C_API attnkit_status attnkit_tuner_set_rank_group(const attnkit_rank_group* group);

/* The config the tuner picks for a forward/backward call with these arguments (tuning first when
 * the settings allow it), as its name, e.g. "bf16_d128_m128_n64_w4_s2_box" or a CPU block config;
 * also whether it came from "default", "cache" or "tuned". */
ATTNKIT_C_API attnkit_status attnkit_attention_forward_config(const attnkit_attention_forward_args* args,
                                                              const attnkit_run_options* options, char* name,
                                                              int64_t name_capacity, char* source,
                                                              int64_t source_capacity);
ATTNKIT_C_API attnkit_status attnkit_attention_backward_config(const attnkit_attention_backward_args* args,
                                                               const attnkit_run_options* options, char* name,
                                                               int64_t name_capacity, char* source,
                                                               int64_t source_capacity);

#ifdef __cplusplus
}
#endif
#endif /* ATTNKIT_ATTNKIT_H */
