// Drives custom_op/csrc/cuda/helper_threads.cpp (ChunkedWork) on the CPU: tests/test_helper_threads.py
// compiles it against torch's c10 and runs each case by name; a case prints "ok" or fails with a message.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "custom_op/csrc/cuda/helper_threads.h"

using custom_op::gpu::ChunkedWork;
using custom_op::gpu::kCopyHelpers;
using custom_op::gpu::kFewHelpers;

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  return 1;
}

// Every image's work runs exactly once, and ready(k) returns only once image k's has, whatever the
// number of helpers asked for.
int every_image_once() {
  for (unsigned helpers : {0u, 1u, kFewHelpers, kCopyHelpers}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{257}, size_t{4000}}) {
      for (size_t chunk : {size_t{1}, size_t{4}, size_t{64}}) {
        std::vector<std::atomic<int>> runs(count);
        for (auto& r : runs) r.store(0);
        std::vector<size_t> value(count, 0);
        ChunkedWork work(
            count, chunk,
            [&](size_t begin, size_t end) {
              for (size_t k = begin; k < end; ++k) {
                value[k] = k * k + 1;
                runs[k].fetch_add(1);
              }
            },
            helpers);
        for (size_t k = 0; k < count; ++k) {
          work.ready(k);
          if (value[k] != k * k + 1) return fail("image " + std::to_string(k) + " not done at ready()");
        }
        work.wait_all();
        for (size_t k = 0; k < count; ++k)
          if (runs[k].load() != 1)
            return fail("image " + std::to_string(k) + " ran " + std::to_string(runs[k].load()) + " times");
      }
    }
  }
  return 0;
}

// No more threads than the caller and `max_helpers` helpers run a work's chunks: with none asked for,
// the caller runs them all.
int helpers_bounded() {
  for (unsigned helpers : {0u, 1u, 2u}) {
    for (int round = 0; round < 20; ++round) {
      std::mutex mutex;
      std::set<std::thread::id> threads;
      ChunkedWork work(
          64, 1,
          [&](size_t, size_t) {
            std::this_thread::sleep_for(std::chrono::microseconds(50));
            std::lock_guard<std::mutex> lock(mutex);
            threads.insert(std::this_thread::get_id());
          },
          helpers);
      work.wait_all();
      if (threads.size() > helpers + 1)
        return fail(std::to_string(threads.size()) + " threads ran the chunks, " + std::to_string(helpers) +
                    " helpers asked for");
      if (helpers == 0 && threads.count(std::this_thread::get_id()) != 1)
        return fail("with no helper the caller did not run the chunks");
    }
  }
  return 0;
}

// A chunk that throws: ready() on it, and wait_all(), rethrow its exception; the other chunks still run.
int exception_reaches_the_caller() {
  const size_t count = 100, chunk = 4;
  std::vector<int> done(count, 0);
  ChunkedWork work(
      count, chunk,
      [&](size_t begin, size_t end) {
        if (begin == 40) throw std::runtime_error("chunk 10 failed");
        for (size_t k = begin; k < end; ++k) done[k] = 1;
      },
      kCopyHelpers);
  bool thrown = false;
  try {
    work.ready(41);
  } catch (const std::runtime_error& e) {
    thrown = std::strcmp(e.what(), "chunk 10 failed") == 0;
  }
  if (!thrown) return fail("ready() on the failed chunk did not rethrow its exception");
  thrown = false;
  try {
    work.wait_all();
  } catch (const std::runtime_error&) {
    thrown = true;
  }
  if (!thrown) return fail("wait_all() did not rethrow");
  for (size_t k = 0; k < count; ++k)
    if ((k >= 40 && k < 44) == (done[k] == 1)) return fail("image " + std::to_string(k) + " done wrongly");
  return 0;
}

// Destroyed before any image was asked for: no chunk starts afterwards (the caller's data is gone),
// and those running finish first.
int destroyed_early() {
  for (int round = 0; round < 200; ++round) {
    auto alive = std::make_shared<std::atomic<bool>>(true);
    std::atomic<int> after{0};
    {
      std::vector<int> data(1000, 0);
      ChunkedWork work(
          data.size(), 1,
          [&, alive](size_t begin, size_t end) {
            if (!alive->load()) after.fetch_add(1);
            std::this_thread::sleep_for(std::chrono::microseconds(20));
            for (size_t k = begin; k < end; ++k) data[k] = 1;
          },
          kCopyHelpers);
    }
    alive->store(false);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (after.load() != 0) return fail("a chunk ran after the work was destroyed");
  }
  return 0;
}

// Two callers at once share the helpers; each gets all its work done.
int two_callers() {
  std::atomic<int> bad{0};
  auto caller = [&](int seed) {
    for (int round = 0; round < 50; ++round) {
      std::vector<int> v(500, 0);
      ChunkedWork work(
          v.size(), 4,
          [&](size_t begin, size_t end) {
            for (size_t k = begin; k < end; ++k) v[k] = seed + static_cast<int>(k);
          },
          kCopyHelpers);
      work.wait_all();
      for (size_t k = 0; k < v.size(); ++k)
        if (v[k] != seed + static_cast<int>(k)) bad.fetch_add(1);
    }
  };
  std::thread other(caller, 7);
  caller(1000);
  other.join();
  return bad.load() == 0 ? 0 : fail("a caller's work was not all done");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage: helper_threads_check CASE");
  const std::string name = argv[1];
  int rc;
  if (name == "every_image_once") {
    rc = every_image_once();
  } else if (name == "exception_reaches_the_caller") {
    rc = exception_reaches_the_caller();
  } else if (name == "destroyed_early") {
    rc = destroyed_early();
  } else if (name == "helpers_bounded") {
    rc = helpers_bounded();
  } else if (name == "two_callers") {
    rc = two_callers();
  } else {
    return fail("unknown case " + name);
  }
  if (rc == 0) std::printf("ok\n");
  return rc;
}
