"""The CPU back end: ``hector_intra`` templates to loops, vectors and a JIT-compiled module.

:mod:`~hector.lowering.cpu.intra_to_scf` lowers templates to ``scf`` loop nests;
:mod:`~hector.lowering.cpu.tiles` tiles and vectorises the GEMM templates by their schedules
and :mod:`~hector.lowering.cpu.traversal` spreads the traversal templates over workers
(:mod:`~hector.lowering.cpu.workers` for the deterministic workers,
:mod:`~hector.lowering.cpu.packing` for the packed tiles,
:mod:`~hector.lowering.cpu.micro_kernel` for the register-blocked micro-kernel,
:mod:`~hector.lowering.cpu.gradient_pairs` for the input- and weight-gradient GEMMs lowered as
one loop,
:mod:`~hector.lowering.cpu.bf16` for the AVX512-BF16 dot products, chosen by
:mod:`~hector.lowering.cpu.features` and emulated for tests by
:mod:`~hector.lowering.cpu.bf16_emulation`; :mod:`~hector.lowering.cpu.half_messages` stores a half
inference program's per-edge GEMM outputs in half); :mod:`~hector.lowering.cpu.codegen` runs
the stages to the LLVM dialect and :mod:`~hector.lowering.cpu.jit` executes the result.
:mod:`~hector.lowering.cpu.torch_linalg` compiles the ordinary torch code an imported program
keeps through torch-mlir's linalg path.
"""
