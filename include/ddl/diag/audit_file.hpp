#pragma once
// ddl/diag/audit_file.hpp: the recorder's rows (diag/recorder.hpp) as CSV and JSON, both written
// atomically (io/atomic_file.hpp), one row per gated block per epoch; JSON reads back (a resumed run
// keeps the rows of the epochs it does not repeat).
//
// Columns, in order (the JSON rows have the same keys): epoch, block, stage, then the GateStats
// (tokens, non_finite, beta_mean/min/max, saturated, regime_<name> counts in DeltaRegime order,
// k_norm, eps_k, ktilde_min/mean/small, rho_mean, lambda_min/mean/max, expected_ratio_mean,
// error_ratio_tokens/mean/max_dev, value_norm_mean/max, readout_tokens, readout_norm_mean/max), the
// SpectralSample (spectral_*), and the beta histogram as beta_hist_0 .. beta_hist_<bins-1> (JSON: one
// array "beta_histogram"). Numbers are written shortest-exact; NaN (not measured) is "nan" in CSV and
// null in JSON, infinities are "inf" / "-inf" in both.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/core/types.hpp"
#include "ddl/diag/recorder.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/io/metrics_csv.hpp"
#include "ddl/ops/delta_operator.hpp"
#include "ddl/ops/direction.hpp"

namespace ddl {

namespace detail {
// "partial-reflection" -> "regime_partial_reflection"
inline std::string regimeColumn(int r) {
  std::string s = std::string("regime_") + regimeName(static_cast<DeltaRegime>(r));
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}

// Calls f(name, field) for every numeric field of a row in column order; field is int&, Index& or
// double& (const for a const row). The histogram and k_norm are handled by the writers themselves.
template <class Row, class F>
void visitAuditFields(Row& row, F&& f) {
  f("epoch", row.epoch);
  f("block", row.block);
  f("stage", row.stage);
  auto& g = row.gate;
  f("tokens", g.tokens);
  f("non_finite", g.nonFinite);
  f("beta_mean", g.betaMean);
  f("beta_min", g.betaMin);
  f("beta_max", g.betaMax);
  f("saturated", g.saturated);
  for (int r = 0; r < kDeltaRegimeCount; ++r) f(regimeColumn(r).c_str(), g.regimes[static_cast<std::size_t>(r)]);
  f("eps_k", g.epsK);
  f("ktilde_min", g.kTildeMin);
  f("ktilde_mean", g.kTildeMean);
  f("ktilde_small", g.smallDirections);
  f("rho_mean", g.rhoMean);
  f("lambda_min", g.lambdaMin);
  f("lambda_mean", g.lambdaMean);
  f("lambda_max", g.lambdaMax);
  f("expected_ratio_mean", g.expectedRatioMean);
  f("error_ratio_tokens", g.errorRatioTokens);
  f("error_ratio_mean", g.errorRatioMean);
  f("error_ratio_max_dev", g.errorRatioMaxDeviation);
  f("value_norm_mean", g.valueNormMean);
  f("value_norm_max", g.valueNormMax);
  f("readout_tokens", g.readoutTokens);
  f("readout_norm_mean", g.readoutNormMean);
  f("readout_norm_max", g.readoutNormMax);
  auto& s = row.spectral;
  f("spectral_tokens", s.tokens);
  f("spectral_lambda_min", s.lambdaMin);
  f("spectral_lambda_max", s.lambdaMax);
  f("spectral_eigenvalue_error", s.eigenvalueError);
  f("spectral_asymmetry", s.asymmetry);
  f("spectral_norm_predicted", s.normPredicted);
  f("spectral_norm_measured", s.normMeasured);
  f("spectral_condition_predicted", s.conditionPredicted);
  f("spectral_condition_measured", s.conditionMeasured);
  f("spectral_determinant_error", s.determinantError);
  f("spectral_orthogonality_predicted", s.orthogonalityPredicted);
  f("spectral_orthogonality_measured", s.orthogonalityMeasured);
  f("spectral_singular", s.singular);
  f("spectral_orthogonal", s.orthogonal);
}

inline std::string auditNumber(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return csvNumber(v);
}
template <class Int>
std::string auditNumber(Int v) {
  return std::to_string(static_cast<long long>(v));
}

// All rows share one histogram size; returns it (0 for no rows).
inline std::size_t auditBins(const char* fn, const std::vector<AuditRow>& rows) {
  if (rows.empty()) return 0;
  const std::size_t bins = rows.front().gate.histogram.size();
  for (const AuditRow& r : rows)
    if (r.gate.histogram.size() != bins)
      throw ValueError(message(fn, "rows have histograms of ", bins, " and ", r.gate.histogram.size(), " bins"));
  return bins;
}
}  // namespace detail

// The CSV header for rows with `bins` histogram bins.
inline std::vector<std::string> auditCsvColumns(std::size_t bins) {
  std::vector<std::string> cols;
  AuditRow row;
  detail::visitAuditFields(row, [&](const char* name, auto&) {
    if (std::string(name) == "eps_k") cols.emplace_back("k_norm");  // the guard, then its eps
    cols.emplace_back(name);
  });
  for (std::size_t b = 0; b < bins; ++b) cols.push_back("beta_hist_" + std::to_string(b));
  return cols;
}

// Writes rows as CSV (header + one line per row), replacing path atomically; IoError on failure.
inline void writeAuditCsv(const std::string& path, const std::vector<AuditRow>& rows, Index bins = 20) {
  const std::size_t b = rows.empty() ? static_cast<std::size_t>(bins) : detail::auditBins("ddl::writeAuditCsv", rows);
  const std::vector<std::string> cols = auditCsvColumns(b);
  writeFileAtomically(path, [&](std::ostream& os) {
    for (std::size_t i = 0; i < cols.size(); ++i) os << (i ? "," : "") << cols[i];
    os << "\n";
    for (const AuditRow& r : rows) {
      std::vector<std::string> fields;
      detail::visitAuditFields(r, [&](const char* name, const auto& v) {
        if (std::string(name) == "eps_k") fields.emplace_back(toString(r.gate.norm));
        fields.push_back(detail::auditNumber(v));
      });
      for (Index c : r.gate.histogram) fields.push_back(std::to_string(static_cast<long long>(c)));
      for (std::size_t i = 0; i < fields.size(); ++i) os << (i ? "," : "") << fields[i];
      os << "\n";
    }
  });
}

namespace detail {
inline nlohmann::json auditJsonNumber(double v) {
  if (std::isnan(v)) return nullptr;
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}
template <class Int>
nlohmann::json auditJsonNumber(Int v) {
  return static_cast<std::int64_t>(v);
}
inline double auditJsonDouble(const std::string& what, const nlohmann::json& v) {
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (v.is_number()) return v.get<double>();
  if (v.is_string() && (v == "inf" || v == "-inf")) return (v == "inf" ? 1 : -1) * std::numeric_limits<double>::infinity();
  throw IoError(what + " expects a number, null, \"inf\" or \"-inf\", got " + jsonExcerpt(v));
}
inline std::int64_t auditJsonInteger(const std::string& what, const nlohmann::json& v) {
  if (!v.is_number_integer()) throw IoError(what + " expects an integer, got " + jsonExcerpt(v));
  return v.get<std::int64_t>();
}
}  // namespace detail

// Writes rows as JSON {"format": "ddl-audit", "version": 1, "rows": [...]}, replacing path atomically.
inline void writeAuditJson(const std::string& path, const std::vector<AuditRow>& rows) {
  detail::auditBins("ddl::writeAuditJson", rows);
  nlohmann::json out = {{"format", "ddl-audit"}, {"version", 1}, {"rows", nlohmann::json::array()}};
  for (const AuditRow& r : rows) {
    nlohmann::json j = nlohmann::json::object();
    detail::visitAuditFields(r, [&](const char* name, const auto& v) { j[name] = detail::auditJsonNumber(v); });
    j["k_norm"] = toString(r.gate.norm);
    nlohmann::json hist = nlohmann::json::array();
    for (Index c : r.gate.histogram) hist.push_back(static_cast<std::int64_t>(c));
    j["beta_histogram"] = hist;
    out["rows"].push_back(j);
  }
  writeFileAtomically(path, [&](std::ostream& os) { os << out.dump(1) << "\n"; });
}

// Reads a file written by writeAuditJson. IoError naming the file and the field when it is not one.
inline std::vector<AuditRow> readAuditJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(message("ddl::readAuditJson", "cannot open ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  requireJsonDepth(buf.str(), "ddl::readAuditJson", path);
  const nlohmann::json j = nlohmann::json::parse(buf.str(), nullptr, false);
  const std::string where = "ddl::readAuditJson: " + path;
  // Compared as JSON values: j.value("format", "") would throw nlohmann's type_error on a number.
  if (!j.is_object() || !j.contains("format") || j["format"] != "ddl-audit" || !j.contains("rows") ||
      !j["rows"].is_array())
    throw IoError(where + ": not a ddl audit file (expected a JSON object with \"format\": \"ddl-audit\" and \"rows\")");
  if (!j.contains("version") || j["version"] != 1)
    throw IoError(where + ": unsupported version " + (j.contains("version") ? jsonExcerpt(j["version"]) : "(none)"));
  std::vector<AuditRow> rows;
  for (std::size_t i = 0; i < j["rows"].size(); ++i) {
    const nlohmann::json& o = j["rows"][i];
    const std::string at = where + ": row " + std::to_string(i);
    if (!o.is_object()) throw IoError(at + " is not an object");
    AuditRow r;
    detail::visitAuditFields(r, [&](const char* name, auto& v) {
      if (!o.contains(name)) throw IoError(at + " has no \"" + name + "\"");
      using T = std::decay_t<decltype(v)>;
      if constexpr (std::is_floating_point<T>::value)
        v = detail::auditJsonDouble(at + " \"" + name + "\"", o[name]);
      else
        v = static_cast<T>(detail::auditJsonInteger(at + " \"" + name + "\"", o[name]));
    });
    if (!o.contains("k_norm") || !o["k_norm"].is_string()) throw IoError(at + " has no string \"k_norm\"");
    r.gate.norm = parseDirectionNorm(o["k_norm"].get<std::string>());
    if (!o.contains("beta_histogram") || !o["beta_histogram"].is_array()) throw IoError(at + " has no array \"beta_histogram\"");
    for (const nlohmann::json& c : o["beta_histogram"])
      r.gate.histogram.push_back(static_cast<Index>(detail::auditJsonInteger(at + " \"beta_histogram\"", c)));
    rows.push_back(std::move(r));
  }
  return rows;
}

// Writes <dir>/audit.csv and <dir>/audit.json (each atomically). bins: the histogram size of an empty
// file's header.
inline void writeAuditFiles(const std::string& dir, const std::vector<AuditRow>& rows, Index bins = 20) {
  writeAuditCsv(dir + "/audit.csv", rows, bins);
  writeAuditJson(dir + "/audit.json", rows);
}

}  // namespace ddl
