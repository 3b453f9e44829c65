// libFuzzer target: the JSON files of the authors' model folders (train/authors_folder.hpp,
// train/authors_config.hpp). Input: one byte choosing the reader (byte % 7: the config.json of one of
// the six variants, or 6: the shard index model.safetensors.index.json), then the file's bytes, written
// to a file and read as loadAuthorsModel reads it. Besides "only ddl::Error escapes" (no crash on any
// nesting, no unbounded message), it checks that a message quotes no more than a bounded excerpt of the
// file, and that a configuration read from config.json, written back as their save_pretrained writes it,
// reads back the same.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/train/authors_config.hpp"
#include "ddl/train/authors_folder.hpp"
#include "fuzz_input.hpp"

namespace {

// A message names the file, the field and at most a few excerpts of kExcerptBytes.
void requireBounded(const ddl::Error& e) {
  if (std::string(e.what()).size() > 2000) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const unsigned reader = data[0] % 7;
  static const std::string path = ddl_fuzz::tempPath("authors.json");
  ddl_fuzz::writeFile(path, data + 1, size - 1);
  const char* fn = "fuzz_authors_config";
  try {
    const std::string text = ddl::detail::readAuthorsJsonFile(path, fn);
    if (reader == 6) {
      ddl::detail::parseAuthorsShardIndex(text, path);
      return 0;
    }
    const auto variant = static_cast<ddl::AuthorsVariant>(reader);
    const nlohmann::json j = ddl::parseJsonText<nlohmann::json>(text, fn, path);
    const ddl::DeltaLMConfig c = ddl::authorsConfigToDeltaLM(j, variant, path);
    nlohmann::json written;
    try {
      written = ddl::authorsConfigJson(c, "float32");
    } catch (const ddl::Error& e) {  // ddl reads what their code would build; not all of it is writable
      requireBounded(e);
      return 0;
    }
    if (ddl::authorsConfigToDeltaLM(written, ddl::authorsVariantOf(c), "written").toKeyValues() != c.toKeyValues())
      std::abort();
  } catch (const ddl::Error& e) {
    requireBounded(e);
  }
  return 0;
}
