// rest_reader: closed-loop REST readers against a det master, for
// tests/bench/rest_read_bench.sh (the web page's load: people watching a search).
//
//   rest_reader --address HOST:PORT --token TOKEN --route PATH=N [--route PATH=N ...]
//               [--pause-ms MS]
//
// Starts N threads per route; each sends GET PATH again as soon as its previous answer
// arrived (or MS milliseconds after it: a page's refresh period), as a browser would: "Accept-Encoding: gzip" and, once it has an ETag,
// "If-None-Match". Runs until SIGTERM or SIGINT, then prints one Markdown row per route:
// requests, 304s, errors, p50/p99 latency (ms), mean response body bytes as received
// (compressed when the master compressed it), and a last row with this program's own CPU
// (user + system seconds, and % of one core over its run).
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace {

struct Route {
  std::string path;
  int readers = 0;
};

// What one reader saw.
struct Tally {
  std::vector<double> latency_ms;
  int64_t bytes = 0;
  int64_t not_modified = 0;
  int64_t gzip = 0;
  int64_t errors = 0;
  std::string first_error;
};

std::atomic<bool> g_stop{false};

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "rest_reader: %s\nusage: rest_reader --address HOST:PORT --token TOKEN "
               "--route PATH=N [--route PATH=N ...] [--pause-ms MS]\n",
               why.c_str());
  return 2;
}

void Read(const std::string& host, int port, const std::string& token, const std::string& path,
          int pause_ms, Tally* tally) {
  std::string etag;
  while (!g_stop.load()) {
    httplib::Client client(host, port);
    client.set_decompress(false);  // count the bytes as sent
    client.set_keep_alive(false);
    client.set_connection_timeout(10);
    client.set_read_timeout(60);
    httplib::Headers headers = {{"Authorization", "Bearer " + token},
                                {"Accept-Encoding", "gzip"}};
    if (!etag.empty()) headers.emplace("If-None-Match", etag);
    const auto start = std::chrono::steady_clock::now();
    httplib::Result res = client.Get(path.c_str(), headers);
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start).count();
    if (g_stop.load()) break;  // cut short by the stop: not a sample
    if (!res || (res->status != 200 && res->status != 304)) {
      ++tally->errors;
      if (tally->first_error.empty()) {
        tally->first_error = res ? absl::StrCat("HTTP ", res->status, ": ", res->body.substr(0, 200))
                                 : absl::StrCat("no answer: ", httplib::to_string(res.error()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a dead master: no spin
      continue;
    }
    tally->latency_ms.push_back(ms);
    tally->bytes += static_cast<int64_t>(res->body.size());
    if (res->status == 304) ++tally->not_modified;
    if (res->get_header_value("Content-Encoding") == "gzip") ++tally->gzip;
    if (res->has_header("ETag")) etag = res->get_header_value("ETag");
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  std::string address, token;
  std::vector<Route> routes;
  int pause_ms = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return Usage(absl::StrCat(arg, ": needs a value"));
    const std::string value = argv[++i];
    if (arg == "--address") {
      address = value;
    } else if (arg == "--token") {
      token = value;
    } else if (arg == "--pause-ms") {
      if (!absl::SimpleAtoi(value, &pause_ms) || pause_ms < 0 || pause_ms > 600000) {
        return Usage(absl::StrCat("--pause-ms: expected 0..600000, got \"", value, "\""));
      }
    } else if (arg == "--route") {
      size_t eq = value.rfind('=');
      Route r;
      if (eq == std::string::npos || value[0] != '/' ||
          !absl::SimpleAtoi(value.substr(eq + 1), &r.readers) || r.readers < 1 ||
          r.readers > 1000) {
        return Usage(absl::StrCat("--route: expected /PATH=N with N in 1..1000, got \"", value,
                                  "\""));
      }
      r.path = value.substr(0, eq);
      routes.push_back(r);
    } else {
      return Usage(absl::StrCat("unknown flag ", arg));
    }
  }
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return Usage(absl::StrCat("--address: expected HOST:PORT, got \"", address, "\""));
  }
  if (token.empty()) return Usage("--token: required");
  if (routes.empty()) return Usage("--route: give at least one");
  const std::string host = address.substr(0, colon);

  // Only the main thread takes the stop signals.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = CpuSeconds();
  std::vector<std::vector<Tally>> tallies(routes.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < routes.size(); ++r) {
    tallies[r].resize(routes[r].readers);
    for (int i = 0; i < routes[r].readers; ++i) {
      threads.emplace_back(Read, host, port, token, routes[r].path, pause_ms, &tallies[r][i]);
    }
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  g_stop.store(true);
  for (auto& t : threads) t.join();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = CpuSeconds() - cpu_start;

  std::printf("| route | readers | requests | 304 | gzip | errors | p50 ms | p99 ms | mean bytes |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (size_t r = 0; r < routes.size(); ++r) {
    Tally all;
    for (Tally& t : tallies[r]) {
      all.latency_ms.insert(all.latency_ms.end(), t.latency_ms.begin(), t.latency_ms.end());
      all.bytes += t.bytes;
      all.not_modified += t.not_modified;
      all.gzip += t.gzip;
      all.errors += t.errors;
      if (all.first_error.empty()) all.first_error = t.first_error;
    }
    const size_t n = all.latency_ms.size();
    std::printf("| %s | %d | %zu | %lld | %lld | %lld | %.1f | %.1f | %.0f |\n",
                routes[r].path.c_str(), routes[r].readers, n,
                static_cast<long long>(all.not_modified), static_cast<long long>(all.gzip),
                static_cast<long long>(all.errors), Percentile(all.latency_ms, 0.5),
                Percentile(all.latency_ms, 0.99),
                n == 0 ? 0.0 : static_cast<double>(all.bytes) / static_cast<double>(n));
    if (!all.first_error.empty()) {
      std::fprintf(stderr, "rest_reader: %s: first error: %s\n", routes[r].path.c_str(),
                   all.first_error.c_str());
    }
  }
  std::printf("| rest_reader CPU | | %.1f s over %.1f s (%.0f%% of a core) | | | | | | |\n", cpu,
              wall, 100 * cpu / wall);
  return 0;
}
