// ddl-tokenize: turns a text file into GPT-2 BPE token ids in nanoGPT's format (docs/tokenizer.md): a flat
// array of little-endian uint16, one per token, no header.
//   ddl-tokenize --vocab encoder.json --merges vocab.bpe --in text.txt --out train.bin
//   ddl-tokenize --tokenizer tokenizer.json --in text.txt --out train.bin --val-out val.bin --val-fraction 0.1
//   ddl-tokenize --tokenizer gpt2/ --in text.txt --out train.bin   (the folder as ddl-text --tokenizer takes it)
// With --val-out the text is cut once, at the first line start at or after (1 - fraction) of its bytes
// (nanoGPT's prepare.py cuts at 90 % too); each part is encoded on its own. Large files are read in
// chunks (--chunk-bytes, 4 MiB) cut where GPT-2's pre-tokens cannot cross (ddl::gpt2SafeCut), so the ids equal those of the
// whole text encoded at once. Every output is written atomically (io/atomic_file.hpp).
// An output that is an input or the other output is refused (exit 1) before anything is read.
// Exit 0: written; 1: bad option; 2: unusable files (missing, malformed, vocabulary too large for uint16).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <ostream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "file_identity.hpp"
#include "ddl/data/bpe_tokenizer.hpp"
#include "ddl/io/atomic_file.hpp"

namespace {

constexpr int kExitUsage = 1;
constexpr int kExitFile = 2;

// A regular file read by byte ranges.
class TextFile {
 public:
  explicit TextFile(const std::string& path) : m_path(path) {
    std::error_code ec;
    // Checked before opening: opening a FIFO would wait for a writer forever.
    if (!std::filesystem::is_regular_file(path, ec))
      throw ddl::IoError(ddl::message("ddl-tokenize", "--in '", path, "': not found or not a regular file"));
    m_in.open(path, std::ios::binary);
    if (!m_in) throw ddl::IoError(ddl::message("ddl-tokenize", "--in '", path, "': cannot open for reading"));
    m_size = std::filesystem::file_size(path, ec);
    if (ec) throw ddl::IoError(ddl::message("ddl-tokenize", "--in '", path, "': cannot read its size: ", ec.message()));
  }
  std::uint64_t size() const { return m_size; }
  // Up to n bytes from offset (fewer at the end of the file).
  std::string read(std::uint64_t offset, std::size_t n) {
    std::string buf(static_cast<std::size_t>(std::min<std::uint64_t>(n, m_size - std::min(offset, m_size))), '\0');
    m_in.clear();
    m_in.seekg(static_cast<std::streamoff>(offset));
    m_in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (static_cast<std::size_t>(m_in.gcount()) != buf.size())
      throw ddl::IoError(ddl::message("ddl-tokenize", "file '", m_path, "': byte offset ", offset + m_in.gcount(),
                                      ": read failed"));
    return buf;
  }

 private:
  std::string m_path;
  std::ifstream m_in;
  std::uint64_t m_size = 0;
};

// Where the validation part starts: the first line start at or after `at`, else the first UTF-8
// character start after it (the split then never breaks a character), else the end.
std::uint64_t splitPoint(TextFile& in, std::uint64_t at, std::size_t chunk) {
  if (at == 0) return 0;
  for (std::uint64_t pos = at - 1; pos < in.size(); pos += chunk) {  // a '\n' at at - 1 makes `at` a line start
    const std::string buf = in.read(pos, chunk);
    const std::size_t nl = buf.find('\n');
    if (nl != std::string::npos) return pos + nl + 1;
  }
  const std::string tail = in.read(at, 4);
  std::size_t k = 0;
  while (k < tail.size() && (static_cast<unsigned char>(tail[k]) & 0xC0) == 0x80) ++k;
  return at + k;
}

struct Written {
  std::uint64_t tokens = 0;
};

// Encodes bytes [begin, end) of the text and writes the ids as little-endian uint16 to `out`, atomically.
Written encodeRange(const ddl::BpeTokenizer& tok, TextFile& in, std::uint64_t begin, std::uint64_t end,
                    ddl::SpecialTokens specials, std::size_t chunk, const std::string& out) {
  Written w;
  ddl::BpeCache cache;
  ddl::writeFileAtomically(out, [&](std::ostream& os) {
    std::string pending;
    std::vector<int> ids;
    std::vector<unsigned char> bytes;
    const auto emit = [&](std::string_view text) {
      ids.clear();
      tok.encodeAppend(text, ids, specials, &cache);
      bytes.resize(ids.size() * 2);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const auto v = static_cast<std::uint16_t>(ids[i]);  // < 65536: the vocabulary was checked
        bytes[2 * i] = static_cast<unsigned char>(v & 0xFF);
        bytes[2 * i + 1] = static_cast<unsigned char>(v >> 8);
      }
      os.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      w.tokens += ids.size();
    };
    for (std::uint64_t pos = begin; pos < end;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, end - pos));
      pending += in.read(pos, n);
      pos += n;
      if (pos == end) break;
      const std::size_t cut = ddl::gpt2SafeCut(pending);
      if (cut == 0) continue;  // no safe place yet: read on
      emit(std::string_view(pending).substr(0, cut));
      pending.erase(0, cut);
    }
    emit(pending);
  });
  return w;
}

// Every file the run reads, with its option: --in and the tokenizer's files (a --tokenizer folder: the
// files fromDirectory may read).
std::vector<std::pair<std::string, std::string>> inputFiles(const ddl::cli::CommandLine& cli) {
  std::vector<std::pair<std::string, std::string>> in{{"--in", cli.text("in")}};
  for (const char* option : {"vocab", "merges", "tokenizer"})
    if (cli.has(option)) in.emplace_back(std::string("--") + option, cli.text(option));
  std::error_code ec;
  if (cli.has("tokenizer") && std::filesystem::is_directory(cli.text("tokenizer"), ec))
    for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt", "encoder.json", "vocab.bpe"}) {
      const std::string path = (std::filesystem::path(cli.text("tokenizer")) / name).string();
      if (std::filesystem::exists(path, ec)) in.emplace_back("--tokenizer", path);
    }
  return in;
}

// An output that is an input (or the other output) would replace it: refused before anything is read,
// comparing files by identity (a link or another spelling of the path is the same file).
void refuseOverwritingInputs(const ddl::cli::CommandLine& cli) {
  const std::vector<std::pair<std::string, std::string>> inputs = inputFiles(cli);
  for (const char* option : {"out", "val-out"}) {
    if (!cli.has(option)) continue;
    const std::string out = cli.text(option);
    for (const auto& [inOption, in] : inputs)
      if (ddl::example::sameFile(out, in))
        throw ddl::ValueError("--" + std::string(option) + " '" + out + "' is the file " + inOption + " reads ('" + in +
                              "'): writing it would replace an input; choose another --" + option);
  }
  if (cli.has("val-out") && ddl::example::sameFile(cli.text("out"), cli.text("val-out")))
    throw ddl::ValueError("--out '" + cli.text("out") + "' and --val-out '" + cli.text("val-out") +
                          "' are one file: the validation tokens would replace the training tokens; give two files");
}

int run(const ddl::cli::CommandLine& cli) {
  const bool hfFile = cli.has("tokenizer");
  if (hfFile == (cli.has("vocab") || cli.has("merges")) || (!hfFile && !(cli.has("vocab") && cli.has("merges"))))
    throw ddl::ValueError("give either --vocab and --merges, or --tokenizer (see --help)");
  if (!cli.has("in") || !cli.has("out")) throw ddl::ValueError("--in and --out are required (see --help)");
  if (cli.has("val-fraction") && !cli.has("val-out")) throw ddl::ValueError("--val-fraction needs --val-out");
  refuseOverwritingInputs(cli);
  const double valFraction = cli.has("val-out") ? cli.number("val-fraction", 0.0, 1.0) : 0.0;
  const ddl::SpecialTokens specials = cli.has("specials") ? ddl::SpecialTokens::Recognised : ddl::SpecialTokens::AsText;
  const auto chunk = cli.integer<std::size_t>("chunk-bytes", 1, std::size_t(1) << 34);

  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  const bool folder = hfFile && std::filesystem::is_directory(cli.text("tokenizer"), ec);
  const ddl::BpeTokenizer tok = folder   ? ddl::BpeTokenizer::fromDirectory(cli.text("tokenizer"))
                                : hfFile ? ddl::BpeTokenizer::fromTokenizerJson(cli.text("tokenizer"))
                                         : ddl::BpeTokenizer::fromFiles(cli.text("vocab"), cli.text("merges"));
  if (tok.vocabSize() > 65536)
    throw ddl::IoError(ddl::message("ddl-tokenize", "the vocabulary has ", tok.vocabSize(),
                                    " ids, more than the 65536 that nanoGPT's uint16 token files can hold"));
  for (const std::string& s : tok.specialTokens())  // the chunks are cut after a '\n' (ddl::gpt2SafeCut)
    if (specials == ddl::SpecialTokens::Recognised && s.find('\n') != std::string::npos)
      throw ddl::ValueError("--specials: the special token \"" + s + "\" holds a line break, which the chunked reading may cut");
  TextFile in(cli.text("in"));
  const std::uint64_t split =
      valFraction > 0 ? splitPoint(in, static_cast<std::uint64_t>(static_cast<double>(in.size()) * (1.0 - valFraction)), chunk)
                      : in.size();
  const auto t1 = std::chrono::steady_clock::now();
  const Written train = encodeRange(tok, in, 0, split, specials, chunk, cli.text("out"));
  Written val;
  if (cli.has("val-out")) val = encodeRange(tok, in, split, in.size(), specials, chunk, cli.text("val-out"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const double loadSeconds = std::chrono::duration<double>(t1 - t0).count();

  std::printf("vocabulary: %d ids, %zu merges (loaded in %.2f s)\n", tok.vocabSize(), tok.mergeCount(), loadSeconds);
  std::printf("%s: %llu tokens from %llu bytes\n", cli.text("out").c_str(), static_cast<unsigned long long>(train.tokens),
              static_cast<unsigned long long>(split));
  if (cli.has("val-out"))
    std::printf("%s: %llu tokens from %llu bytes\n", cli.text("val-out").c_str(),
                static_cast<unsigned long long>(val.tokens), static_cast<unsigned long long>(in.size() - split));
  const double tokens = static_cast<double>(train.tokens + val.tokens);
  std::printf("%.3f bytes per token; encoded at %.1f MB/s\n", tokens > 0 ? static_cast<double>(in.size()) / tokens : 0.0,
              seconds > 0 ? static_cast<double>(in.size()) / seconds / 1e6 : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ddl::cli::CommandLine cli("ddl-tokenize",
                            "encodes a text file with a GPT-2 byte-level BPE tokenizer into nanoGPT's token file format\n"
                            "(little-endian uint16 ids, no header; docs/tokenizer.md). Exit 1: bad option, 2: unusable files.");
  cli.section("tokenizer")
      .option("vocab", "FILE", "vocab.json (GPT-2: encoder.json)")
      .option("merges", "FILE", "merges.txt (GPT-2: vocab.bpe)")
      .option("tokenizer", "PATH", "instead of --vocab and --merges: a Hugging Face tokenizer.json, or a folder of "
              "tokenizer.json, vocab.json + merges.txt or encoder.json + vocab.bpe")
      .flag("specials", "recognise special tokens such as <|endoftext|> in the text (default: plain text)");
  cli.section("files")
      .option("in", "FILE", "the text to encode (any bytes)")
      .option("out", "FILE", "the token file of the text (of the training part with --val-out)")
      .option("val-out", "FILE", "also write the last --val-fraction of the text as a validation token file")
      .option("val-fraction", "F", "the share of the text that goes to --val-out", "0.1")
      .option("chunk-bytes", "N", "bytes read at a time: the memory used (the ids do not depend on it)", "4194304");
  try {
    cli.parse(argc, argv);
    if (cli.has("help")) {
      std::cout << cli.help();
      return 0;
    }
    return run(cli);
  } catch (const ddl::IoError& e) {
    std::cerr << "ddl-tokenize: " << e.what() << "\n";
    return kExitFile;
  } catch (const std::exception& e) {
    std::cerr << "ddl-tokenize: " << e.what() << "\n";
    return kExitUsage;
  }
}
