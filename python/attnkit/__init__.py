"""attnkit: fused attention kernels (dense, neighborhood, sparse), retention and GEMM for PyTorch.

Pure Python over libattnkit's C ABI (ctypes): one library build serves every PyTorch version. The
library is looked up on first use: $ATTNKIT_LIBRARY, then the copy `pip install .` puts inside this
package (attnkit/lib/libattnkit.so), then, when run from a source checkout, its newest build.
"""

from . import functional, nn, tuner
from ._capi import AttnkitError, AttnkitInvalidArgument, LibraryNotFoundError, load_library
from .functional import attention, gemm, merge_attentions, na1d, na2d, na3d, retention, sparse_attention

__all__ = [
    "__version__", "attention", "na1d", "na2d", "na3d", "sparse_attention", "retention", "gemm", "merge_attentions",
    "functional", "nn", "tuner", "load_library", "library_info", "AttnkitError", "AttnkitInvalidArgument",
    "LibraryNotFoundError", "use_autotuner", "disable_autotuner",
]

# The package's version, equal to the library's (CMake project version) and to pyproject.toml's.
__version__ = "0.1.0"

use_autotuner = tuner.use_autotuner
disable_autotuner = tuner.disable_autotuner


def library_info() -> dict:
    """Path, version and backends of the loaded libattnkit."""
    from . import _capi

    lib = load_library()
    return {
        "path": _capi.library_path(lib),
        "version": lib.attnkit_version().decode(),
        "abi_version": int(lib.attnkit_abi_version()),
        "cuda_compiled": bool(lib.attnkit_cuda_compiled()),
        "cuda_devices": int(lib.attnkit_cuda_device_count()),
    }
