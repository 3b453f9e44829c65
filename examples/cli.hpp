#pragma once
// examples/cli.hpp: the command line of the example programs (ddl-mnist, ddl-cifar, tools).
//
//   ddl::cli::CommandLine cli("ddl-mnist", "trains a DeltaNet on Fashion-MNIST");
//   cli.section("training")
//      .option("epochs", "E", "training epochs", "10")
//      .flag("resume", "continue the run saved in --out");
//   cli.parse(argc, argv);                               // ValueError on anything unknown
//   if (cli.has("help")) { std::cout << cli.help(); return 0; }
//   int epochs = cli.integer<int>("epochs", 1, 1000000);         // the value given, else the default
//   int again  = cli.integer<int>("epochs", 1, 1000000, saved);  // ... else `saved` (an optional)
//
// Options are `--name value` or `--name=value`; flags take no value. An unknown option, a missing
// value, an option given twice and a stray positional argument are refused, and so is an empty value
// of an option whose metavar is FILE, DIR, PATH or GLOB ("" would name the current folder, or make
// "--out ''" read "/checkpoint.safetensors"). Typed getters check
// the text completely (ddl/core/parse.hpp): "--epochs 2.7" and "--batch 0" fail with a message that
// names the option and the accepted range instead of being truncated or crashing later.
#include <cstddef>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/parse.hpp"

namespace ddl::cli {

class CommandLine {
 public:
  // program: the name in the usage line; summary: text printed under it (may span lines).
  CommandLine(std::string program, std::string summary) : m_program(std::move(program)), m_summary(std::move(summary)) {
    flag("help", "print this help and exit");
  }

  // Starts a titled group of options in the help text.
  CommandLine& section(const std::string& title) {
    m_entries.push_back(Entry{"", "", title, "", false, true});
    return *this;
  }
  // An option without a value (has(name) tells whether it was given).
  CommandLine& flag(const std::string& name, const std::string& help) { return add(Entry{name, "", help, "", true, false}); }
  // An option with a value; defaultValue ("" = none) is what getters return when it is not given
  // and is shown in the help text.
  CommandLine& option(const std::string& name, const std::string& metavar, const std::string& help,
                      const std::string& defaultValue = "") {
    return add(Entry{name, metavar, help, defaultValue, false, false});
  }

  // Reads argv[1..argc). Throws ValueError naming the offending argument.
  void parse(int argc, const char* const* argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0 || arg.size() == 2)
        throw ValueError("unexpected argument '" + arg + "' (options start with --; see --help)");
      const std::size_t eq = arg.find('=');
      const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      const Entry* e = find(name);
      if (!e) throw ValueError("unknown option '--" + name + "' (see --help)");
      if (m_given.count(name)) throw ValueError("option --" + name + " is given twice");
      if (e->isFlag) {
        if (eq != std::string::npos) throw ValueError("option --" + name + " takes no value, got '" + arg + "'");
        m_given[name] = "";
      } else if (eq != std::string::npos) {
        m_given[name] = arg.substr(eq + 1);
      } else {
        const bool nextIsOption = i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) == 0;
        if (i + 1 >= argc || nextIsOption) throw ValueError("option --" + name + " needs a value (" + e->metavar + ")");
        m_given[name] = argv[++i];
      }
      if (m_given[name].empty()) refuseEmptyPath(*e);
    }
  }

  // True when the option or flag was on the command line.
  // Whether the program declared --name (shared option readers skip what a program does not offer).
  bool declares(const std::string& name) const { return find(name) != nullptr; }

  bool has(const std::string& name) const {
    declared(name);
    return m_given.count(name) != 0;
  }

  // The text given, else whenAbsent when it holds a value, else the declared default. Throws
  // ValueError when there is none of them.
  std::string text(const std::string& name, const std::optional<std::string>& whenAbsent = std::nullopt) const {
    const Entry& e = declared(name);
    const auto it = m_given.find(name);
    if (it != m_given.end()) return it->second;
    if (whenAbsent) return *whenAbsent;
    if (e.defaultValue.empty()) throw ValueError("option --" + name + " is required");
    return e.defaultValue;
  }

  // The text given (else whenAbsent, else the default), which must be one of `allowed`.
  std::string choice(const std::string& name, std::initializer_list<const char*> allowed,
                     const std::optional<std::string>& whenAbsent = std::nullopt) const {
    const std::string value = text(name, whenAbsent);
    std::string list;
    for (const char* a : allowed) {
      if (value == a) return value;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    throw ValueError("--" + name + " expects one of " + list + ", got '" + value + "'");
  }

  // An integer in [lo, hi]: the value given, else whenAbsent when it holds a value (not checked:
  // it comes from the program), else the declared default.
  template <class Int>
  Int integer(const std::string& name, Int lo, Int hi, std::optional<Int> whenAbsent = std::nullopt) const {
    if (!has(name) && whenAbsent) return *whenAbsent;
    return parseInteger<Int>("--" + name, text(name), lo, hi);
  }

  // A finite number in [lo, hi]: the value given, else whenAbsent, else the declared default.
  double number(const std::string& name, double lo, double hi, std::optional<double> whenAbsent = std::nullopt) const {
    if (!has(name) && whenAbsent) return *whenAbsent;
    return parseNumber("--" + name, text(name), lo, hi);
  }

  const std::string& program() const { return m_program; }

  // Every declared option with its value (given, else the default or ""; a flag: "1" or "0"), in
  // declaration order: what MPI ranks compare to agree that they run one command.
  std::vector<std::pair<std::string, std::string>> values() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const Entry& e : m_entries)
      if (!e.isSection) out.emplace_back(e.name, e.isFlag ? (has(e.name) ? "1" : "0") : text(e.name, e.defaultValue));
    return out;
  }

  // "usage: ..." and one line per option, grouped by section, defaults shown.
  std::string help() const {
    std::string out = "usage: " + m_program + " [options]\n" + m_summary + "\n";
    for (const Entry& e : m_entries) {
      if (e.isSection) {
        out += e.help + ":\n";
        continue;
      }
      std::string left = "  --" + e.name + (e.metavar.empty() ? "" : " " + e.metavar);
      if (left.size() < kHelpColumn) left.resize(kHelpColumn, ' ');
      else left += "\n" + std::string(kHelpColumn, ' ');
      out += left + wrap(e.help + (e.defaultValue.empty() ? "" : " (default " + e.defaultValue + ")")) + "\n";
    }
    return out;
  }

 private:
  static constexpr std::size_t kHelpColumn = 24, kHelpWidth = 100;

  // Breaks text at spaces so that help lines stay within kHelpWidth columns.
  static std::string wrap(const std::string& text) {
    std::string out;
    std::size_t column = kHelpColumn, start = 0;
    while (start < text.size()) {
      std::size_t end = text.find(' ', start);
      if (end == std::string::npos) end = text.size();
      const std::size_t len = end - start;
      if (column > kHelpColumn && column + 1 + len > kHelpWidth) {
        out += "\n" + std::string(kHelpColumn, ' ');
        column = kHelpColumn;
      } else if (column > kHelpColumn) {
        out += ' ';
        ++column;
      }
      out += text.substr(start, len);
      column += len;
      start = end + 1;
    }
    return out;
  }

  struct Entry {
    std::string name, metavar, help, defaultValue;
    bool isFlag = false, isSection = false;
  };

  CommandLine& add(Entry e) {
    if (e.name.empty() || e.name.find('=') != std::string::npos || find(e.name))
      throw std::logic_error("ddl::cli::CommandLine: bad or repeated option name '" + e.name + "'");
    m_entries.push_back(std::move(e));
    return *this;
  }
  static void refuseEmptyPath(const Entry& e) {
    for (const auto& [metavar, what] : {std::pair<const char*, const char*>{"FILE", "a file"}, {"DIR", "a folder"},
                                        {"PATH", "a file or folder"}, {"GLOB", "a file, folder or pattern"}})
      if (e.metavar == metavar) throw ValueError("--" + e.name + " is empty: name " + what);
  }
  const Entry* find(const std::string& name) const {
    for (const Entry& e : m_entries)
      if (!e.isSection && e.name == name) return &e;
    return nullptr;
  }
  // A getter for an option that was never declared is a bug in the program, not in its input.
  const Entry& declared(const std::string& name) const {
    const Entry* e = find(name);
    if (!e) throw std::logic_error("ddl::cli::CommandLine: option --" + name + " was never declared");
    return *e;
  }
  std::string m_program, m_summary;
  std::vector<Entry> m_entries;
  std::map<std::string, std::string> m_given;
};

}  // namespace ddl::cli
