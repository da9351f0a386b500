#include "server/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardps {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, "\\u00", c < 0x10 ? "0" : "", absl::Hex(c));
      continue;
    }
    out += c;
  }
  return out + "\"";
}

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// A tensor's bytes as the file holds them: I64 or F32, little-endian.
absl::string_view DataOf(const TensorView& t) {
  return t.is_int ? absl::string_view(reinterpret_cast<const char*>(t.ints.data()), t.ints.size() * 8)
                  : absl::string_view(reinterpret_cast<const char*>(t.values.data()), t.values.size() * 4);
}

absl::Status WriteAll(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// A JSON reader for the subset safetensors headers use: objects, strings,
// arrays and integers.
class HeaderParser {
 public:
  explicit HeaderParser(const std::string& text) : s_(text) {}

  absl::Status Parse(SafetensorsFile& out, std::map<std::string, std::pair<int64_t, int64_t>>& offsets) {
    if (!Consume('{')) return Error("expected '{'");
    if (Consume('}')) return absl::OkStatus();
    do {
      std::string name;
      if (!ReadString(name) || !Consume(':')) return Error("expected a key");
      if (name == "__metadata__") {
        if (!ParseMetadata(out.metadata)) return Error("bad __metadata__");
        continue;
      }
      std::string dtype;
      LoadedTensor tensor;
      std::pair<int64_t, int64_t> range{-1, -1};
      if (!ParseTensor(dtype, tensor.shape, range)) return Error(absl::StrCat("bad entry ", name));
      if (dtype != "F32" && dtype != "I64") {
        return absl::DataLossError(absl::StrCat("tensor ", name, " has dtype ", dtype, "; only F32 and I64 are read"));
      }
      tensor.is_int = dtype == "I64";
      offsets[name] = range;
      out.tensors[name] = std::move(tensor);
    } while (Consume(','));
    if (!Consume('}')) return Error("expected '}'");
    return absl::OkStatus();
  }

 private:
  absl::Status Error(const std::string& what) {
    return absl::DataLossError(absl::StrCat("malformed safetensors header at byte ", pos_, ": ", what));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ReadString(std::string& out) {
    if (!Consume('"')) return false;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {
        if (pos_ >= s_.size()) return false;
        c = s_[pos_++];
        if (c == 'u') {
          uint32_t code = 0;
          if (pos_ + 4 > s_.size() || !absl::SimpleHexAtoi(s_.substr(pos_, 4), &code)) return false;
          c = static_cast<char>(code);
          pos_ += 4;
        } else if (c == 'n') {
          c = '\n';
        } else if (c == 't') {
          c = '\t';
        }
      }
      out += c;
    }
    return Consume('"');
  }
  bool ReadInt(int64_t& out) {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < s_.size() && (isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-')) ++pos_;
    if (start == pos_ || pos_ - start > 18) return false;
    return absl::SimpleAtoi(s_.substr(start, pos_ - start), &out);  // false for "-" or "1-2"
  }
  bool ReadIntArray(std::vector<int64_t>& out) {
    if (!Consume('[')) return false;
    if (Consume(']')) return true;
    do {
      int64_t v;
      if (!ReadInt(v)) return false;
      out.push_back(v);
    } while (Consume(','));
    return Consume(']');
  }
  bool ParseMetadata(std::map<std::string, std::string>& out) {
    if (!Consume('{')) return false;
    if (Consume('}')) return true;
    do {
      std::string k, v;
      if (!ReadString(k) || !Consume(':') || !ReadString(v)) return false;
      out[k] = v;
    } while (Consume(','));
    return Consume('}');
  }
  bool ParseTensor(std::string& dtype, std::vector<int64_t>& shape, std::pair<int64_t, int64_t>& range) {
    if (!Consume('{')) return false;
    do {
      std::string field;
      if (!ReadString(field) || !Consume(':')) return false;
      if (field == "dtype") {
        if (!ReadString(dtype)) return false;
      } else if (field == "shape") {
        if (!ReadIntArray(shape)) return false;
      } else if (field == "data_offsets") {
        std::vector<int64_t> offs;
        if (!ReadIntArray(offs) || offs.size() != 2) return false;
        range = {offs[0], offs[1]};
      } else {
        return false;
      }
    } while (Consume(','));
    return Consume('}');
  }

  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

absl::Status WriteSafetensorsAtomically(const std::string& path,
                                        const std::map<std::string, std::string>& metadata,
                                        const std::vector<TensorView>& tensors) {
  std::vector<std::string> entries;
  std::vector<std::string> meta;
  for (const auto& [k, v] : metadata) meta.push_back(absl::StrCat(JsonString(k), ":", JsonString(v)));
  entries.push_back(absl::StrCat("\"__metadata__\":{", absl::StrJoin(meta, ","), "}"));
  int64_t offset = 0;
  for (const TensorView& t : tensors) {
    const int64_t bytes = static_cast<int64_t>(DataOf(t).size());
    entries.push_back(absl::StrCat(JsonString(t.name), ":{\"dtype\":\"", t.is_int ? "I64" : "F32", "\",\"shape\":[",
                                   absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", offset,
                                   ",", offset + bytes, "]}"));
    offset += bytes;
  }
  std::string header = absl::StrCat("{", absl::StrJoin(entries, ","), "}");
  header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t header_len = header.size();  // little-endian on every supported host.

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  absl::Status status = WriteAll(fd, reinterpret_cast<const char*>(&header_len), 8, tmp);
  if (status.ok()) status = WriteAll(fd, header.data(), header.size(), tmp);
  for (const TensorView& t : tensors) {
    if (!status.ok()) break;
    const absl::string_view data = DataOf(t);
    status = WriteAll(fd, data.data(), data.size(), tmp);
  }
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError("cannot fsync", tmp);
  ::close(fd);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) status = ErrnoError("cannot rename", tmp);
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  const int dfd = ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  // Only a file that is not there is NOT_FOUND (a caller may then start
  // afresh); one that cannot be read says why, and one that is no regular
  // file (a FIFO would block the open) is not a checkpoint: DATA_LOSS.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file ", path));
    return ErrnoError("cannot read", path);
  }
  if (!S_ISREG(st.st_mode)) return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cannot open", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  if (bytes.size() < 8) return absl::DataLossError(absl::StrCat(path, " is truncated: ", bytes.size(), " bytes"));
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8) {
    return absl::DataLossError(absl::StrCat(path, ": header length ", header_len, " exceeds the file"));
  }
  const std::string header = bytes.substr(8, header_len);
  const size_t data_start = 8 + header_len;
  SafetensorsFile file;
  std::map<std::string, std::pair<int64_t, int64_t>> offsets;
  absl::Status parsed = HeaderParser(header).Parse(file, offsets);
  if (!parsed.ok()) return absl::DataLossError(absl::StrCat(path, ": ", parsed.message()));
  for (auto& [name, tensor] : file.tensors) {
    const auto [begin, end] = offsets[name];
    // The shape's product, held to what the file can hold: a damaged
    // header's shape must not overflow or allocate past the file.
    const int64_t width = tensor.is_int ? 8 : 4;
    const int64_t most = static_cast<int64_t>(bytes.size()) / width;
    int64_t count = 1;
    for (int64_t d : tensor.shape) {
      if (d < 0 || (d > 0 && count > most / d)) {
        return absl::DataLossError(absl::StrCat(path, ": tensor ", name, " has a shape larger than the file"));
      }
      count *= d;
    }
    if (begin < 0 || end < begin || (end - begin) != count * width ||
        data_start + static_cast<size_t>(end) > bytes.size()) {
      return absl::DataLossError(absl::StrCat(path, ": tensor ", name, " has bad data offsets"));
    }
    if (count == 0) continue;  // an empty vector's data() may be null: no memcpy of nothing
    if (tensor.is_int) {
      tensor.ints.resize(count);
      std::memcpy(tensor.ints.data(), bytes.data() + data_start + begin, count * 8);
    } else {
      tensor.values.resize(count);
      std::memcpy(tensor.values.data(), bytes.data() + data_start + begin, count * 4);
    }
  }
  return file;
}

}  // namespace shardps
