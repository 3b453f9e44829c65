#pragma once
// ddl/io/metrics_csv.hpp: a small CSV writer for per-epoch metrics (RFC 4180 quoting).
//
//   ddl::MetricsCsv csv("run/metrics.csv", {"epoch", "train_loss", "test_acc"});
//   csv.row(1, 0.4123, 0.861);      // the file now ends with this complete row
//
// The header row is written once. In append mode (for --resume) an existing file keeps its rows
// and must start with the same header; an empty or missing file gets the header.
// Every row replaces the whole file atomically (io/atomic_file.hpp): a crash or a full disk leaves
// the file as it was before the row, never half a row. Metrics files have one row per epoch, so
// rewriting a few kilobytes per row costs nothing next to an epoch.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <sstream>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/io/atomic_file.hpp"

namespace ddl {

// Quotes a CSV field when it holds a comma, quote, CR, LF or leading/trailing space.
inline std::string csvField(const std::string& s) {
  const bool quote = s.find_first_of(",\"\r\n") != std::string::npos ||
                     (!s.empty() && (s.front() == ' ' || s.back() == ' '));
  if (!quote) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// Shortest decimal text that reads back as the same value ("0.1", not "0.10000000000000001").
template <class T>
std::string csvNumber(T v) {
  if constexpr (std::is_floating_point<T>::value) {
    char buf[64];
    for (int precision = 6; precision <= 17; ++precision) {
      std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(v));
      if (static_cast<T>(std::strtod(buf, nullptr)) == v) break;
    }
    return buf;
  } else {
    return std::to_string(v);
  }
}

class MetricsCsv {
 public:
  // Opens `path` and writes the header (append = false truncates; append = true keeps rows that
  // follow an identical header).
  MetricsCsv(const std::string& path, const std::vector<std::string>& columns, bool append = false)
      : m_path(path), m_columns(columns) {
    const char* fn = "ddl::MetricsCsv";
    require(!columns.empty(), fn, path, ": needs at least one column");
    const std::string header = joinRow(columns);
    if (append) {
      std::error_code ec;
      if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))  // a FIFO would block
        throw IoError(message(fn, path, ": not a regular file; refusing to append to it"));
      std::ifstream in(path, std::ios::binary);
      std::string existing((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!existing.empty()) {
        std::string first = existing.substr(0, existing.find('\n'));
        if (!first.empty() && first.back() == '\r') first.pop_back();
        if (first != header)
          throw IoError(message(fn, path, ": existing header \"", first, "\" differs from \"", header,
                                "\"; refusing to append"));
        if (existing.back() != '\n')  // only a writer without atomic rows leaves this
          throw IoError(message(fn, path, ": the last row (from byte offset ", existing.rfind('\n') + 1,
                                ") is incomplete; refusing to append after it"));
        m_text = std::move(existing);
        return;
      }
    }
    writeLine(header);
  }

  const std::string& path() const { return m_path; }
  const std::vector<std::string>& columns() const { return m_columns; }

  // Appends one row of already formatted fields (quoted as needed); one field per column.
  void writeRow(const std::vector<std::string>& fields) {
    if (fields.size() != m_columns.size())
      throw ValueError(message("ddl::MetricsCsv::writeRow", m_path, ": got ", fields.size(), " fields, expected ",
                               m_columns.size(), " (", joinRow(m_columns), ")"));
    writeLine(joinRow(fields));
  }

  // Appends one row from numbers and strings, e.g. row(epoch, loss, "delta").
  template <class... Values>
  void row(const Values&... values) {
    writeRow({format(values)...});
  }

 private:
  template <class T>
  static std::string format(const T& v) {
    if constexpr (std::is_arithmetic<T>::value && !std::is_same<T, bool>::value) {
      return csvNumber(v);
    } else {
      std::ostringstream os;
      os << v;
      return os.str();
    }
  }
  static std::string joinRow(const std::vector<std::string>& fields) {
    std::string line;
    for (std::size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + csvField(fields[i]);
    return line;
  }
  // The file becomes m_text + line, or stays as it was (the IoError names the file and the reason).
  void writeLine(const std::string& line) {
    std::string next = m_text + line + '\n';
    writeFileAtomically(m_path, [&](std::ostream& os) { os << next; });
    m_text = std::move(next);
  }

  std::string m_path;
  std::vector<std::string> m_columns;
  std::string m_text;  // the file's content: every row written so far
};

}  // namespace ddl
