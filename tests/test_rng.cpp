// ddl::Rng (core/rng.hpp): a saved state resumes the same stream, including a pending Box-Muller spare.
#include <cstdint>
#include <string>

#include "catch_compat.hpp"
#include "ddl/core/rng.hpp"

namespace test_rng {  // each test file in its own namespace: a group of files compiles as one unit

TEST_CASE("Rng state round trip resumes the same normal stream", "[core][rng]") {
  for (int draws = 0; draws < 4; ++draws) {  // even draws: no spare pending; odd: a spare pending
    ddl::Rng a(7);
    for (int i = 0; i < draws; ++i) a.normal();
    const ddl::Rng::State saved = a.state();
    CHECK(saved[4] == static_cast<std::uint64_t>(draws % 2));
    ddl::Rng b(12345);
    b.normal();  // b has its own spare; setState must replace it
    b.setState(saved);
    for (int i = 0; i < 9; ++i) {
      CAPTURE(draws, i);
      CHECK(b.normal() == a.normal());
      CHECK(b.next() == a.next());
    }
  }
}

TEST_CASE("Rng setState refuses malformed states", "[core][rng][errors]") {
  ddl::Rng r(1);
  ddl::Rng::State s = r.state();
  s[4] = 2;
  CHECK_THROWS_AS(r.setState(s), ddl::ValueError);
  ddl::Rng::State zero{};
  try {
    r.setState(zero);
    FAIL("all-zero state accepted");
  } catch (const ddl::ValueError& e) {
    CHECK(std::string(e.what()).find("Rng::setState") != std::string::npos);
  }
}

}  // namespace test_rng
