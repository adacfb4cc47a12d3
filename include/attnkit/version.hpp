#pragma once
#include "attnkit/export.hpp"
#define ATTNKIT_VERSION_MAJOR 0
#define ATTNKIT_VERSION_MINOR 1
#define ATTNKIT_VERSION_PATCH 0
#define ATTNKIT_VERSION_STRING "0.1.0"

namespace attnkit {
ATTNKIT_API const char* version_string();
}  // namespace attnkit
