// Umbrella header of the C++ API.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/backend.hpp"
#include "attnkit/build_info.hpp"
#include "attnkit/dtype.hpp"
#include "attnkit/error.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "attnkit/tensor.hpp"
#include "attnkit/tuner.hpp"
#include "attnkit/version.hpp"
