#pragma once
// ddl/core/error.hpp: the ddl::Error family and the boundary checks that throw it.
// Messages name the function, what was expected and what was found (docs/architecture.md principle 6).
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include <Eigen/Core>

namespace ddl {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};
class ShapeError : public Error {  // operands do not fit together
 public:
  using Error::Error;
};
class ValueError : public Error {  // an option or value outside its domain (d = 0, eps < 0, ...)
 public:
  using Error::Error;
};
class MathError : public Error {  // a mathematically undefined request (inverse of a singular operator)
 public:
  using Error::Error;
};
class IoError : public Error {  // a file that cannot be opened, read, written or parsed
 public:
  using Error::Error;
};

// "(3, 4)"
inline std::string shapeString(Eigen::Index rows, Eigen::Index cols) {
  std::ostringstream os;
  os << '(' << rows << ", " << cols << ')';
  return os.str();
}
template <class Derived>
std::string shapeOf(const Eigen::EigenBase<Derived>& m) {
  return shapeString(m.rows(), m.cols());
}

namespace detail {
inline void appendAll(std::ostringstream&) {}
template <class T, class... Rest>
void appendAll(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  appendAll(os, rest...);
}
}  // namespace detail

// Builds "fn: part part ..." from any streamable parts.
template <class... Parts>
std::string message(const char* fn, const Parts&... parts) {
  std::ostringstream os;
  os << fn << ": ";
  detail::appendAll(os, parts...);
  return os.str();
}

// Throws ShapeError "fn: <what> has shape (r, c), expected (er, ec)"; a negative expectation means "any".
inline void checkShape(const char* fn, const char* what, Eigen::Index rows, Eigen::Index cols,
                       Eigen::Index expectedRows, Eigen::Index expectedCols) {
  const bool rowsOk = expectedRows < 0 || rows == expectedRows;
  const bool colsOk = expectedCols < 0 || cols == expectedCols;
  if (rowsOk && colsOk) return;
  std::ostringstream os;
  os << fn << ": " << what << " has shape " << shapeString(rows, cols) << ", expected (";
  if (expectedRows < 0) os << "any"; else os << expectedRows;
  os << ", ";
  if (expectedCols < 0) os << "any"; else os << expectedCols;
  os << ')';
  throw ShapeError(os.str());
}
template <class Derived>
void checkShape(const char* fn, const char* what, const Eigen::EigenBase<Derived>& m,
                Eigen::Index expectedRows, Eigen::Index expectedCols) {
  checkShape(fn, what, m.rows(), m.cols(), expectedRows, expectedCols);
}

// Throws ValueError "fn: <msg>" unless cond holds.
template <class... Parts>
void require(bool cond, const char* fn, const Parts&... parts) {
  if (!cond) throw ValueError(message(fn, parts...));
}

// options after options.validate() (which throws naming what is wrong): lets a constructor check its
// configuration before the members built from it, m_cfg(validated(config)).
template <class Options>
const Options& validated(const Options& options) {
  options.validate();
  return options;
}

}  // namespace ddl
