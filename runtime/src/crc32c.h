// Hector native runtime: CRC32C (Castagnoli), the checksum the tensor store keeps per chunk.
#pragma once

#include <cstdint>

namespace hector_offload {

// CRC32C of n bytes at data, continuing from crc (0 to start): SSE4.2 when the CPU has it,
// else slicing-by-8 tables.
uint32_t crc32c(uint32_t crc, const void* data, int64_t n);

}  // namespace hector_offload
