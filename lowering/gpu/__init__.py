"""The GPU back end: ``hector_intra`` templates to GPU kernels, PTX and host code.

:mod:`~hector.lowering.gpu.intra_to_gpu` makes one kernel per template with its launch (tiled
GEMMs from :mod:`~hector.lowering.gpu.gemm` and :mod:`~hector.lowering.gpu.xty`, where
:mod:`~hector.lowering.gpu.tile_support` allows and :mod:`~hector.lowering.gpu.schedule_choice`
chooses; on tensor cores from :mod:`~hector.lowering.gpu.mma` for 16-bit operands on sm_80 and
newer, lowered to NVVM by :mod:`~hector.lowering.gpu.mma_nvvm`);
:mod:`~hector.lowering.gpu.skip_empty_launches` guards the host's launches against empty
grids; :mod:`~hector.lowering.gpu.ptx` serialises the kernels through NVVM to PTX.
:mod:`~hector.lowering.gpu.kernels_on_host` (with :mod:`~hector.lowering.gpu.host_emulation`
for kernels with barriers, and :mod:`~hector.lowering.gpu.mma_on_host` for their MMAs) runs
the kernels on the host, so the host code runs against a fake driver where no GPU is
present.
"""
