#include "client/client_config.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/flag_files.h"
#include "common/security.h"
#include "common/wire_dtype.h"

namespace shardps {
namespace {

using Values = std::map<std::string, std::string>;

absl::Status Collect(const std::vector<std::string>& words, bool from_file, int depth, Values& values);

// `flagfiles`: a --flagfile value (files separated by commas).
absl::Status ReadFlagfiles(const std::string& flagfiles, int depth, Values& values) {
  for (const std::string& path : FlagFilePaths(flagfiles)) {
    if (path.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--flagfile=", flagfiles, " names an empty file (two commas in a row, or one at an end)"));
    }
    if (depth > kMaxFlagfileDepth) {
      return absl::InvalidArgumentError(absl::StrCat("flag files nest deeper than ", kMaxFlagfileDepth, " at ", path));
    }
    absl::StatusOr<std::vector<std::string>> words = ReadFlagFileWords(path);
    if (!words.ok()) return words.status();
    if (absl::Status s = Collect(*words, /*from_file=*/true, depth + 1, values); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool Known(const std::string& name) {
  static const char* const kNames[] = {
      "servers",       "rank",          "num_workers",     "mode",       "staleness",  "partition_bytes",
      "wire_dtype",    "channels_per_server", "in_flight_bytes", "push_timeout", "pull_timeout",
      "server_timeout", "heartbeat_interval", "tls_ca", "tls_cert", "tls_key", "tls_mutual", "auth_token_file",
      "async_prefetch", "pull_with_push", "tcp_congestion", "replicas", "server_timeout_for_failover",
      "http2_bdp_probe", "push_request_bytes", "fetch_request_bytes", "coalesce_pushes", "first_weights_lane"};
  for (const char* k : kNames) {
    if (name == k) return true;
  }
  return false;
}

// The text's words: separated by spaces or newlines; a double-quoted part
// keeps its spaces (`--flagfile="/a dir/job.flags"`), its quotes dropped. No
// escapes: a word cannot hold a double quote.
absl::StatusOr<std::vector<std::string>> TextWords(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool quoted = false, any = false;
  for (char c : text) {
    if (c == '"') {
      quoted = !quoted;
      any = true;
    } else if (!quoted && absl::ascii_isspace(static_cast<unsigned char>(c))) {
      if (any) words.push_back(std::exchange(word, ""));
      any = false;
    } else {
      word += c;
      any = true;
    }
  }
  if (quoted) return absl::InvalidArgumentError(absl::StrCat("client options: a '\"' is not closed in: ", text));
  if (any) words.push_back(word);
  return words;
}

// Words "--name=value" (or "--name", "--noname" for booleans); later ones win.
absl::Status Collect(const std::vector<std::string>& words, bool from_file, int depth, Values& values) {
  for (absl::string_view word : words) {
    if (absl::StartsWith(word, "#")) continue;
    absl::string_view w = word;
    if (!absl::ConsumePrefix(&w, "--")) absl::ConsumePrefix(&w, "-");
    const size_t equals = w.find('=');
    std::string name(w.substr(0, equals));
    std::string value = equals == absl::string_view::npos ? "true" : std::string(w.substr(equals + 1));
    if (absl::StartsWith(name, "no") && Known(name.substr(2)) && equals == absl::string_view::npos) {
      name = name.substr(2);
      value = "false";
    }
    if (name == "flagfile") {
      if (absl::Status s = ReadFlagfiles(value, depth, values); !s.ok()) return s;
      continue;
    }
    if (!Known(name)) {
      if (from_file) continue;  // another process's flag
      return absl::InvalidArgumentError(absl::StrCat("unknown client option '", std::string(word), "'"));
    }
    values[name] = value;
  }
  return absl::OkStatus();
}

absl::Status Bad(const std::string& name, const std::string& value, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat("option --", name, "=", value, ": want ", want));
}

template <typename T>
absl::Status Number(const Values& v, const std::string& name, T* out) {
  auto it = v.find(name);
  if (it == v.end()) return absl::OkStatus();
  if (!absl::SimpleAtoi(it->second, out)) return Bad(name, it->second, "an integer");
  return absl::OkStatus();
}

absl::Status Duration(const Values& v, const std::string& name, absl::Duration* out) {
  auto it = v.find(name);
  if (it == v.end()) return absl::OkStatus();
  double seconds = 0;
  if (absl::SimpleAtod(it->second, &seconds) && seconds > 0) {
    *out = absl::Seconds(seconds);
    return absl::OkStatus();
  }
  if (!absl::ParseDuration(it->second, out) || *out <= absl::ZeroDuration()) {
    return Bad(name, it->second, "a positive duration such as 30s or 500ms");
  }
  return absl::OkStatus();
}

absl::Status Boolean(const Values& v, const std::string& name, bool* out) {
  auto it = v.find(name);
  if (it == v.end()) return absl::OkStatus();
  if (it->second != "true" && it->second != "false") return Bad(name, it->second, "true or false");
  *out = it->second == "true";
  return absl::OkStatus();
}

std::string Text(const Values& v, const std::string& name) {
  auto it = v.find(name);
  return it == v.end() ? "" : it->second;
}

absl::Status Fill(const Values& v, ClientOptions& o) {
  o.servers = absl::StrSplit(Text(v, "servers"), ',', absl::SkipEmpty());
  if (o.servers.empty()) return absl::InvalidArgumentError("no servers: give --servers=host:port,...");
  o.job.num_servers = static_cast<int>(o.servers.size());
  if (absl::Status s = Number(v, "rank", &o.rank); !s.ok()) return s;
  if (absl::Status s = Number(v, "num_workers", &o.job.num_workers); !s.ok()) return s;
  if (absl::Status s = Number(v, "staleness", &o.job.staleness); !s.ok()) return s;
  if (absl::Status s = Number(v, "partition_bytes", &o.job.partition_bytes); !s.ok()) return s;
  if (absl::Status s = Number(v, "replicas", &o.job.replicas); !s.ok()) return s;
  if (absl::Status s = Number(v, "channels_per_server", &o.channels_per_server); !s.ok()) return s;
  if (absl::Status s = Number(v, "in_flight_bytes", &o.in_flight_bytes); !s.ok()) return s;
  if (absl::Status s = Number(v, "push_request_bytes", &o.push_request_bytes); !s.ok()) return s;
  if (absl::Status s = Number(v, "fetch_request_bytes", &o.fetch_request_bytes); !s.ok()) return s;
  if (v.count("mode")) {
    absl::StatusOr<Mode> mode = ParseMode(Text(v, "mode"));
    if (!mode.ok()) return mode.status();
    o.job.mode = *mode;
  }
  if (v.count("wire_dtype")) {
    absl::StatusOr<wire::DType> dtype = ParseWireDType(Text(v, "wire_dtype"));
    if (!dtype.ok()) return dtype.status();
    o.wire_dtype = *dtype;
  }
  for (auto [name, field] : {std::pair{"push_timeout", &o.push_timeout}, {"pull_timeout", &o.pull_timeout},
                             {"server_timeout", &o.server_timeout}, {"heartbeat_interval", &o.heartbeat_interval},
                             {"server_timeout_for_failover", &o.failover_timeout}}) {
    if (absl::Status s = Duration(v, name, field); !s.ok()) return s;
  }
  bool mutual = false;
  if (absl::Status s = Boolean(v, "tls_mutual", &mutual); !s.ok()) return s;
  if (absl::Status s = Boolean(v, "async_prefetch", &o.async_prefetch); !s.ok()) return s;
  if (absl::Status s = Boolean(v, "pull_with_push", &o.pull_with_push); !s.ok()) return s;
  if (absl::Status s = Boolean(v, "http2_bdp_probe", &o.http2_bdp_probe); !s.ok()) return s;
  if (absl::Status s = Boolean(v, "coalesce_pushes", &o.coalesce_pushes); !s.ok()) return s;
  if (absl::Status s = Boolean(v, "first_weights_lane", &o.first_weights_lane); !s.ok()) return s;
  if (v.count("tcp_congestion")) o.tcp_congestion = Text(v, "tcp_congestion");
  o.tls = TlsFiles{Text(v, "tls_cert"), Text(v, "tls_key"), Text(v, "tls_ca"), mutual};
  absl::StatusOr<std::string> token = ReadAuthToken(Text(v, "auth_token_file"));
  if (!token.ok()) return token.status();
  o.auth_token = *token;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClientOptions> ClientOptionsFromText(const std::string& text) {
  absl::StatusOr<std::vector<std::string>> words = TextWords(text);
  if (!words.ok()) return words.status();
  Values values;
  if (absl::Status s = Collect(*words, /*from_file=*/false, 0, values); !s.ok()) return s;
  ClientOptions o;
  if (absl::Status s = Fill(values, o); !s.ok()) return s;
  return o;
}

}  // namespace shardps
