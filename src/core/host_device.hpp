// Lets small math headers be shared by host code and CUDA kernels.
#pragma once
#if defined(__CUDACC__)
#define ATTNKIT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ATTNKIT_HOST_DEVICE inline
#endif
