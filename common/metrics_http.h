// A minimal HTTP endpoint for Prometheus scrapes: GET /metrics answers with
// the text a callback renders at each scrape; other paths get 404. One
// connection at a time on a thread of its own (scrapes come seconds apart).
//
// ps_server and ps_worker use it instead of prometheus-cpp's civetweb
// Exposer: civetweb starts its threads with 100 KB stacks, and glibc refuses
// (EINVAL) to start a thread whose stack cannot hold the process's static
// TLS, which cuBLASLt, cuBLAS, cudart and OpenBLAS make about 170 KB in the
// worker.
#ifndef SHARDPS_COMMON_METRICS_HTTP_H_
#define SHARDPS_COMMON_METRICS_HTTP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace shardps {

class MetricsHttpServer {
 public:
  // Listens on `address` ("0.0.0.0:9200", "[::]:9200": a numeric IPv4 or
  // IPv6 address; port 0 picks one). UNAVAILABLE naming the address and the
  // OS's reason when it cannot.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address,
                                                                   std::function<std::string()> render);
  ~MetricsHttpServer();  // stops serving within ~100 ms.
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer(int fd, int port, std::function<std::string()> render);
  void Serve();
  void Answer(int connection) const;

  const int fd_;
  const int port_;
  const std::function<std::string()> render_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The whole answer (status line, headers, body) of the HTTP server on
// 127.0.0.1:`port` to `request`; empty when nothing answers there. For the
// scrapers of benches and tests.
std::string HttpOnLoopback(int port, const std::string& request);

// HttpOnLoopback(port, a GET of /metrics).
std::string ScrapeLoopbackMetrics(int port);

}  // namespace shardps

#endif  // SHARDPS_COMMON_METRICS_HTTP_H_
