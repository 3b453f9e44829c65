# Checks that a protocol page's id is the hash of its machine-readable block (docs/claims.md, "Protocol
# id"): the first 16 hex digits of the SHA-256 of the lines between "<!-- protocol:begin -->" + "```text"
# and "```" + "<!-- protocol:end -->". Run: cmake -DCLAIMS=<docs/claims.md> -P protocol_id.cmake
if(NOT CLAIMS)
  message(FATAL_ERROR "protocol_id.cmake: pass -DCLAIMS=<the protocol page>")
endif()
file(READ "${CLAIMS}" text)
set(begin_marker "\n<!-- protocol:begin -->\n```text\n")
set(end_marker "\n```\n<!-- protocol:end -->")
string(FIND "${text}" "${begin_marker}" begin_at)
string(FIND "${text}" "${end_marker}" end_at)
if(begin_at EQUAL -1 OR end_at EQUAL -1 OR end_at LESS begin_at)
  message(FATAL_ERROR "${CLAIMS}: no ```text block between <!-- protocol:begin --> and <!-- protocol:end -->")
endif()
string(LENGTH "${begin_marker}" begin_length)
math(EXPR start "${begin_at} + ${begin_length}")
math(EXPR length "${end_at} + 1 - ${start}")  # the block's last line keeps its newline
string(SUBSTRING "${text}" ${start} ${length} block)
string(SHA256 hash "${block}")
string(SUBSTRING "${hash}" 0 16 expected)
string(REGEX MATCH "Protocol id: `claims-[0-9]+-([0-9a-f]+)`" found "${text}")
if(NOT found)
  message(FATAL_ERROR "${CLAIMS}: no line \"Protocol id: `claims-<version>-<16 hex digits>`\"")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL expected)
  # A plain message is printed as one line (FATAL_ERROR wraps it), so a test can match it.
  message("${CLAIMS}: the protocol id says ${CMAKE_MATCH_1}, but its block hashes to ${expected}: "
          "a changed protocol is a new protocol (a new version and id, docs/claims.md)")
  message(FATAL_ERROR "protocol id mismatch")
endif()
message(STATUS "${CLAIMS}: protocol id ${expected} matches its block")
