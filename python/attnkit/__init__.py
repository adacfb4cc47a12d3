"""attnkit: fused attention kernels (dense, neighborhood, sparse), retention and GEMM for PyTorch.

Pure Python over libattnkit's C ABI (ctypes): one library build serves every PyTorch version. The
library is looked up on first use: $ATTNKIT_LIBRARY, then the copy `pip install .` puts inside this
package (attnkit/lib/libattnkit.so), then, when run from a source checkout, its newest build.
"""

from typing import Any, Dict

from . import _natten_queries, functional, nn, tuner
from ._capi import AttnkitError, AttnkitInvalidArgument, LibraryNotFoundError, load_library
from ._natten_queries import *  # noqa: F401,F403 - NATTEN's feature queries and switches (has_cuda, ...)
from .functional import attention, gemm, merge_attentions, na1d, na2d, na3d, retention, sparse_attention
from .nn import NeighborhoodAttention1D, NeighborhoodAttention2D, NeighborhoodAttention3D

__all__ = [
    "__version__", "attention", "na1d", "na2d", "na3d", "sparse_attention", "retention", "gemm", "merge_attentions",
    "functional", "nn", "tuner", "load_library", "library_info", "AttnkitError", "AttnkitInvalidArgument",
    "LibraryNotFoundError", "use_autotuner", "disable_autotuner",
    "NeighborhoodAttention1D", "NeighborhoodAttention2D", "NeighborhoodAttention3D",
] + [name for name in _natten_queries.__all__ if name not in ("use_autotuner", "disable_autotuner")]

# The package's version: the library's (CMake project version), plus, in an installed wheel, the local label
# of its build variant ("0.1.0+cpu", "0.1.0+cu130"; docs/python.md, "Wheels and variants"), which the build
# writes into attnkit/_version.py. Run from a source checkout, the package has only the public version.
try:
    from ._version import __version__ as _built_version  # type: ignore[import-not-found, unused-ignore]
except ImportError:
    _built_version = "0.1.0"
__version__: str = _built_version

use_autotuner = tuner.use_autotuner
disable_autotuner = tuner.disable_autotuner


def library_info() -> Dict[str, Any]:
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
