#include "common/trace.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

int64_t Micros(absl::Time t) { return absl::ToUnixMicros(t); }

// A JSON string literal.
std::string Quoted(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrCat("\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

Trace::Trace(std::string process_name, size_t max_events)
    : process_name_(std::move(process_name)), max_events_(max_events), pid_(static_cast<int>(getpid())) {}

int Trace::TrackId(absl::string_view track) {
  auto [it, added] = tracks_.try_emplace(std::string(track), static_cast<int>(track_names_.size()) + 1);
  if (added) track_names_.emplace_back(track);
  return it->second;
}

void Trace::Add(Event e) {
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(e));
}

void Trace::Span(absl::string_view track, std::string name, absl::Time start, absl::Time end, TraceArgs args) {
  absl::MutexLock lock(&mu_);
  Add(Event{'X', TrackId(track), std::move(name), "", Micros(start), std::max<int64_t>(0, Micros(end) - Micros(start)),
            0, std::move(args)});
}

void Trace::Async(absl::string_view category, std::string name, absl::Time start, absl::Time end, TraceArgs args) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  Add(Event{'b', 0, name, std::string(category), Micros(start), 0, id, std::move(args)});
  Add(Event{'e', 0, std::move(name), std::string(category), std::max(Micros(start), Micros(end)), 0, id, {}});
}

void Trace::Instant(absl::string_view track, std::string name, absl::Time at, TraceArgs args) {
  absl::MutexLock lock(&mu_);
  Add(Event{'i', TrackId(track), std::move(name), "", Micros(at), 0, 0, std::move(args)});
}

size_t Trace::events() const {
  absl::MutexLock lock(&mu_);
  return events_.size();
}

int64_t Trace::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

std::string Trace::Json() const {
  absl::MutexLock lock(&mu_);
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  absl::StrAppend(&out, "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": ", pid_,
                  ", \"args\": {\"name\": ", Quoted(process_name_), "}}");
  for (size_t t = 0; t < track_names_.size(); ++t) {
    absl::StrAppend(&out, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": ", pid_, ", \"tid\": ", t + 1,
                    ", \"args\": {\"name\": ", Quoted(track_names_[t]), "}}");
  }
  for (const Event& e : events_) {
    absl::StrAppend(&out, ",\n{\"ph\": \"", std::string(1, e.phase), "\", \"name\": ", Quoted(e.name),
                    ", \"pid\": ", pid_, ", \"ts\": ", e.ts_us);
    if (e.phase == 'X') absl::StrAppend(&out, ", \"dur\": ", e.dur_us);
    if (e.phase == 'b' || e.phase == 'e') {
      absl::StrAppend(&out, ", \"cat\": ", Quoted(e.category), ", \"id\": ", e.id, ", \"tid\": 0");
    } else {
      absl::StrAppend(&out, ", \"tid\": ", e.track);
    }
    if (e.phase == 'i') absl::StrAppend(&out, ", \"s\": \"t\"");
    if (!e.args.empty()) {
      out += ", \"args\": {";
      for (size_t a = 0; a < e.args.size(); ++a) {
        absl::StrAppend(&out, a ? ", " : "", Quoted(e.args[a].first), ": ", e.args[a].second);
      }
      out += "}";
    }
    out += "}";
  }
  absl::StrAppend(&out, "\n], \"otherData\": {\"dropped_events\": ", dropped_, "}}\n");
  return out;
}

absl::Status Trace::Write(const std::string& path) const {
  const std::string json = Json();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << json;
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write the trace to ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace shardps
