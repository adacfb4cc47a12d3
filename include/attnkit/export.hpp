#pragma once
// Symbols of the public API are the only ones libattnkit exports (built with -fvisibility=hidden).
#if defined(_WIN32)
#define ATTNKIT_API __declspec(dllexport)
#else
#define ATTNKIT_API __attribute__((visibility("default")))
#endif
