// For tests/test_segment_index.py: reads one JPEG (argv[1]) with the GPU backend's header reader and
// common/segment_index.h's reader, told the file holds argv[2] restart segments, and prints "1" and,
// for each segment as the last one decoded, how many bytes of the file would be uploaded (one number
// a line); or "0" when the file has no index or its index is refused.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "common/segment_index.h"
#include "cuda/jpeg_header.h"

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  std::ifstream file(argv[1], std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const int64_t segments = std::atoll(argv[2]);
  custom_op::gpu::JpegHeader header;
  if (!custom_op::gpu::parse_jpeg_header(data, bytes.size(), &header)) return 3;
  custom_op::SegmentIndex index;
  if (header.segment_index == nullptr ||
      !custom_op::read_segment_index(header.segment_index, header.segment_index_length, bytes.size(), header.header_end,
                                     segments, &index)) {
    std::printf("0\n");
    return 0;
  }
  std::printf("1\n");
  for (int64_t s = 0; s < segments; ++s)
    std::printf("%zu\n", custom_op::segment_index_upload_end(index, s, header.header_end, bytes.size()));
  return 0;
}
