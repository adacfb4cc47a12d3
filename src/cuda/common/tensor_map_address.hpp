// Points an encoded TMA descriptor (CUtensorMap) at another global address, keeping everything else it
// describes (extents, strides, box, swizzle): the driver's cuTensorMapReplaceAddress, a host-only edit of the
// descriptor that costs far less than encoding it again (cuTensorMapEncodeTiled). The new address needs the
// alignment the descriptor was encoded for (16 bytes for the tiled maps here).
#pragma once

namespace attnkit::cuda {

// Throws Status::cuda_error when the driver has no cuTensorMapReplaceAddress (a pre-12.0 driver) or refuses
// the address; `what` names the descriptor in the message.
void replace_tensor_map_address(void* descriptor, const void* address, const char* what);

}  // namespace attnkit::cuda
