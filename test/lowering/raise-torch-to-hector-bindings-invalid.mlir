// Malformed graph bindings are clean errors naming the argument, exit 1, never an internal
// error (found by hector_fuzz: a rank-1 edge_index was an IndexError, a non-string binding or a
// non-integer hector.num_nodes a ValueError "Cannot cast attribute").
// RUN: echo 'func.func @f(%%x: !torch.vtensor<[10,4],f32>, %%e: !torch.vtensor<[30],si64> {hector.data.graph = "edge_index"}) -> !torch.vtensor<[10,4],f32> { return %%x : !torch.vtensor<[10,4],f32> }' | %python %S/../cli/Inputs/exit_code.py hector-opt --torch - | FileCheck %s --check-prefix=RANK
// RANK-NOT: internal error
// RANK: <stdin>: error: argument #1 bound as hector.data.graph = 'edge_index' must be a [2, E] tensor, got !torch.vtensor<[30],si64>
// RANK: exit code: 1
// RUN: echo 'func.func @f(%%x: !torch.vtensor<[10,4],f32>, %%e: !torch.vtensor<[2,30],si64> {hector.data.graph = 3 : i64}) -> !torch.vtensor<[10,4],f32> { return %%x : !torch.vtensor<[10,4],f32> }' | %python %S/../cli/Inputs/exit_code.py hector-opt --torch - | FileCheck %s --check-prefix=KIND
// KIND-NOT: internal error
// KIND: <stdin>: error: argument #1: unknown hector.data.graph binding 3 : i64; use one of src, dst, etype, ntype, edge_index
// KIND: exit code: 1
// RUN: echo 'func.func @f(%%x: !torch.vtensor<[10,4],f32>, %%e: !torch.vtensor<[2,30],si64> {hector.data.graph = "edge_index"}) -> !torch.vtensor<[10,4],f32> attributes {hector.num_nodes = "ten"} { return %%x : !torch.vtensor<[10,4],f32> }' | %python %S/../cli/Inputs/exit_code.py hector-opt --torch - | FileCheck %s --check-prefix=NODES
// NODES-NOT: internal error
// NODES: <stdin>: error: hector.num_nodes must be an integer, got "ten"
// NODES: exit code: 1
// RUN: echo 'func.func @f(%%x: !torch.vtensor<[10,4],f32>, %%e: !torch.vtensor<[],si64> {hector.data.graph = "dst"}) -> !torch.vtensor<[10,4],f32> { return %%x : !torch.vtensor<[10,4],f32> }' | %python %S/../cli/Inputs/exit_code.py hector-opt --torch - | FileCheck %s --check-prefix=SCALAR
// SCALAR-NOT: internal error
// SCALAR: <stdin>: error: argument #1 bound as hector.data.graph = 'dst' must be a tensor of rank >= 1, got !torch.vtensor<[],si64>
// SCALAR: exit code: 1
