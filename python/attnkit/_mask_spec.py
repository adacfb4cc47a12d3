"""MaskSpec: the attention mask as the op arguments that describe it, built from the functional
API's keywords with Python-side checks of their types (the library checks their values)."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import torch

from . import _capi

_ALIGNMENTS = {"top_left": _capi.ATTNKIT_CAUSAL_TOP_LEFT, "bottom_right": _capi.ATTNKIT_CAUSAL_BOTTOM_RIGHT}
# mask_path= of attention / sparse_attention with an element mask (attnkit_element_mask_path).
_ELEMENT_PATHS = {"auto": _capi.ATTNKIT_ELEMENT_PATH_AUTOMATIC, "tiles": _capi.ATTNKIT_ELEMENT_PATH_TILES,
                  "scattered": _capi.ATTNKIT_ELEMENT_PATH_SCATTERED}


class MaskSpec(NamedTuple):
    block_mask: Optional[torch.Tensor] = None
    element_mask: Optional[torch.Tensor] = None
    kind: int = _capi.ATTNKIT_MASK_NONE
    causal_alignment: int = _capi.ATTNKIT_CAUSAL_TOP_LEFT
    kernel_size: Sequence[int] = ()
    dilation: Sequence[int] = ()
    stride: Sequence[int] = ()
    causal: Sequence[bool] = ()
    block_q: int = 0
    block_k: int = 0
    element_path: int = _capi.ATTNKIT_ELEMENT_PATH_AUTOMATIC

    def op_args(self) -> tuple:
        """The custom ops' mask arguments up to block_k (element_path is their keyword argument)."""
        return (self.block_mask, self.element_mask, self.kind, self.causal_alignment, list(self.kernel_size),
                list(self.dilation), list(self.stride), list(self.causal), self.block_q, self.block_k)

    def params(self) -> tuple:
        """The non-tensor values as one hashable tuple (the plan key's part; _attention_ops.run_forward)."""
        # kind, causal_alignment, kernel_size, dilation, stride, causal, block_q, block_k, element_path
        return self[2:]


def per_dim(value, dims: int, name: str, kind=int) -> list:
    """An int (bool) for every dimension, or a sequence of exactly `dims` of them."""
    if isinstance(value, (list, tuple, torch.Size)):
        if len(value) != dims:
            raise ValueError(f"{name}: {tuple(value)} has {len(value)} entries; allowed: one int or {dims} entries, "
                             f"one per token dimension")
        values = list(value)
    else:
        values = [value] * dims
    for v in values:
        if kind is bool:
            if not isinstance(v, bool):
                raise TypeError(f"{name}: {value!r}; allowed: a bool or a tuple of {dims} bools")
        elif isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name}: {value!r}; allowed: an int or a tuple of {dims} ints")
    return [kind(v) for v in values]


def check_bool_mask(mask, name: str) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name}: {type(mask).__name__}; allowed: a torch.bool tensor")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name}: dtype {mask.dtype}; allowed: torch.bool (True = attend)")
    return mask


def dense(is_causal: bool = False, causal_alignment: str = "top_left") -> MaskSpec:
    if type(causal_alignment) is str:
        spec = _DENSE_SPECS.get((is_causal, causal_alignment)) if type(is_causal) is bool else None
        if spec is not None:
            return spec
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal: {is_causal!r}; allowed: True or False")
    if causal_alignment not in _ALIGNMENTS:
        raise ValueError(f"causal_alignment: {causal_alignment!r}; allowed: 'top_left' (torch SDPA) or "
                         f"'bottom_right' (FlashAttention >= 2.1)")
    kind = _capi.ATTNKIT_MASK_CAUSAL if is_causal else _capi.ATTNKIT_MASK_NONE
    return MaskSpec(kind=kind, causal_alignment=_ALIGNMENTS[causal_alignment])


# The four dense specs, made once (dense() runs on every attention() call).
_DENSE_SPECS = {
    (causal, alignment): MaskSpec(kind=_capi.ATTNKIT_MASK_CAUSAL if causal else _capi.ATTNKIT_MASK_NONE,
                                  causal_alignment=code)
    for causal in (False, True) for alignment, code in _ALIGNMENTS.items()
}


def element_path(mask_path) -> int:
    """attnkit_element_mask_path of mask_path= ("auto", "tiles" or "scattered")."""
    path = _ELEMENT_PATHS.get(mask_path) if type(mask_path) is str else None
    if path is None:
        if not isinstance(mask_path, str):
            raise TypeError(f"mask_path: {mask_path!r}; allowed: 'auto', 'tiles' or 'scattered'")
        raise ValueError(f"mask_path: {mask_path!r}; allowed: 'auto' (chosen from the mask's density), 'tiles' "
                         f"(tensor-core tile list) or 'scattered' (sparse path following the true entries)")
    return path


def element(mask, mask_path: str = "auto") -> MaskSpec:
    mask = check_bool_mask(mask, "mask")
    if mask.dim() == 2:
        mask = mask[None, None]
    return MaskSpec(element_mask=mask, kind=_capi.ATTNKIT_MASK_ELEMENT, element_path=element_path(mask_path))


def block(block_mask, block_size) -> MaskSpec:
    block_mask = check_bool_mask(block_mask, "block_mask")
    if block_mask.dim() == 2:
        block_mask = block_mask[None, None]
    if block_size is None:
        raise ValueError("block_size: None; allowed: an int or (block_q, block_k), the token extent of one "
                         "block_mask entry")
    block_q, block_k = per_dim(block_size, 2, "block_size")
    return MaskSpec(block_mask=block_mask, kind=_capi.ATTNKIT_MASK_BLOCK, block_q=block_q, block_k=block_k)


def neighborhood(dims: int, kernel_size, dilation, stride, is_causal) -> MaskSpec:
    return MaskSpec(
        kind=_capi.ATTNKIT_MASK_NEIGHBORHOOD,
        kernel_size=tuple(per_dim(kernel_size, dims, "kernel_size")),
        dilation=tuple(per_dim(dilation, dims, "dilation")),
        stride=tuple(per_dim(stride, dims, "stride")),
        causal=tuple(per_dim(is_causal, dims, "is_causal", kind=bool)),
    )
