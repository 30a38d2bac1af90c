// What sets the length of a chunked decode's launch: every chunk of a batch of photos decoded by
// decode_chunk (what the chunked decode's stages 1 and 2 run), from stage 1's guess or from its true start,
// a thread a chunk in the order the GPU decoder lays them out (photo by photo, neighbouring chunks in a
// warp), each thread timing its decode with its multiprocessor's clock. Prints the launch's time and the
// spread of the warps' times; for the true starts also how well two models explain each warp's time (least
// squares over the warps): the AC codes of its busiest thread, or its threads' blocks in lockstep (each
// round of blocks as long as the longest of the threads' blocks in that round).
//
//   chunk_time_probe CHUNK_BYTES BATCH guess|true FILES...
//   bash bench/chunk_time_probe.sh [OUTDIR]     (builds it with nvcc and runs it on the ImageNet sample)
#define JPEG_CORE_HARNESS_NO_MAIN
#include "tests/jpeg_core_harness.cpp"

#include <cuda_runtime.h>

#include <fstream>
#include <iterator>

namespace {

struct Job {
  jc::ChunkedScan scan;
  jc::Frame frame;
  jc::HuffTable dc[jc::kMaxComponents], ac[jc::kMaxComponents];
};

struct Task {
  int32_t job;
  int64_t chunk;
  jc::SyncPoint start;
};

__device__ jc::SegmentTables tables_of(const Job& j) {
  jc::SegmentTables t;
  for (int c = 0; c < jc::kMaxComponents; ++c) {
    t.dc[c] = &j.dc[c];
    t.ac[c] = &j.ac[c];
  }
  t.order = nullptr;
  return t;
}

__global__ void decode_chunks(const Job* jobs, const Task* tasks, int64_t n, jc::ChunkRecord* out, int64_t* cycles) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const Task task = tasks[i];
  const Job& j = jobs[task.job];
  const long long t0 = clock64();
  jc::decode_chunk(j.scan, j.frame, tables_of(j), task.chunk, task.start, &out[i]);
  cycles[i] = clock64() - t0;
}

#define CHECK(x)                                                    \
  do {                                                              \
    cudaError_t e_ = (x);                                           \
    if (e_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

// The AC codes of each of the `blocks` blocks decoded from `start`, a chunk's true start (blocks as decode_chunk
// counts them).
std::vector<int> block_codes(const std::vector<uint8_t>& d, const Prepared& p, const jc::SegmentTables& t,
                             jc::SyncPoint start, int64_t blocks) {
  std::vector<int> codes;
  jc::BitReader r;
  jc::reader_init(&r, d.data() + (start.bit >> 3), d.data() + d.size());
  jc::reader_fill(&r);
  jc::reader_drop(&r, static_cast<int>(start.bit & 7));
  int place = start.block;
  for (int64_t b = 0; b < blocks; ++b) {
    const int c = p.frame.mcu_component[place];
    jc::reader_refill(&r);
    const int size = jc::decode_symbol(&r, *t.dc[c]);
    if (size < 0) break;
    jc::reader_drop(&r, size);
    int n = 0;
    for (int k = 1; k < jc::kBlockSize; ++n) {
      jc::reader_refill(&r);
      const int symbol = jc::decode_symbol(&r, *t.ac[c]);
      if (symbol < 0) break;
      jc::reader_drop(&r, symbol & 15);
      k += jc::ac_symbol_advance(symbol);
    }
    codes.push_back(n);
    if (++place == p.frame.blocks_in_mcu) place = 0;
  }
  return codes;
}

// Least squares of y on the columns of x and a constant: the coefficients and R^2.
std::vector<double> fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y, double* r2) {
  const size_t k = x[0].size() + 1, n = y.size();
  std::vector<std::vector<double>> a(k, std::vector<double>(k + 1, 0.0));
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> row = x[i];
    row.push_back(1.0);
    for (size_t u = 0; u < k; ++u) {
      for (size_t v = 0; v < k; ++v) a[u][v] += row[u] * row[v];
      a[u][k] += row[u] * y[i];
    }
  }
  for (size_t c = 0; c < k; ++c) {  // Gauss-Jordan
    for (size_t u = 0; u < k; ++u) {
      if (u == c || a[c][c] == 0) continue;
      const double f = a[u][c] / a[c][c];
      for (size_t v = c; v <= k; ++v) a[u][v] -= f * a[c][v];
    }
  }
  std::vector<double> coef(k);
  for (size_t c = 0; c < k; ++c) coef[c] = a[c][c] != 0 ? a[c][k] / a[c][c] : 0;
  double mean = 0, ss = 0, res = 0;
  for (double v : y) mean += v / static_cast<double>(n);
  for (size_t i = 0; i < n; ++i) {
    double pred = coef[k - 1];
    for (size_t u = 0; u + 1 < k; ++u) pred += coef[u] * x[i][u];
    res += (y[i] - pred) * (y[i] - pred);
    ss += (y[i] - mean) * (y[i] - mean);
  }
  *r2 = ss > 0 ? 1 - res / ss : 0;
  return coef;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  const int64_t chunk_bytes = std::atoll(argv[1]);
  const size_t batch = static_cast<size_t>(std::atoll(argv[2]));
  const bool from_guess = std::string(argv[3]) == "guess";  // else each chunk's true start
  std::vector<std::vector<uint8_t>> files;
  std::vector<Job> jobs;
  std::vector<Task> tasks;
  std::vector<std::vector<int>> codes;  // per chunk, the AC codes of each block of its true decode (true starts)
  for (int a = 4; a < argc && jobs.size() < batch; ++a) {
    std::ifstream in(argv[a], std::ios::binary);
    std::vector<uint8_t> d((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Prepared p;
    prepare(d.data(), d.size(), &p);
    Job job{};
    if (!p.error.empty() || p.info.restart_interval != 0 ||
        !jc::make_chunked_scan(d.data(), static_cast<int64_t>(d.size()), static_cast<int64_t>(p.info.scan_start),
                               chunk_bytes, 0, &job.scan))
      continue;
    job.frame = p.frame;
    for (int c = 0; c < jc::kMaxComponents; ++c) {
      const int k = c < p.frame.num_components ? c : 0;
      job.dc[c] = p.info.dc[k];
      job.ac[c] = p.info.ac[k];
    }
    const jc::SegmentTables t = segment_tables(p);
    jc::SyncPoint start{8 * static_cast<int64_t>(p.info.scan_start), 0, 0};
    for (int64_t j = 0; j < job.scan.num_chunks && start.bit != jc::kScanEnd; ++j) {
      const jc::SyncPoint from = j == 0 || !from_guess ? start : jc::chunk_guess(job.scan, j);
      tasks.push_back(Task{static_cast<int32_t>(jobs.size()), j, from});
      jc::ChunkRecord r{};
      jc::decode_chunk(job.scan, job.frame, t, j, start, &r);
      codes.push_back(from_guess ? std::vector<int>{} : block_codes(d, p, t, start, r.blocks));  // the model's
      start = r.end;
    }
    files.push_back(std::move(d));
    jobs.push_back(job);
  }
  for (size_t k = 0; k < jobs.size(); ++k) {
    uint8_t* dev = nullptr;
    CHECK(cudaMalloc(&dev, files[k].size()));
    CHECK(cudaMemcpy(dev, files[k].data(), files[k].size(), cudaMemcpyHostToDevice));
    jobs[k].scan.data = dev;
  }
  const auto n = static_cast<int64_t>(tasks.size());
  Job* d_jobs = nullptr;
  Task* d_tasks = nullptr;
  jc::ChunkRecord* d_out = nullptr;
  int64_t* d_cycles = nullptr;
  CHECK(cudaMalloc(&d_jobs, jobs.size() * sizeof(Job)));
  CHECK(cudaMemcpy(d_jobs, jobs.data(), jobs.size() * sizeof(Job), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&d_tasks, tasks.size() * sizeof(Task)));
  CHECK(cudaMemcpy(d_tasks, tasks.data(), tasks.size() * sizeof(Task), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&d_out, tasks.size() * sizeof(jc::ChunkRecord)));
  CHECK(cudaMalloc(&d_cycles, tasks.size() * sizeof(int64_t)));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int k = 0; k < 5; ++k) {
    CHECK(cudaEventRecord(e0));
    decode_chunks<<<static_cast<unsigned>((n + 127) / 128), 128>>>(d_jobs, d_tasks, n, d_out, d_cycles);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaGetLastError());
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    best = std::min(best, ms);
  }
  std::vector<int64_t> cycles(static_cast<size_t>(n));
  CHECK(cudaMemcpy(cycles.data(), d_cycles, cycles.size() * sizeof(int64_t), cudaMemcpyDeviceToHost));
  // A warp: 32 consecutive chunks, as the GPU decoder's stage 1 lays out one slot of each. Its threads reach the
  // end of their decode together, so each thread's time is its warp's.
  std::vector<double> time, lock, rounds, busiest;
  for (int64_t w = 0; w < n; w += 32) {
    const int64_t e = std::min(n, w + 32);
    int64_t most_blocks = 0, most_codes = 0;
    for (int64_t i = w; i < e; ++i) {
      const auto& c = codes[static_cast<size_t>(i)];
      most_blocks = std::max<int64_t>(most_blocks, static_cast<int64_t>(c.size()));
      int64_t sum = 0;
      for (int v : c) sum += v;
      most_codes = std::max(most_codes, sum);
    }
    int64_t l = 0;  // over the block rounds, the most AC codes of a thread's block in that round
    for (int64_t b = 0; b < most_blocks; ++b) {
      int longest = 0;
      for (int64_t i = w; i < e; ++i) {
        const auto& c = codes[static_cast<size_t>(i)];
        if (b < static_cast<int64_t>(c.size())) longest = std::max(longest, c[static_cast<size_t>(b)]);
      }
      l += longest;
    }
    int64_t slowest = 0;
    for (int64_t i = w; i < e; ++i) slowest = std::max(slowest, cycles[static_cast<size_t>(i)]);
    time.push_back(static_cast<double>(slowest));
    lock.push_back(static_cast<double>(l));
    rounds.push_back(static_cast<double>(most_blocks));
    busiest.push_back(static_cast<double>(most_codes));
  }
  std::vector<double> sorted = time;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "%zu photos, %lld chunks of %lld bytes decoded from their %s, %zu warps: launch %.3f ms; a warp's "
      "cycles: median %.0f, p90 %.0f, max %.0f\n",
      jobs.size(), static_cast<long long>(n), static_cast<long long>(chunk_bytes),
      from_guess ? "guesses" : "true starts", time.size(), best, sorted[sorted.size() / 2],
      sorted[sorted.size() * 9 / 10], sorted.back());
  if (from_guess) return 0;  // the model counts the codes of the true decodes
  std::vector<std::vector<double>> x1, x2;
  for (size_t i = 0; i < time.size(); ++i) {
    x1.push_back({busiest[i]});
    x2.push_back({lock[i], rounds[i]});
  }
  double r1 = 0, r2 = 0;
  fit(x1, time, &r1);
  const std::vector<double> c2 = fit(x2, time, &r2);
  std::printf("a warp's cycles against the AC codes of its busiest thread: R^2 %.3f\n", r1);
  std::printf(
      "against the blocks in lockstep (the sum over block rounds of the most AC codes of a block in the round, "
      "and the rounds): R^2 %.3f, %.0f cycles per code, %.0f per round, %.0f once\n",
      r2, c2[0], c2[1], c2[2]);
  return 0;
}
