// Tests for include/ddl/core/parse.hpp and its users: numbers from outside (command line, JSON,
// checkpoint metadata) are checked for syntax, integrality, finiteness and range before any cast,
// with a message naming the option: examples/cli.hpp, DeltaNetConfig::fromKeyValues and
// TrainerOptions::updateFromJson. (Before, static_cast turned 1e300 / NaN into undefined behaviour,
// 2.7 into 2 and 4294967297 into 1.)
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../examples/cli.hpp"
#include "catch_compat.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/nn/models/delta_net_config.hpp"
#include "ddl/train/trainer.hpp"

namespace test_parse {  // each test file in its own namespace: a group of files compiles as one unit

using ddl_test::contains;
using ddl_test::thrownMessage;

TEST_CASE("parseInteger: whole decimal integers inside the range, else a message naming the option", "[parse]") {
  CHECK(ddl::parseInteger<int>("--epochs", "12", 1, 100) == 12);
  CHECK(ddl::parseInteger<int>("--epochs", "-3", -5, 5) == -3);
  CHECK(ddl::parseInteger<std::int64_t>("n", "9223372036854775807") == std::numeric_limits<std::int64_t>::max());
  CHECK(ddl::parseInteger<std::uint64_t>("--seed", "18446744073709551615") == std::numeric_limits<std::uint64_t>::max());
  for (const char* bad : {"2.7", "1e300", "nan", "inf", "", " 3", "3 ", "+3", "0x10", "12abc", "4294967297", "0", "101"}) {
    CAPTURE(bad);
    const std::string msg = thrownMessage<ddl::ValueError>([&] { ddl::parseInteger<int>("--epochs", bad, 1, 100); });
    CHECK(contains(msg, "--epochs expects an integer in [1, 100], got '" + std::string(bad) + "'"));
  }
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::parseInteger<std::uint64_t>("--seed", "-1"); }),
                 "--seed expects an integer in [0, 18446744073709551615], got '-1'"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::parseInteger<std::int64_t>("n", "9223372036854775808"); }),
                 "got '9223372036854775808'"));
}

TEST_CASE("integerFromDouble and integerInRange: no cast before the checks", "[parse]") {
  CHECK(ddl::integerFromDouble<int>("k", 3.0, 0, 10) == 3);
  CHECK(ddl::integerFromDouble<std::int64_t>("k", -9223372036854775808.0) == std::numeric_limits<std::int64_t>::min());
  const double bad[] = {2.7, 1e300, -1e300, std::nan(""), std::numeric_limits<double>::infinity(), 11.0, -1.0,
                        9223372036854775808.0};
  for (const double v : bad) {
    CAPTURE(v);
    CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::integerFromDouble<int>("key 'epochs'", v, 0, 10); }),
                   "key 'epochs' expects an integer in [0, 10], got "));
  }
  CHECK_THROWS_AS(ddl::integerFromDouble<std::int64_t>("k", 9223372036854775808.0), ddl::ValueError);  // 2^63
  CHECK_THROWS_AS(ddl::integerFromDouble<std::uint64_t>("k", 18446744073709551616.0), ddl::ValueError);  // 2^64
  CHECK(ddl::integerInRange<int>("k", std::uint64_t{7}, 0, 10) == 7);
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::integerInRange<int>("k", std::uint64_t{4294967297}); }),
                 "got 4294967297"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::integerInRange<std::uint64_t>("k", std::int64_t{-1}); }),
                 "got -1"));
  CHECK_THROWS_AS(ddl::integerInRange<int>("k", std::int64_t{-5}, 0, 10), ddl::ValueError);
}

TEST_CASE("parseNumber: finite numbers inside the range", "[parse]") {
  CHECK(ddl::parseNumber("--lr", "5e-4") == 5e-4);
  CHECK(ddl::parseNumber("--lr", "3", 0, 10) == 3.0);
  CHECK(ddl::numberInRange("x", 0.5, 0, 1) == 0.5);
  for (const char* bad : {"nan", "inf", "-inf", "1e999", "", "0.5x", " 1", "-1"}) {
    CAPTURE(bad);
    CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::parseNumber("--lr", bad, 0, 10); }),
                   "--lr expects a finite number in [0, 10], got '" + std::string(bad) + "'"));
  }
  CHECK_THROWS_AS(ddl::numberInRange("x", std::nan(""), 0, 1), ddl::ValueError);
}

namespace {
ddl::cli::CommandLine exampleCli() {
  ddl::cli::CommandLine cli("ddl-test", "a test program");
  cli.option("epochs", "E", "training epochs", "10")
      .option("lr", "LR", "learning rate", "0.001")
      .option("warmup", "W", "warmup steps (default: auto)")
      .option("mode", "M", "a | b", "a")
      .section("output")
      .flag("resume", "continue");
  return cli;
}
ddl::cli::CommandLine parsed(std::vector<const char*> args) {
  ddl::cli::CommandLine cli = exampleCli();
  args.insert(args.begin(), "ddl-test");
  cli.parse(static_cast<int>(args.size()), args.data());
  return cli;
}
std::string parseError(std::vector<const char*> args) {
  return thrownMessage<ddl::ValueError>([&] { parsed(args); });
}
}  // namespace

TEST_CASE("cli: options with defaults, typed getters that check, refusals that name the argument", "[parse][cli]") {
  const ddl::cli::CommandLine none = parsed({});
  CHECK(none.integer<int>("epochs", 1, 100) == 10);
  CHECK(none.integer<int>("epochs", 1, 100, 7) == 7);  // a saved value replaces the declared default
  CHECK(none.number("lr", 0, 1) == 0.001);
  CHECK_FALSE(none.has("warmup"));
  CHECK_FALSE(none.has("resume"));
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { none.text("warmup"); }), "--warmup is required"));

  const ddl::cli::CommandLine given = parsed({"--epochs", "3", "--lr=0.5", "--resume", "--mode", "b"});
  CHECK(given.integer<int>("epochs", 1, 100, 7) == 3);
  CHECK(given.number("lr", 0, 1) == 0.5);
  CHECK(given.has("resume"));
  CHECK(given.choice("mode", {"a", "b"}) == "b");

  CHECK(contains(thrownMessage<ddl::ValueError>([] { parsed({"--epochs", "2.7"}).integer<int>("epochs", 1, 100); }),
                 "--epochs expects an integer in [1, 100], got '2.7'"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { parsed({"--epochs", "4294967297"}).integer<int>("epochs", 1, 100); }),
                 "got '4294967297'"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { parsed({"--warmup", "-5"}).integer<int>("warmup", 0, 1000); }),
                 "--warmup expects an integer in [0, 1000], got '-5'"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { parsed({"--lr", "nan"}).number("lr", 0, 1); }), "--lr expects a finite"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { parsed({"--mode", "c"}).choice("mode", {"a", "b"}); }),
                 "--mode expects one of a, b, got 'c'"));

  CHECK(contains(parseError({"--nope", "1"}), "unknown option '--nope'"));
  CHECK(contains(parseError({"--epochs"}), "option --epochs needs a value (E)"));
  CHECK(contains(parseError({"--epochs", "--resume"}), "option --epochs needs a value"));
  CHECK(contains(parseError({"--epochs", "1", "--epochs", "2"}), "option --epochs is given twice"));
  CHECK(contains(parseError({"stray"}), "unexpected argument 'stray'"));
  CHECK(contains(parseError({"--resume=yes"}), "option --resume takes no value"));
  CHECK(parseError({"--lr", "-1"}) == "<no exception>");  // a negative number is a value, checked by the getter

  const std::string help = exampleCli().help();
  CHECK(contains(help, "usage: ddl-test [options]\na test program\n"));
  CHECK(contains(help, "  --epochs E            training epochs (default 10)\n"));
  CHECK(contains(help, "output:\n  --resume              continue\n"));
  CHECK_THROWS_AS(none.has("undeclared"), std::logic_error);  // a program bug, not a user error
}

TEST_CASE("DeltaNetConfig::fromKeyValues refuses numbers a cast would mangle", "[parse][config]") {
  ddl::DeltaNetConfig c;
  ddl::applyPreset(c, "code");
  const std::map<std::string, std::string> good = c.toKeyValues();
  CHECK(ddl::configJson(ddl::DeltaNetConfig::fromKeyValues(good)) == ddl::configJson(c));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"d", "1e300"},   {"d", "nan"},     {"d", "2.5"},          {"d", "0"},  {"depth", "-1"},
      {"dv", "4294967297"}, {"hidden", "99999999999"}, {"learned_expansion", "2"}, {"eps_k", "nan"},
      {"beta0", "inf"}, {"norm_eps", "1e999"}};
  for (const auto& kv : bad) {
    CAPTURE(kv.first, kv.second);
    std::map<std::string, std::string> m = good;
    m[kv.first] = kv.second;
    const std::string msg = thrownMessage<ddl::ValueError>([&] { ddl::DeltaNetConfig::fromKeyValues(m); });
    CHECK(contains(msg, "ddl::DeltaNetConfig::fromKeyValues: key '" + kv.first + "' expects"));
    CHECK(contains(msg, "got '" + kv.second + "'"));
  }
}

TEST_CASE("TrainerOptions::updateFromJson checks integers before converting them", "[parse][trainer]") {
  ddl::TrainerOptions o;
  o.updateFromJson(nlohmann::json{{"epochs", 3}, {"batch", 64.0}, {"seed", 18446744073709551615ull}});
  CHECK(o.epochs == 3);
  CHECK(o.batchSize == 64);
  CHECK(o.seed == std::numeric_limits<std::uint64_t>::max());
  const std::vector<std::pair<const char*, nlohmann::json>> bad = {
      {"epochs", 2.7},        {"epochs", 1e300},         {"epochs", std::nan("")}, {"epochs", 4294967297ll},
      {"epochs", 0},          {"batch", -1},             {"warmup_steps", -5},     {"step_every", 1e19},
      {"augment_pad", 1e10},  {"seed", -1},              {"seed", 2.5},            {"epochs", "ten"}};
  for (const auto& kv : bad) {
    CAPTURE(kv.first, kv.second.dump());
    ddl::TrainerOptions t;
    const std::string msg = thrownMessage<ddl::IoError>([&] { t.updateFromJson(nlohmann::json{{kv.first, kv.second}}); });
    CHECK(contains(msg, "ddl::TrainerOptions::updateFromJson"));
    CHECK(contains(msg, std::string("'") + kv.first + "'"));
    CHECK(t.toJson() == ddl::TrainerOptions().toJson());  // the refused value was not applied
  }
}

}  // namespace test_parse
