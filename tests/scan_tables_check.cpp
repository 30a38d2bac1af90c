// For tests/test_scan_tables.py: reads one JPEG (argv[1]) with the GPU backend's header reader and
// read_scan_tables (custom_op/csrc/cuda/scan_tables.cpp), and prints "1" and each frame component's
// quantisation table in natural order (64 numbers a line), or "0" when the tables are refused.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "cuda/jpeg_header.h"
#include "cuda/scan_tables.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::ifstream file(argv[1], std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  custom_op::gpu::JpegHeader header;
  if (!custom_op::gpu::parse_jpeg_header(data, bytes.size(), &header)) return 3;
  custom_op::gpu::ScanTables tables;
  if (!custom_op::gpu::read_scan_tables(data, header.header_end, header.components, &tables)) {
    std::printf("0\n");
    return 0;
  }
  std::printf("1\n");
  for (int c = 0; c < header.components; ++c) {
    for (int k = 0; k < 64; ++k) std::printf(k ? " %d" : "%d", tables.quant[c].value[k]);
    std::printf("\n");
  }
  return 0;
}
