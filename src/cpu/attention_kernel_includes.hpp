// Every header the CPU attention kernels (attention_kernels.hpp) use from outside their
// instruction-set namespace. Each attention_kernels_<isa>.cpp includes this *before* switching the
// compiler target, so these inline functions and templates are compiled for the baseline only and
// the linker can never hand a wider-instruction copy to code running on an older CPU.
#pragma once
#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"
#include "core/positional_bias.hpp"
#include "cpu/attention_element_io.hpp"
#include "cpu/attention_kv_scratch.hpp"
#include "cpu/attention_mask_visitor.hpp"
#include "cpu/attention_scratch_arena.hpp"
#include "cpu/attention_tile_keys.hpp"
