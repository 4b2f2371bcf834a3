// RUN: hector-opt %s --split-input-file --verify-diagnostics

// One case per IRDL constraint of placement: attribute values and kinds, missing attributes,
// operand and result counts (operands and results accept any type).

func.func @place_bad_space(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'"disk"' does not satisfy the constraint}}
  %0 = "placement.place"(%x) {space = "disk", affinity = "none"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @place_bad_affinity(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'"cpu"' does not satisfy the constraint}}
  %0 = "placement.place"(%x) {space = "unified", affinity = "cpu"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @place_missing_affinity(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'placement.place' op attribute "affinity" is expected but not provided}}
  %0 = "placement.place"(%x) {space = "unified"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @place_no_operand() {
  // expected-error @+1 {{op expects exactly 1 operands, but got 0}}
  %0 = "placement.place"() {space = "unified", affinity = "gpu"} : () -> tensor<?x64xf32>
  return
}

// -----

func.func @transfer_bad_from(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'"host"' does not satisfy the constraint}}
  %0 = "placement.transfer"(%x) {from = "host", to = "device"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @transfer_bad_to(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'"gpu"' does not satisfy the constraint}}
  %0 = "placement.transfer"(%x) {from = "ssd", to = "gpu"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @transfer_missing_to(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'placement.transfer' op attribute "to" is expected but not provided}}
  %0 = "placement.transfer"(%x) {from = "ssd"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @transfer_no_result(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{op expects exactly 1 results, but got 0}}
  "placement.transfer"(%x) {from = "ssd", to = "device"} : (tensor<?x64xf32>) -> ()
  return
}

// -----

func.func @keep_scope_not_integer(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{expected base attribute 'builtin.integer' but got 'builtin.string'}}
  %0 = "placement.keep"(%x) {scope = "3"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @keep_missing_scope(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'placement.keep' op attribute "scope" is expected but not provided}}
  %0 = "placement.keep"(%x) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @offload_bad_target(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'"device"' does not satisfy the constraint}}
  %0 = "placement.offload"(%x) {scope = 0 : i64, target = "device"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @offload_missing_target(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'placement.offload' op attribute "target" is expected but not provided}}
  %0 = "placement.offload"(%x) {scope = 0 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @offload_scope_not_integer(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{expected base attribute 'builtin.integer' but got 'builtin.float'}}
  %0 = "placement.offload"(%x) {scope = 1.0 : f32, target = "ssd"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @prefetch_missing_ahead(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'placement.prefetch' op attribute "ahead" is expected but not provided}}
  %0 = "placement.prefetch"(%x) {scope = 0 : i64} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @prefetch_ahead_not_integer(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{expected base attribute 'builtin.integer' but got 'builtin.unit'}}
  %0 = "placement.prefetch"(%x) {scope = 0 : i64, ahead} : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @recompute_two_operands(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{op expects exactly 1 operands, but got 2}}
  %0 = "placement.recompute"(%x, %x) {scope = 2 : i64} : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @recompute_missing_scope(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'placement.recompute' op attribute "scope" is expected but not provided}}
  %0 = "placement.recompute"(%x) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @saved_missing_bytes(%x: tensor<64xi8>) {
  // expected-error @+1 {{'placement.saved' op attribute "bytes" is expected but not provided}}
  %0 = "placement.saved"(%x) {index = 0 : i64} : (tensor<64xi8>) -> tensor<64xi8>
  return
}

// -----

func.func @saved_index_not_integer(%x: tensor<64xi8>) {
  // expected-error @+1 {{expected base attribute 'builtin.integer' but got 'builtin.string'}}
  %0 = "placement.saved"(%x) {index = "addmm", bytes = 64 : i64} : (tensor<64xi8>) -> tensor<64xi8>
  return
}

// -----

func.func @recompute_scope_not_integer(%x: tensor<64xi8>) {
  // expected-error @+1 {{expected base attribute 'builtin.integer' but got 'builtin.string'}}
  %0 = "placement.recompute"(%x) {scope = "gelu"} : (tensor<64xi8>) -> tensor<64xi8>
  return
}
