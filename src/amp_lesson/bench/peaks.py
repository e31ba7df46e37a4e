"""Datasheet peak throughput of NVIDIA GPUs, per precision regime.

A measured TFLOP/s means little alone; set beside the GPU's peak for the
same format it says how much of the hardware a step used. The figures are
typed in from NVIDIA's datasheets (the one table in the package that is not
computed), with their sources below.
"""

from __future__ import annotations

import re

__all__ = ["PEAK_SOURCE", "PEAK_TFLOPS", "peak_tflops"]

PEAK_SOURCE = (
    "NVIDIA product datasheets (dense Tensor Core figures: the datasheets' "
    "'with sparsity' figures halved); FP32 is the non-tensor-core figure"
)
"""Where :data:`PEAK_TFLOPS` comes from."""

# Peak dense TFLOP/s by GPU and format. Source: NVIDIA's datasheets --
#   H100 (SXM5 / PCIe / NVL) and H200 (SXM / NVL): "NVIDIA H100 Tensor Core GPU"
#     and "NVIDIA H200 Tensor Core GPU" datasheets: FP32 67/51/60 and 67/60; TF32
#     989*/756*/835* and 989*/835*; BF16 = FP16 1979*/1513*/1671* and 1979*/1671*,
#     where * means "with sparsity": the dense figure is half (e.g. 1979 / 2).
#   A100 (SXM and PCIe, 40 and 80 GB): "NVIDIA A100 Tensor Core GPU" datasheet:
#     FP32 19.5, TF32 156, BF16 = FP16 312 (dense; 312*/624* with sparsity).
#   A10: "NVIDIA A10 Tensor Core GPU" datasheet: FP32 31.2, TF32 62.5, BF16 = FP16 125.
#   L4: "NVIDIA L4 Tensor Core GPU" datasheet: FP32 30.3, TF32 120*, FP16 = BF16 242*.
#   L40S: "NVIDIA L40S GPU" datasheet: FP32 91.6, TF32 183 (366*), BF16 = FP16 362.05.
#   T4: "NVIDIA T4 Tensor Core GPU" datasheet: FP32 8.1, mixed FP16/FP32 65; Turing
#     has no TF32 and no BF16 tensor cores (None).
#   V100 (SXM2 / PCIe): "NVIDIA Tesla V100" datasheet: FP32 15.7 / 14, tensor
#     (FP16) 125 / 112; no TF32, no BF16.
# Peaks assume boost clocks; a real step reaches a fraction of them.
PEAK_TFLOPS: dict[str, dict[str, float | None]] = {
    "H200 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
    "H200 SXM": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.5, "bf16": 756.5},
    "H100 SXM": {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
    "A100": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
    "L40S": {"fp32": 91.6, "tf32": 183.0, "fp16": 362.05, "bf16": 362.05},
    "L4": {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0},
    "A10": {"fp32": 31.2, "tf32": 62.5, "fp16": 125.0, "bf16": 125.0},
    "T4": {"fp32": 8.1, "tf32": None, "fp16": 65.0, "bf16": None},
    "V100 PCIe": {"fp32": 14.0, "tf32": None, "fp16": 112.0, "bf16": None},
    "V100 SXM2": {"fp32": 15.7, "tf32": None, "fp16": 125.0, "bf16": None},
}
"""Peak dense TFLOP/s per GPU and regime (``None``: the GPU has no such mode)."""

# torch.cuda.get_device_name() -> key of PEAK_TFLOPS; first match wins.
_GPU_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bH200\b.*\bNVL\b", "H200 NVL"),
    (r"\bH200\b", "H200 SXM"),
    (r"\bH100\b.*\bNVL\b", "H100 NVL"),
    (r"\bH100\b.*\bPCIe\b", "H100 PCIe"),
    (r"\bH100\b", "H100 SXM"),
    (r"\bA100\b", "A100"),
    (r"\bL40S\b", "L40S"),
    (r"\bL4\b", "L4"),
    (r"\bA10\b", "A10"),
    (r"\bT4\b", "T4"),
    (r"\bV100\b.*\bPCIe\b", "V100 PCIe"),
    (r"\bV100\b", "V100 SXM2"),
)


def peak_tflops(gpu_name: str) -> tuple[str, dict[str, float | None]] | None:
    """The datasheet peaks of the GPU called ``gpu_name``, or ``None`` if unknown.

    Parameters
    ----------
    gpu_name : str
        What ``torch.cuda.get_device_name()`` returns. A CPU's name matches
        nothing: its peak is unknown here.

    Returns
    -------
    tuple or None
        The key of :data:`PEAK_TFLOPS` the name matched and that entry.

    Raises
    ------
    TypeError
        If ``gpu_name`` is not a string.

    Examples
    --------
    >>> (peak_tflops("NVIDIA H100 80GB HBM3")[0],
    ...  peak_tflops("NVIDIA A100-SXM4-80GB")[0])
    ('H100 SXM', 'A100')
    >>> peak_tflops("NVIDIA H200")[1]["bf16"]
    989.5
    >>> peak_tflops("CPU (x86_64, 2 cores)") is None
    True
    """
    if not isinstance(gpu_name, str):
        raise TypeError(f"gpu_name must be a str, got {type(gpu_name).__name__} {gpu_name!r}")
    for pattern, key in _GPU_PATTERNS:
        if re.search(pattern, gpu_name, flags=re.IGNORECASE):
            return key, PEAK_TFLOPS[key]
    return None
