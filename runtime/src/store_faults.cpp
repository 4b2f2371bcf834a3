// Hector native runtime: fault injection into the tensor store's I/O (tests of its error
// paths): armed by hector_store_inject_fault or $HECTOR_OFFLOAD_FAULT, taken per operation.
#include <cstdlib>
#include <string>
#include <vector>

#include "store_state.h"

namespace hector_offload {

void parse_fault_env(hector_store* s) {
  const char* env = std::getenv("HECTOR_OFFLOAD_FAULT");
  if (env == nullptr || *env == '\0') return;
  std::string text(env);
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.size() < 2) return;
  int op = parts[0] == "write" ? HECTOR_OP_WRITE : parts[0] == "read" ? HECTOR_OP_READ : -1;
  int kind = parts[1] == "enospc" ? HECTOR_FAULT_ENOSPC
             : parts[1] == "eio"  ? HECTOR_FAULT_EIO
             : parts[1] == "short" ? HECTOR_FAULT_SHORT
                                   : -1;
  if (op < 0 || kind < 0) return;
  s->faults[op].kind = kind;
  s->faults[op].skip = parts.size() > 2 ? std::atoll(parts[2].c_str()) : 0;
  s->faults[op].count = parts.size() > 3 ? std::atoll(parts[3].c_str()) : 1;
}

}  // namespace hector_offload

int hector_store::take_fault(int op) {  // with mu held
    Fault& f = faults[op];
    if (f.kind == HECTOR_FAULT_NONE || f.count <= 0) return HECTOR_FAULT_NONE;
    if (f.skip > 0) {
      --f.skip;
      return HECTOR_FAULT_NONE;
    }
    int kind = f.kind;
    if (--f.count == 0) f.kind = HECTOR_FAULT_NONE;
    return kind;
  }

