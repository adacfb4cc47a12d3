#pragma once
// The C++ API needs C++20 (e.g. defaulted comparisons in tensor.hpp); C and older C++ code use the C ABI,
// attnkit/attnkit.h, which needs C99 or any C++.
#if defined(_MSVC_LANG) ? (_MSVC_LANG < 202002L) : (__cplusplus < 202002L)
#error \
    "attnkit's C++ headers need C++20 (-std=c++20 or later); C and C++17 code can use the C ABI header attnkit/attnkit.h"
#endif
// Symbols of the public API are the only ones libattnkit exports (built with -fvisibility=hidden).
#if defined(_WIN32)
#define ATTNKIT_API __declspec(dllexport)
#else
#define ATTNKIT_API __attribute__((visibility("default")))
#endif
