// Probe of nvJPEG's batched hardware decode, without torch or our library: where does a batch of 64
// ImageNet photos spend its time, and does it scale over threads, handles and states?
//
// Build and run on the GPU machine (bench/nvjpeg_hw_probe.sh does both):
//   g++ -O2 -std=c++17 bench/nvjpeg_hw_probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64
//       -lnvjpeg -lcudart -lpthread -o /tmp/probe
//   /tmp/probe DIR [--set 444|420|all] [--format rgb|yuv] [--batch 64] [--images 2560] [--threads 1]
//              [--handles shared|own] [--roi] [--pinned] [--blocking-sync] [--no-pipeline]
//              [--device-input] (NVJPEG_BACKEND_HARDWARE_DEVICE, the files uploaded once beforehand)
//              [--same] (every item of a batch is one file: time against file size)
//              [--contexts own] (threads after the first each make a CUDA context of their own, cuCtxCreate)
//              [--cpu-threads N] (max_cpu_threads given to nvjpegDecodeBatchedInitialize; default 1)
//              [--no-sync] (no stream synchronize after each call; one at the end)
//
// Prints images/s, process CPU time per image, and per call: the time inside nvjpegDecodeBatchedEx
// and the time of the stream synchronize after it (how much of the work the call leaves queued).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvjpeg.h>
#include <sys/resource.h>

#include <dirent.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#define CHECK_CUDA(x)                                               \
  do {                                                              \
    cudaError_t e_ = (x);                                           \
    if (e_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)
#define CHECK_NVJPEG(x)                                                  \
  do {                                                                   \
    nvjpegStatus_t s_ = (x);                                             \
    if (s_ != NVJPEG_STATUS_SUCCESS) {                                   \
      std::fprintf(stderr, "%s: status %d\n", #x, static_cast<int>(s_)); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

struct File {
  std::vector<unsigned char> bytes;
  int width = 0, height = 0;
  nvjpegChromaSubsampling_t subsampling;
};

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double cpu_s() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [options]\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1], set = "444", format_name = "rgb", handles_mode = "own", contexts_mode = "shared";
  int batch = 64, images = 2560, threads = 1, cpu_threads = 1;
  bool roi = false, pinned = false, blocking = false, no_pipeline = false, device_input = false, same = false,
       no_sync = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return std::string(argv[++i]); };
    if (a == "--set") set = next();
    else if (a == "--format") format_name = next();
    else if (a == "--batch") batch = std::stoi(next());
    else if (a == "--images") images = std::stoi(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--handles") handles_mode = next();
    else if (a == "--roi") roi = true;
    else if (a == "--pinned") pinned = true;
    else if (a == "--blocking-sync") blocking = true;
    else if (a == "--no-pipeline") no_pipeline = true;
    else if (a == "--device-input") device_input = true;
    else if (a == "--same") same = true;
    else if (a == "--contexts") contexts_mode = next();
    else if (a == "--cpu-threads") cpu_threads = std::stoi(next());
    else if (a == "--no-sync") no_sync = true;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (blocking) CHECK_CUDA(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaFree(nullptr));
  const nvjpegOutputFormat_t format = format_name == "yuv" ? NVJPEG_OUTPUT_YUV : NVJPEG_OUTPUT_RGB;

  nvjpegHandle_t info_handle;
  CHECK_NVJPEG(nvjpegCreateSimple(&info_handle));
  std::vector<File> files;
  DIR* d = opendir(dir.c_str());
  if (!d) {
    std::perror(dir.c_str());
    return 1;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  size_t total_bytes = 0;
  for (const std::string& n : names) {
    std::ifstream in(dir + "/" + n, std::ios::binary);
    File f;
    f.bytes.assign(std::istreambuf_iterator<char>(in), {});
    int comps = 0, widths[NVJPEG_MAX_COMPONENT], heights[NVJPEG_MAX_COMPONENT];
    if (nvjpegGetImageInfo(info_handle, f.bytes.data(), f.bytes.size(), &comps, &f.subsampling, widths, heights) !=
        NVJPEG_STATUS_SUCCESS)
      continue;
    f.width = widths[0];
    f.height = heights[0];
    const bool is444 = f.subsampling == NVJPEG_CSS_444, is420 = f.subsampling == NVJPEG_CSS_420;
    if ((set == "444" && !is444) || (set == "420" && !is420)) continue;
    total_bytes += f.bytes.size();
    files.push_back(std::move(f));
  }
  std::printf("files: %zu (set %s), mean %.1f KB\n", files.size(), set.c_str(), total_bytes / 1024.0 / files.size());

  unsigned flags = no_pipeline ? NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE : 0;
  const nvjpegBackend_t backend = device_input ? NVJPEG_BACKEND_HARDWARE_DEVICE : NVJPEG_BACKEND_HARDWARE;
  nvjpegHandle_t shared = nullptr;
  CHECK_NVJPEG(nvjpegCreateEx(backend, nullptr, nullptr, flags, &shared));
  std::vector<unsigned char*> on_device(files.size(), nullptr);
  if (device_input) {
    for (size_t i = 0; i < files.size(); ++i) {
      CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&on_device[i]), files[i].bytes.size()));
      CHECK_CUDA(cudaMemcpy(on_device[i], files[i].bytes.data(), files[i].bytes.size(), cudaMemcpyHostToDevice));
    }
  }

  // Host cost of a full parse, for comparison with the per-image time inside the batched call.
  {
    nvjpegJpegStream_t stream;
    CHECK_NVJPEG(nvjpegJpegStreamCreate(shared, &stream));
    const double t0 = now_s();
    int n = 0;
    for (int r = 0; r < 3; ++r)
      for (File& f : files) {
        CHECK_NVJPEG(nvjpegJpegStreamParse(shared, f.bytes.data(), f.bytes.size(), 0, 0, stream));
        ++n;
      }
    std::printf("nvjpegJpegStreamParse (whole file, host): %.1f us/file\n", (now_s() - t0) * 1e6 / n);
    nvjpegJpegStreamDestroy(stream);
  }

  const int per_thread = images / threads;
  std::vector<double> call_time(threads), sync_time(threads);
  std::vector<int> calls(threads);
  std::vector<std::tuple<size_t, size_t, double>> per_file;  // --same, thread 0: bytes, pixels, call time
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  // The driver API by dlopen: no link-time libcuda needed.
  using CtxCreate = CUresult (*)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice);
  CtxCreate ctx_create = nullptr;
  if (contexts_mode == "own") {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib) ctx_create = reinterpret_cast<CtxCreate>(dlsym(lib, "cuCtxCreate_v4"));
    if (!ctx_create) {
      std::fprintf(stderr, "no cuCtxCreate_v4\n");
      return 1;
    }
  }
  std::mutex setup;
  auto work = [&](int t) {
    CHECK_CUDA(cudaSetDevice(0));
    const bool own_context = contexts_mode == "own" && t > 0;
    if (own_context) {
      std::lock_guard<std::mutex> lock(setup);
      CUcontext ctx;
      CUresult r = ctx_create(&ctx, nullptr, 0, 0);
      if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuCtxCreate failed: %d\n", int(r));
        std::exit(1);
      }
    }
    nvjpegHandle_t handle = shared;
    if ((handles_mode == "own" && t > 0) || own_context)
      CHECK_NVJPEG(nvjpegCreateEx(backend, nullptr, nullptr, flags, &handle));
    nvjpegJpegState_t state;
    CHECK_NVJPEG(nvjpegJpegStateCreate(handle, &state));
    CHECK_NVJPEG(nvjpegDecodeBatchedInitialize(handle, state, batch, cpu_threads, format));
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::vector<nvjpegDecodeParams_t> params(batch);
    for (auto& p : params) {
      CHECK_NVJPEG(nvjpegDecodeParamsCreate(handle, &p));
      CHECK_NVJPEG(nvjpegDecodeParamsSetOutputFormat(p, format));
    }
    size_t max_pixels = 0;
    for (const File& f : files) max_pixels = std::max(max_pixels, size_t(f.width) * f.height);
    unsigned char* out;
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), max_pixels * 3 * batch));
    unsigned char* pinned_buf = nullptr;
    size_t max_bytes = 0;
    for (const File& f : files) max_bytes = std::max(max_bytes, f.bytes.size());
    if (pinned) CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&pinned_buf), max_bytes * batch));
    std::vector<const unsigned char*> data(batch);
    std::vector<size_t> lengths(batch);
    std::vector<nvjpegImage_t> dst(batch);
    auto run_batch = [&](int k0) {
      for (int k = 0; k < batch; ++k) {
        const size_t index = (same ? k0 : k0 + k) % files.size();
        const File& f = files[index];
        data[k] = device_input ? on_device[index] : pinned ? pinned_buf + k * max_bytes : f.bytes.data();
        if (pinned) std::memcpy(pinned_buf + k * max_bytes, f.bytes.data(), f.bytes.size());
        lengths[k] = f.bytes.size();
        std::memset(&dst[k], 0, sizeof(dst[k]));
        const int w = roi ? std::min(240, f.width) : f.width, h = roi ? std::min(240, f.height) : f.height;
        unsigned char* base = out + size_t(k) * max_pixels * 3;
        const int planes = format == NVJPEG_OUTPUT_RGB ? 3 : 3;
        for (int c = 0; c < planes; ++c) {
          dst[k].channel[c] = base + size_t(c) * w * h;
          dst[k].pitch[c] = w;
        }
        if (roi) {
          CHECK_NVJPEG(
              nvjpegDecodeParamsSetROI(params[k], (f.width - w) / 2 / 16 * 16, (f.height - h) / 2 / 16 * 16, w, h));
        } else {
          CHECK_NVJPEG(nvjpegDecodeParamsSetROI(params[k], 0, 0, -1, -1));
        }
      }
      const double t0 = now_s();
      CHECK_NVJPEG(
          nvjpegDecodeBatchedEx(handle, state, data.data(), lengths.data(), dst.data(), params.data(), stream));
      const double t1 = now_s();
      if (!no_sync) CHECK_CUDA(cudaStreamSynchronize(stream));
      const double t2 = now_s();
      return std::make_pair(t1 - t0, t2 - t1);
    };
    for (int w = 0; w < 3; ++w) run_batch(w * batch + t * 17);  // warm
    ready++;
    while (!go.load()) std::this_thread::yield();
    for (int done = 0, k0 = t * 31; done < per_thread; done += batch, k0 += batch) {
      auto [c, s] = run_batch(k0);
      if (done + batch >= per_thread) CHECK_CUDA(cudaStreamSynchronize(stream));
      if (same && t == 0) {
        const File& f = files[k0 % files.size()];
        per_file.emplace_back(f.bytes.size(), size_t(f.width) * f.height, c + s);
      }
      call_time[t] += c;
      sync_time[t] += s;
      calls[t]++;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
  while (ready.load() < threads) std::this_thread::yield();
  const double c0 = cpu_s(), w0 = now_s();
  go = true;
  for (auto& th : pool) th.join();
  const double wall = now_s() - w0, cpu = cpu_s() - c0;
  int total_calls = 0;
  double call_sum = 0, sync_sum = 0;
  for (int t = 0; t < threads; ++t) {
    total_calls += calls[t];
    call_sum += call_time[t];
    sync_sum += sync_time[t];
  }
  const double n = double(total_calls) * batch;
  std::printf(
      "RESULT contexts=%s set=%s format=%s batch=%d threads=%d handles=%s roi=%d pinned=%d blocking=%d no_pipeline=%d "
      "device_input=%d same=%d cpu_threads=%d no_sync=%d: "
      "%.0f img/s, host CPU %.4f ms/img, in call %.3f ms/call, sync after %.3f ms/call\n",
      contexts_mode.c_str(), set.c_str(), format_name.c_str(), batch, threads, handles_mode.c_str(), roi, pinned,
      blocking, no_pipeline, device_input, same, cpu_threads, no_sync, n / wall, cpu * 1e3 / n,
      call_sum * 1e3 / total_calls, sync_sum * 1e3 / total_calls);
  if (!per_file.empty()) {
    std::sort(per_file.begin(), per_file.end());
    for (size_t i = 0; i < per_file.size(); i += std::max<size_t>(1, per_file.size() / 12)) {
      auto [bytes, pixels, t] = per_file[i];
      std::printf("  one file x %d: %zu bytes, %zu pixels: %.3f ms/call, %.1f us/img\n", batch, bytes, pixels, t * 1e3,
                  t * 1e6 / batch);
    }
  }
  return 0;
}
