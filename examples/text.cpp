// ddl-text: trains DeltaLM, the paper's causal language model of Delta Transformer blocks, on bytes of
// text and reports the validation loss in bits per byte, the test once at the end, and a sample.
//   ddl-text                                the fortunes of Debian's fortunes package
//   ddl-text --data FILE                    any file (UTF-8 text or anything else, read as bytes)
//   ddl-text --tokens 'DIR/*train*.bin' --val-tokens 'DIR/*val*.bin' --vocab 50304
//                                           token files of nanoGPT (uint16) or llm.c (shards), read by
//                                           window, not loaded; the loss in nats per token
//   ddl-text --tokens ... --tokenizer gpt2/  prompts (--prompt, --generate) and samples as text, not ids
//   ddl-text --variant cc-ec                the expanded state of the paper (dv 4, CC + EC); see --help
//   ddl-text --residual additive            the plain pre-norm Transformer, the baseline
//   ddl-text --generate "The "              samples from the checkpoint in --out
//   ddl-text --resume / --eval-only         continue / evaluate the checkpoint in --out
//   ddl-text --init-from DIR                start from the authors' model folder DIR (config.json +
//                                           model.safetensors, docs/authors_models.md): trains it, or with
//                                           --eval-only / --generate evaluates / samples it
//   ddl-text --out RUN --export-authors DIR the checkpoint in RUN as the authors' model folder DIR
//   ddl-text --audit                        audit.csv / audit.json: the gate of every Delta sublayer
//                                           (block <l> attn, block <l> mlp) on the validation text
// An "epoch" here is --steps steps of --batch random windows of --context bytes (tokens); the validation
// text is evaluated after every epoch. Ctrl-C (SIGINT) or SIGTERM finishes the step, saves a checkpoint and
// exits with 128 + signal; --resume then continues exactly where it stopped.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "example_run.hpp"
#include "beta_max_option.hpp"
#include "clamp_option.hpp"
#include "text_files.hpp"
#include "ddl/data/bpe_tokenizer.hpp"
#include "ddl/data/text_corpus.hpp"
#include "ddl/data/token_files.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/train/authors_model.hpp"
#include "ddl/train/next_token_task.hpp"
#include "ddl/train/saved_model.hpp"
#include "ddl/train/text_windows.hpp"

namespace {
using namespace ddl::example;
template <class Tokens>
using Loop = ddl::TrainingLoop<ddl::DeltaLM<float>, ddl::NextTokenTask<float, Tokens>, ddl::TextWindows<float, Tokens>,
                               ddl::AdamW<float>>;
using Bytes = std::vector<std::uint8_t>;

void declareOptions(ddl::cli::CommandLine& cli) {
  cli.option("data", "PATH", "a file, or a folder whose files (except fortune's *.dat indexes) are read in name order",
             kFortunes)
      .option("eval-bytes", "N", "validation bytes (tokens with --tokens) evaluated after every epoch (0 = all)", "65536")
      .section("token files (instead of --data)")
      .option("tokens", "GLOB", "training tokens: a file, a folder of *.bin or 'DIR/*train*.bin'; nanoGPT's uint16 "
              "files or llm.c's shards")
      .option("val-tokens", "GLOB", "validation tokens (needed with --tokens)")
      .option("test-tokens", "GLOB", "test tokens, evaluated once at the end (default: none)")
      .option("vocab", "V", "the tokens' vocabulary (needed with --tokens; 50304 for nanoGPT's GPT-2 tokens)")
      .option("tokenizer", "DIR", "the tokens' tokenizer (tokenizer.json, vocab.json + merges.txt or encoder.json + "
              "vocab.bpe): --prompt / --generate are text and the sample is printed as text")
      .section("model")
      .option("variant", "V", "dv1 | cc | cc-ec | tc | tc-ec (dv 4 for all but dv1)", "tc-ec")
      .option("preset", "P", "code | paper", "code")
      .option("residual", "R", "delta | write_only | additive", "delta")
      .option("width", "D", "model width d", "128")
      .option("depth", "L", "number of blocks", "4")
      .option("heads", "H", "attention heads (d / H features each)", "4")
      .option("context", "T", "bytes (tokens) per training window and longest context", "128");
  declareBetaMaxOption(cli);
  cli.option("init-from", "DIR", "the authors' model folder DIR (config.json + model.safetensors or a sharded index, "
              "docs/authors_models.md) is the model: trained from its weights, or evaluated (--eval-only) or sampled "
              "(--generate); the model options above are the folder's")
      .option("export-authors", "DIR", "write the checkpoint in --out as the authors' model folder DIR and exit (a "
              "folder that holds a model: replaced whole with --overwrite, never the run's --init-from folder)");
  // Chosen on the validation text (docs/text_defaults.md).
  TrainingDefaults d;  // bytes: no augmentation, no label smoothing
  d.epochs = "10";
  d.lr = "0.002";
  d.weightDecay = "0.1";
  d.batch = "4";
  declareTrainingOptions(cli, d);
  cli.option("steps", "S", "steps per epoch", "1000")
      .option("clip", "C", "global gradient-norm clipping (0 = off)", "1");
  declareOutputOptions(cli, "out/text");
  declareClampOption(cli);
  cli.section("sampling")
      .option("generate", "TEXT", "sample from the checkpoint in --out after TEXT (a model of tokens: ids, '464 2068', "
              "or text with --tokenizer) and exit")
      .option("prompt", "TEXT", "prompt of the sample printed after training (tokens: ids, or text with --tokenizer; "
              "default the first validation token)", "The ")
      .option("sample-tokens", "N", "bytes (tokens) to sample", "300")
      .option("temperature", "X", "softmax temperature (> 0)", "0.8")
      .option("top-k", "K", "sample among the K most likely bytes (tokens), at most the vocabulary (the default "
              "is clamped to it)", "40");
}

// The model: from the command line, or (resume, eval-only, generate) from the checkpoint.
ddl::DeltaLMConfig modelConfig(const ddl::cli::CommandLine& cli, const SavedRun& run,
                               const std::optional<ddl::DeltaLM<float>>& initFrom) {
  if (initFrom) {  // the folder decides the model; a model option would be ignored, so it is refused
    for (const char* option : {"width", "depth", "heads", "context", "variant", "preset", "residual"})
      if (cli.has(option))
        throw ddl::ValueError(std::string("--") + option + " with --init-from: the model is the folder's (" +
                              cli.text("init-from") + "/config.json); leave --" + option + " out");
    const ddl::DeltaLMConfig& cfg = initFrom->config();
    if (cli.has("vocab") && cli.integer<ddl::Index>("vocab", 2, ddl::Index(1) << 30) != cfg.vocab)
      throw ddl::ValueError("--vocab " + cli.text("vocab") + " with --init-from: the folder's model has a vocabulary of " +
                            std::to_string(cfg.vocab));
    return cfg;
  }
  requireSavedModelOptions(cli, run, {{"width", "d"}, {"depth", "depth"}, {"heads", "heads"}, {"context", "context"},
                                      {"variant", "variant"}, {"preset", "preset"}, {"residual", "residual"},
                                      {"vocab", "vocab"}});
  if (run.from()) return savedModelConfig<ddl::DeltaLMConfig>(run);
  ddl::DeltaLMConfig cfg;
  cfg.block.residual.residual = ddl::parseResidualKind(cli.choice("residual", {"delta", "write_only", "additive"}));
  ddl::applyPreset(cfg, cli.choice("preset", {"code", "paper"}));
  ddl::applyVariant(cfg, cli.choice("variant", {"dv1", "cc", "cc-ec", "tc", "tc-ec"}));
  cfg.d = cli.integer<ddl::Index>("width", 2, 1 << 14);
  cfg.depth = cli.integer<ddl::Index>("depth", 0, 1 << 10);
  cfg.heads = cli.integer<ddl::Index>("heads", 1, 1 << 14);
  cfg.context = cli.integer<ddl::Index>("context", 1, 1 << 16);
  if (cli.has("vocab") && !cli.has("tokens"))
    throw ddl::ValueError("--vocab is the vocabulary of token files: give it with --tokens (bytes have 256)");
  if (cli.has("tokens")) {
    if (!cli.has("vocab"))
      throw ddl::ValueError("--tokens needs --vocab V, the tokens' vocabulary (50304 for nanoGPT's GPT-2 tokens)");
    cfg.vocab = cli.integer<ddl::Index>("vocab", 2, ddl::Index(1) << 16);  // uint16 ids
  }
  cfg.validate();
  return cfg;
}

// Bytes as ids 0..255: through unsigned char, so that UTF-8 (any byte >= 0x80) is a valid prompt.
std::vector<int> bytesOf(const std::string& text) {
  std::vector<int> ids;
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

// A model of 256 ids reads and writes bytes; any other vocabulary token ids ("464 2068"): without a
// tokenizer ids are all that can be shown.
bool byteModel(const ddl::DeltaLMConfig& cfg) { return cfg.vocab == ddl::kByteVocabulary; }

// Token ids separated by spaces or commas, each below vocab.
std::vector<int> idsOf(const std::string& text, ddl::Index vocab, const std::string& option) {
  std::vector<int> ids;
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] == ' ' || text[i] == ',' || text[i] == '\t' || text[i] == '\n') {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < text.size() && j - i < 7 && text[j] >= '0' && text[j] <= '9') ++j;
    const long id = j > i ? std::stol(text.substr(i, j - i)) : -1;
    if (id < 0 || id >= vocab || (j < text.size() && text[j] >= '0' && text[j] <= '9') ||
        (j < text.size() && text[j] != ' ' && text[j] != ',' && text[j] != '\t' && text[j] != '\n'))
      throw ddl::ValueError("--" + option + " '" + text + "': a model of " + std::to_string(vocab) +
                            " tokens takes token ids below " + std::to_string(vocab) +
                            " separated by spaces ('464 2068'), found '" + text.substr(i, 16) + "'");
    ids.push_back(static_cast<int>(id));
    i = j;
  }
  return ids;
}

// The sample's settings, read and checked before training, so that a run never ends in a refused sample.
struct Sampling {
  std::vector<int> prompt;
  bool bytes = true;
  const ddl::BpeTokenizer* tokenizer = nullptr;  // --tokenizer: token ids read and written as text
  bool firstValidationToken = false;  // a model of tokens without --prompt: filled once the data is open
  ddl::Index tokens = 0, topK = 0;
  double temperature = 0;
};

// Bytes as they are; tokens as their text with --tokenizer (a padding id the tokenizer does not
// define as <|id|>, so that the sample still shows it), else each id after a space.
std::string printable(const std::vector<int>& ids, const Sampling& sampling) {
  std::string s;
  for (int id : ids) {
    if (sampling.bytes)
      s.push_back(static_cast<char>(id));
    else if (sampling.tokenizer != nullptr)
      s += sampling.tokenizer->defines(id) ? std::string(sampling.tokenizer->tokenBytes(id)) : "<|" + std::to_string(id) + "|>";
    else
      s += " " + std::to_string(id);
  }
  return s;
}

// option: "generate" or "prompt"; cfg: the model's (the checkpoint's for --generate).
Sampling samplingOptions(const ddl::cli::CommandLine& cli, const char* option, const ddl::DeltaLMConfig& cfg,
                         const ddl::BpeTokenizer* tokenizer) {
  Sampling s;
  s.bytes = byteModel(cfg);
  s.tokenizer = tokenizer;
  const ddl::Index context = cfg.context;
  const std::string text = cli.text(option);
  if (s.bytes) {
    if (text.empty()) throw ddl::ValueError(std::string("--") + option + " is empty: the sample continues at least one byte");
    if (static_cast<ddl::Index>(text.size()) > context)
      throw ddl::ValueError(std::string("--") + option + " has " + std::to_string(text.size()) +
                            " bytes, more than the model's context of " + std::to_string(context) +
                            " (--context): give at most " + std::to_string(context) + " bytes");
    s.prompt = bytesOf(text);
  } else if (!cli.has(option) && std::string(option) == "prompt") {
    s.firstValidationToken = true;
  } else {
    s.prompt = tokenizer != nullptr ? tokenizer->encode(text) : idsOf(text, cfg.vocab, option);
    if (s.prompt.empty())
      throw ddl::ValueError(std::string("--") + option + " holds no token id: the sample continues at least one token");
    if (static_cast<ddl::Index>(s.prompt.size()) > context)
      throw ddl::ValueError(std::string("--") + option + " has " + std::to_string(s.prompt.size()) +
                            " tokens, more than the model's context of " + std::to_string(context));
  }
  s.tokens = cli.integer<ddl::Index>("sample-tokens", 0, 1 << 20);
  s.temperature = cli.number("temperature", 0, 1e6);
  if (!(s.temperature > 0))
    throw ddl::ValueError("--temperature expects a number > 0 (1 = the model's distribution, smaller = sharper), got '" +
                          cli.text("temperature") + "'");
  // The default 40 is clamped to a smaller vocabulary; a K given is checked against it here, not
  // after training.
  s.topK = cli.integer<ddl::Index>("top-k", 1, ddl::Index(1) << 30);
  if (!cli.has("top-k")) s.topK = std::min(s.topK, cfg.vocab);
  if (s.topK > cfg.vocab)
    throw ddl::ValueError("--top-k " + cli.text("top-k") + " is more than the model's vocabulary of " +
                          std::to_string(cfg.vocab) + ": give at most " + std::to_string(cfg.vocab));
  return s;
}

// Samples in chunks of kSampleChunk tokens, printed as they come, so that Ctrl-C / SIGTERM is seen
// between chunks (within a second) instead of after --sample-tokens tokens. Chunk c continues the
// newest half context of the text so far with seed + c; a sample of at most one chunk is one
// generate() call.
constexpr ddl::Index kSampleChunk = 4096;

// Returns 0, or 128 + signal when stopped.
int printSample(ddl::DeltaLM<float>& lm, const ddl::cli::CommandLine& cli, const Sampling& s, std::uint64_t seed) {
  const std::string prompt = printable(s.prompt, s);
  std::cout << "sample (temperature " << cli.text("temperature") << ", top-k " << s.topK << "):\n"
            << (s.bytes || s.tokenizer != nullptr ? prompt : prompt.substr(1)) << std::flush;
  std::vector<int> text = s.prompt;
  const std::size_t keep = static_cast<std::size_t>(std::max<ddl::Index>(1, lm.config().context / 2));
  for (ddl::Index done = 0, chunk = 0; done < s.tokens; ++chunk) {
    if (ddl::stopSignal() != 0) {
      std::cout << "\nddl-text: stopped by " << ddl::signalName(ddl::stopSignal()) << " after " << done << " of "
                << s.tokens << (s.bytes ? " bytes\n" : " tokens\n");
      return 128 + ddl::stopSignal();
    }
    const std::vector<int> prompt = chunk == 0 ? text : std::vector<int>(text.end() - static_cast<std::ptrdiff_t>(std::min(keep, text.size())), text.end());
    const std::vector<int> out = lm.generate(prompt, std::min(kSampleChunk, s.tokens - done), s.temperature, s.topK,
                                             seed + static_cast<std::uint64_t>(chunk));
    std::cout << printable(out, s) << std::flush;
    text.insert(text.end(), out.begin(), out.end());
    done += static_cast<ddl::Index>(out.size());
  }
  std::cout << "\n";
  return 0;
}

// Training, validation and test each hold a window of context + 1 bytes, else no figure would mean
// anything ("val 0.0000" of an empty split): exit 2 before training, naming the sizes.
void requireSplits(const ddl::TextCorpus& corpus, ddl::Index context) {
  try {
    corpus.requireWindow(context);
  } catch (const ddl::IoError& e) {
    throw DataError(std::string(e.what()) + " (--context " + std::to_string(context) + ")");
  }
  for (const auto& [name, split] : {std::pair<const char*, const Bytes*>{"train", &corpus.train},
                                    {"validation", &corpus.validation}, {"test", &corpus.test}})
    if (split->empty())
      throw DataError(corpus.path + ": " + std::to_string(corpus.bytes()) + " bytes leave the " + name +
                      " split empty; ddl-text needs train (90%), validation (5%) and test (5%) splits of at least --context + 1 = " +
                      std::to_string(context + 1) + " bytes each");
}

// Token data: the sets of --tokens, --val-tokens and --test-tokens (empty when not given), checked
// token by token against the vocabulary by one streamed pass, which is also the data's digest (so
// resumes and MPI ranks compare content, as for bytes). --eval-only needs the test set alone.
struct TokenData {
  ddl::TokenFiles train, validation, test;
  DataIdentity identity;
};

TokenData openTokenData(const ddl::cli::CommandLine& cli, const ddl::DeltaLMConfig& cfg, bool needTraining) {
  if (needTraining && !cli.has("val-tokens"))
    throw ddl::ValueError("--tokens needs --val-tokens GLOB: the validation tokens");
  TokenData d;
  const auto open = [&](const char* option, ddl::TokenFiles& set, const char* role) {
    try {
      set = ddl::openTokenFiles(cli.text(option), cfg.vocab);
    } catch (const ddl::IoError& e) {  // the message alone: the hint of --data does not apply
      throw OptionFileError(std::string(e.what()) + " (--" + option + ")");
    }
    const std::string format = set.files().empty() ? "" : ddl::toString(set.files()[0].format());
    std::cout << "ddl-text: " << role << " tokens " << cli.text(option) << ": " << set.files().size() << (set.files().size() == 1 ? " file (" : " files (")
              << format << "), " << set.size() << " tokens\n";
    if (static_cast<ddl::Index>(set.size()) <= cfg.context)
      throw OptionFileError(cli.text(option) + ": " + std::to_string(set.size()) + " tokens; ddl-text needs at least --context + 1 = " +
                      std::to_string(cfg.context + 1) + " (--" + option + ")");
  };
  if (needTraining) open("tokens", d.train, "training");
  if (cli.has("val-tokens")) open("val-tokens", d.validation, "validation");
  if (cli.has("test-tokens")) open("test-tokens", d.test, "test");
  requireDisjointTokenSets({{"--tokens", &d.train}, {"--val-tokens", &d.validation}, {"--test-tokens", &d.test}});
  d.identity.path = cli.text("tokens") + " | " + cli.text("val-tokens") + " | " + cli.text("test-tokens", std::string());
  d.identity.options = "--tokens | --val-tokens | --test-tokens";
  try {
    for (const ddl::TokenFiles* set : {&d.train, &d.validation, &d.test})
      set->scan([&](const unsigned char* p, std::size_t n) { d.identity.digest.add(p, n); });
  } catch (const ddl::IoError& e) {
    throw OptionFileError(std::string(e.what()) + " (--vocab " + std::to_string(cfg.vocab) + ")");
  }
  return d;
}

template <class Tokens>
int trainOn(const ddl::cli::CommandLine& cli, const SavedRun& saved, const ddl::DeltaLMConfig& cfg,
            ddl::DeltaLM<float>& lm, const Sampling& sampling, ddl::TrainerOptions& opt, std::optional<std::int64_t> warmup,
            ddl::Index steps, const Tokens& train, const Tokens& validation, const Tokens* test) {
  constexpr bool kBytes = std::is_same_v<Tokens, Bytes>;
  std::cout << "model: DeltaLM " << cfg.variant() << ", preset " << ddl::toString(cfg.preset) << ", residual "
            << ddl::toString(cfg.block.residual.residual) << ", d " << cfg.d << ", depth " << cfg.depth << ", heads "
            << cfg.heads << ", dv " << cfg.dv << ", context " << cfg.context << ", " << ddl::numParams(lm)
            << " parameters, " << ddl::numThreads() << " threads" << ranks().note() << "\n";

  ddl::NextTokenTask<float, Tokens> task;
  const char* what = kBytes ? "the test text" : "the test tokens";
  const char* predicted = kBytes ? "predicted bytes" : "predicted tokens";
  if (saved.evalOnly) {
    if (test == nullptr) throw ddl::ValueError("--eval-only evaluates the test tokens: give --test-tokens GLOB");
    const bool initFrom = cli.has("init-from");
    if (!initFrom) ddl::loadCheckpoint(saved.ckpt, lm);
    const std::string source = initFrom ? cli.text("init-from") : saved.ckpt;
    if (const std::optional<ClampSpec> clamp = clampOption(cli, true, cfg.depth, cfg.block.residual.residual)) {
      ddl::MatX<float> logits;
      std::printf("%s (epoch %lld):\n", source.c_str(), static_cast<long long>(saved.meta.epoch));
      return evaluateClamps("ddl-text", lm, *clamp, saved.out, ranks().comm().rank() == 0, what,
                            static_cast<ddl::Index>(test->size() - 1), predicted, [&] {
                              return task.evaluate(lm, *test, opt.evalBatch, logits,
                                                   ddl::EvalStop{[] { return ddl::stopSignal() != 0; }});
                            });
    }
    ddl::MatX<float> scratch;
    ddl::NetGateAccumulator gates;
    const bool audit = cli.has("audit");
    // With --audit the caching forward runs and every window's sublayers are audited (same logits).
    const ddl::EvalStop stop{[] { return ddl::stopSignal() != 0; }};
    const ddl::EvalResult r =
        audit ? task.evaluate(lm, *test, opt.evalBatch, scratch, [&] { gates.add(lm); }, stop)
              : task.evaluate(lm, *test, opt.evalBatch, scratch, stop);
    if (r.stopped)
      return ddl::report::evaluationStopped("ddl-text", what, r, static_cast<ddl::Index>(test->size() - 1), predicted,
                                            "nothing was written");
    if constexpr (kBytes)
      std::printf("%s (epoch %lld): test loss %.4f nats, %.4f bits per byte (%lld bytes)\n", source.c_str(),
                  static_cast<long long>(saved.meta.epoch), r.loss, ddl::bitsPerByte(r.loss), static_cast<long long>(r.count));
    else
      std::printf("%s (epoch %lld): test loss %.4f nats per token (%lld tokens)\n", source.c_str(),
                  static_cast<long long>(saved.meta.epoch), r.loss, static_cast<long long>(r.count));
    if (audit) {
      std::cout << ddl::formatGateSummary(gates.stats(), ddl::gatedLabels(lm));
      ddl::writeEvaluationAudit(lm, gates.stats(), static_cast<int>(saved.meta.epoch), saved.out);
      std::cout << "audit of this evaluation: " << saved.out << "/eval_audit.csv, " << saved.out << "/eval_audit.json\n";
    }
    return 0;
  }
  ddl::TextWindows<float, Tokens> windows(train, opt.batchSize, cfg.context, steps, opt.seed);
  opt.warmupSteps = warmup ? *warmup : std::min<std::int64_t>(200, steps * opt.epochs / 10);
  ddl::AdamW<float> adam(opt.adam);
  if (!cli.has("init-from")) lm.init(opt.seed);  // --init-from: the folder's weights (every rank reads them)
  if (ranks().distributed()) windows.shard(ranks().comm().rank(), ranks().comm().size());
  Loop<Tokens> loop(lm, task, windows, adam, opt, validation.size() == 0 ? nullptr : &validation);
  if (ddl::Collective* comm = ranks().forTrainer()) loop.distribute(*comm);
  std::cout << "training: " << opt.toJson().dump() << ", " << steps << " steps per epoch, "
            << opt.batchSize * cfg.context << " tokens per step\n";
  if (saved.resume) {
    loop.resume(saved.ckpt, kMayChangeOnResume);
    std::cout << "resumed " << saved.ckpt << " at epoch " << loop.epoch() << ", batch " << loop.batchInEpoch() << "\n";
  }
  ddl::ProgressBar bar;
  loop.onEpochStart = [&](int e) {
    bar.start("epoch " + std::to_string(e + 1) + "/" + std::to_string(opt.epochs), loop.batchesPerEpoch());
  };
  loop.onBatch = [&](const ddl::BatchProgress& p) { bar.update(p.batch, p.loss, p.accuracy, p.samplesPerSec); };
  loop.onEpoch = [&](const ddl::EpochMetrics& m) {
    char line[256];
    if constexpr (kBytes)
      std::snprintf(line, sizeof line, "epoch %d/%d  step %lld  lr %.2e  train %.4f (%.3f bpb)  val %.4f (%.3f bpb)  %.1fs  %.0f tok/s",
                    m.epoch, opt.epochs, static_cast<long long>(m.step), m.lr, m.trainLoss, ddl::bitsPerByte(m.trainLoss),
                    m.validation.loss, ddl::bitsPerByte(m.validation.loss), m.seconds, m.samplesPerSec);
    else
      std::snprintf(line, sizeof line, "epoch %d/%d  step %lld  lr %.2e  train %.4f  val %.4f (nats per token)  %.1fs  %.0f tok/s",
                    m.epoch, opt.epochs, static_cast<long long>(m.step), m.lr, m.trainLoss, m.validation.loss, m.seconds,
                    m.samplesPerSec);
    bar.finish(line);
  };
  loop.shouldStop = [] { return ddl::stopSignal() != 0; };
  // --audit: one row per Delta sublayer (block <l> attn, block <l> mlp) over the validation windows.
  ddl::GateColumns gates;
  loop.addColumns(gates.columns<ddl::DeltaLM<float>>());
  // A run on token files says in metrics.csv what its losses are: nats per token, not per byte.
  if constexpr (!kBytes)
    loop.addColumns(ddl::EvalColumns<ddl::DeltaLM<float>>{
        {"loss_unit"}, [] {}, [](const ddl::DeltaLM<float>&) {}, [] { return std::vector<std::string>{"nats_per_token"}; }});
  ddl::AuditRecorder audit;
  if (cli.has("audit")) {
    if (validation.size() == 0) throw ddl::ValueError("--audit needs validation text (the corpus has none)");
    if (loop.isRankZero()) ddl::auditEveryEpoch(loop, gates, lm, audit, saved.out);  // rank 0 writes for the run
  }
  const ddl::EpochMetrics last = loop.run();
  if (loop.stopped()) {
    const int sig = ddl::stopSignal() != 0 ? ddl::stopSignal() : SIGTERM;
    bar.finish("interrupted");
    std::cout << "ddl-text: stopped by " << ddl::signalName(sig) << " at step " << loop.step()
              << (loop.batchInEpoch() == loop.batchesPerEpoch() ? ", in the epoch's validation (a resume repeats it)"
                                                                : "")
              << "\ncheckpoint: "
              << loop.checkpointPath() << "\ncontinue with the same options and --resume\n";
    return 128 + sig;
  }
  if (last.epoch == 0) {
    std::cout << "nothing to do: the checkpoint already holds " << loop.epoch() << " epochs\n";
    return 0;
  }
  if (!loop.isRankZero()) return 0;  // rank 0 speaks and writes for the run
  const std::string variant = cfg.variant();
  const char* model = variant.c_str();
  if (test != nullptr) {
    const ddl::EvalResult tested = loop.evaluate(*test);
    if (tested.stopped)
      return ddl::report::evaluationStopped("ddl-text", what, tested, static_cast<ddl::Index>(test->size() - 1), predicted,
                                            "the training is complete (checkpoint: " + loop.checkpointPath() +
                                                "); --eval-only evaluates " + what);
    if constexpr (kBytes)
      std::printf("final validation loss %.4f (%.3f bits per byte); final test loss %.4f nats, %.3f bits per byte "
                  "(%s, %s, %s residual, %lld steps)\n",
                  last.validation.loss, ddl::bitsPerByte(last.validation.loss), tested.loss, ddl::bitsPerByte(tested.loss),
                  model, ddl::toString(cfg.preset), ddl::toString(cfg.block.residual.residual),
                  static_cast<long long>(loop.step()));
    else
      std::printf("final validation loss %.4f nats per token; final test loss %.4f nats per token "
                  "(%s, %s, %s residual, %lld steps)\n",
                  last.validation.loss, tested.loss, model, ddl::toString(cfg.preset),
                  ddl::toString(cfg.block.residual.residual), static_cast<long long>(loop.step()));
  } else {
    std::printf("final validation loss %.4f nats per token; no test tokens (--test-tokens) (%s, %s, %s residual, "
                "%lld steps)\n",
                last.validation.loss, model, ddl::toString(cfg.preset), ddl::toString(cfg.block.residual.residual),
                static_cast<long long>(loop.step()));
  }
  std::cout << "metrics: " << loop.metricsPath() << "\ncheckpoint: " << loop.checkpointPath() << "\n";
  if (cli.has("audit")) {
    std::cout << "gate audit of the last validation evaluation (" << saved.out << "/audit.csv, audit.json):\n"
              << ddl::formatGateSummary(gates.stats(), ddl::gatedLabels(lm));
  }
  ddl::plot::epochCurves(saved.out, ddl::plot::EpochColumns{{"train_loss", "val_loss"}, {"train_acc", "val_acc"}});
  return printSample(lm, cli, sampling, opt.seed);
}

// --tokens took the sample's length before it took token files: a bare number that names no file
// is that old use, refused with the new name.
void refuseOldTokensOption(const ddl::cli::CommandLine& cli) {
  if (!cli.has("tokens")) return;
  const std::string v = cli.text("tokens");
  std::error_code ec;
  if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && !std::filesystem::exists(v, ec))
    throw ddl::ValueError("--tokens " + v + ": --tokens names token files (--tokens 'DIR/*train*.bin'); the "
                          "sample's length is --sample-tokens " + v);
}

// --tokenizer DIR: only for a model of tokens (a run on bytes keeps its text as it is), and only one
// whose vocabulary holds every id the tokenizer can produce, else an encoded prompt could not be read.
std::optional<ddl::BpeTokenizer> openTokenizer(const ddl::cli::CommandLine& cli, const ddl::DeltaLMConfig& cfg) {
  if (!cli.has("tokenizer")) return std::nullopt;
  if (byteModel(cfg) || (!cli.has("tokens") && !cli.has("generate")))
    throw ddl::ValueError("--tokenizer " + cli.text("tokenizer") + " reads and writes the ids of token files as text: "
                          "give it with --tokens (and --vocab); " +
                          (cli.has("generate") ? "the checkpoint in --out is a model of bytes, which reads and writes text already"
                                               : "a run on bytes (no --tokens) reads and writes text already"));
  std::optional<ddl::BpeTokenizer> tok;
  try {
    tok.emplace(ddl::BpeTokenizer::fromDirectory(cli.text("tokenizer")));
  } catch (const ddl::IoError& e) {
    throw OptionFileError(std::string(e.what()) + " (--tokenizer)");
  }
  if (tok->vocabSize() > cfg.vocab)
    throw ddl::ValueError("--tokenizer " + cli.text("tokenizer") + " has " + std::to_string(tok->vocabSize()) +
                          " ids, more than the model's vocabulary of " + std::to_string(cfg.vocab) +
                          " (--vocab): give --vocab at least " + std::to_string(tok->vocabSize()));
  return tok;
}

// The run of --init-from: a new run in --out (or an evaluation / a sample) whose model is the folder's.
SavedRun freshRun(const ddl::cli::CommandLine& cli, const std::string& program) {
  SavedRun s;
  s.out = cli.text("out");
  if (s.out.empty()) throw ddl::ValueError("--out is empty: name the folder of the run's checkpoint and metrics");
  s.ckpt = s.out + "/checkpoint.safetensors";
  s.evalOnly = cli.has("eval-only");
  s.generate = cli.has("generate");
  s.initFrom = true;
  s.program = program;
  return s;
}

// --export-authors DIR: the checkpoint in --out as the authors' model folder (train/authors_model.hpp).
// It trains nothing and reads no data, so any option but --out and --overwrite is refused, named; a folder
// that holds a model is replaced only with --overwrite, and never the run's --init-from source (compared
// by device and inode: under any name) nor --out itself.
int exportAuthors(const ddl::cli::CommandLine& cli) {
  for (const auto& option : cli.values())
    if (cli.has(option.first) && option.first != "out" && option.first != "export-authors" && option.first != "overwrite")
      throw ddl::ValueError("--" + option.first + " with --export-authors: the export writes the checkpoint in --out as "
                            "it is (it trains, evaluates and reads nothing else); leave --" + option.first + " out");
  const std::string ckpt = cli.text("out") + "/checkpoint.safetensors", dir = cli.text("export-authors");
  const std::string target = ddl::fileIdentity(dir);
  if (!target.empty() && target == ddl::fileIdentity(cli.text("out")))
    throw ddl::ValueError("--export-authors " + dir + " is the run folder --out: export into a folder of its own");
  const ddl::CheckpointMeta meta = ddl::readCheckpointMetadata(ckpt);
  const auto source = meta.extra.find("init_from_identity");
  if (!target.empty() && source != meta.extra.end() && source->second == target)
    throw ddl::ValueError("--export-authors " + dir + " is the folder this run started from (--init-from " +
                          meta.extra.at("init_from") + "): its weights are not replaced, even with --overwrite; "
                          "export into another folder");
  ddl::DeltaLM<float> lm = ddl::loadModel<ddl::DeltaLM<float>>(ckpt);
  ddl::AuthorsSaveOptions save;
  save.overwrite = cli.has("overwrite");
  try {
    ddl::saveAuthorsModel(dir, lm, save);  // refuses (exit 1) a configuration their code has no model for
  } catch (const ddl::IoError& e) {        // the folder (exit 2), not the checkpoint
    throw OptionFileError(std::string(e.what()) + " (--export-authors)");
  }
  std::cout << "ddl-text: wrote " << dir << "/config.json and " << dir << "/model.safetensors (the authors' "
            << ddl::toString(ddl::authorsVariantOf(lm.config())) << " model) from " << ckpt << "\n";
  return 0;
}

// --init-from DIR: the authors' model folder, read by every rank (an unusable folder: exit 2).
std::optional<ddl::DeltaLM<float>> initFromFolder(const ddl::cli::CommandLine& cli) {
  if (!cli.has("init-from")) return std::nullopt;
  if (cli.has("resume"))
    throw ddl::ValueError("--init-from starts a new run from the folder and --resume continues the run in --out: "
                          "give one of them");
  try {
    return ddl::loadAuthorsModel<float>(cli.text("init-from"));
  } catch (const ddl::Error& e) {
    throw OptionFileError(std::string(e.what()) + " (--init-from)");
  }
}

int run(const ddl::cli::CommandLine& cli) {
  refuseOldTokensOption(cli);
  if (cli.has("export-authors")) return exportAuthors(cli);
  std::optional<ddl::DeltaLM<float>> initFrom = initFromFolder(cli);
  const SavedRun saved = initFrom ? freshRun(cli, "ddl-text") : savedRun(cli, "ddl-text", {"train_options", "data"});
  ddl::DeltaLMConfig cfg = modelConfig(cli, saved, initFrom);
  applyBetaMax(cli, cfg.block.residual,
               initFrom ? cli.text("init-from") + "/config.json" : saved.from() ? saved.ckpt : std::string());
  clampOption(cli, saved.evalOnly, cfg.depth, cfg.block.residual.residual);  // checked now, applied by trainOn
  ddl::DeltaLM<float> lm(cfg, 1);
  if (initFrom) ddl::assignParams(lm, *initFrom);
  if ((saved.resume || saved.evalOnly || (initFrom && !cli.has("generate"))) && !byteModel(cfg) && !cli.has("tokens"))
    throw ddl::ValueError((initFrom ? cli.text("init-from") : saved.ckpt) + ": its model reads a vocabulary of " +
                          std::to_string(cfg.vocab) +
                          " tokens, not bytes: give its token files (--tokens, --val-tokens, --test-tokens)");
  const std::optional<ddl::BpeTokenizer> tokenizer = openTokenizer(cli, cfg);
  const ddl::BpeTokenizer* tok = tokenizer ? &*tokenizer : nullptr;
  if (cli.has("generate")) {  // sampling needs the model only
    const Sampling sampling = samplingOptions(cli, "generate", cfg, tok);
    if (!initFrom) ddl::loadCheckpoint(saved.ckpt, lm);
    return printSample(lm, cli, sampling, 1);
  }
  Sampling sampling = samplingOptions(cli, "prompt", cfg, tok);
  std::optional<std::int64_t> warmup;
  ddl::TrainerOptions opt = trainingOptions(cli, saved, [](ddl::TrainerOptions&) {}, warmup);
  // The folder a run started from, by name and identity, so that --export-authors never replaces it.
  if (initFrom) opt.extraMeta["init_from"] = cli.text("init-from");
  if (initFrom) opt.extraMeta["init_from_identity"] = ddl::fileIdentity(cli.text("init-from"));
  for (const char* key : {"init_from", "init_from_identity"})
    if (saved.resume && saved.meta.extra.count(key)) opt.extraMeta[key] = saved.meta.extra.at(key);
  opt.clipNorm = cli.number("clip", 0, kMaxReal);
  opt.evalBatch = opt.batchSize;
  const ddl::Index evalBytes = cli.integer<ddl::Index>("eval-bytes", 0, kMaxCount);
  const ddl::Index steps = cli.integer<ddl::Index>("steps", 1, 1 << 30);
  ddl::setNumThreads(opt.threads);
  if (cli.has("tokens") && cli.has("data"))
    throw ddl::ValueError("--data (bytes) and --tokens (token files) are two kinds of data: give one");
  if (!cli.has("tokens") && (cli.has("val-tokens") || cli.has("test-tokens")))
    throw ddl::ValueError("--val-tokens and --test-tokens go with --tokens (the training tokens)");
  // Every option is checked before the output folder is claimed and the data is read.
  const RunFolder folder = saved.evalOnly ? RunFolder() : claimRunFolder(cli, saved);

  if (cli.has("tokens")) {
    TokenData data = openTokenData(cli, cfg, !saved.evalOnly);
    if (!saved.evalOnly) requireSameData(saved, data.identity, opt);
    const ddl::TokenFiles validation =
        evalBytes > 0 ? data.validation.prefix(std::min<std::uint64_t>(data.validation.size(), static_cast<std::uint64_t>(evalBytes)))
                      : data.validation;
    if (sampling.firstValidationToken && validation.size() > 0) {
      sampling.prompt.assign(1, 0);
      validation.read(0, 1, sampling.prompt.data());
    }
    return trainOn<ddl::TokenFiles>(cli, saved, cfg, lm, sampling, opt, warmup, steps, data.train, validation,
                                    cli.has("test-tokens") ? &data.test : nullptr);
  }

  const std::string data = cli.text("data");
  ddl::TextCorpus corpus;
  try {
    corpus = readCorpus(data);
  } catch (const ddl::IoError& e) {
    throw DataError(e.what());
  }
  std::cout << "ddl-text: read " << corpus.path << ": " << corpus.bytes() << " bytes (train " << corpus.train.size()
            << ", validation " << corpus.validation.size() << ", test " << corpus.test.size() << ", in that order)\n";
  if (!saved.evalOnly) {
    requireSplits(corpus, cfg.context);
    DataIdentity identity{data, {}};
    for (const Bytes* split : {&corpus.train, &corpus.validation, &corpus.test})
      identity.digest.add(split->data(), split->size());
    requireSameData(saved, identity, opt);
  }
  const Bytes validation = evaluatedPrefix(corpus.validation, evalBytes);
  return trainOn<Bytes>(cli, saved, cfg, lm, sampling, opt, warmup, steps, corpus.train, validation, &corpus.test);
}

}  // namespace

int main(int argc, char** argv) {
  ddl::cli::CommandLine cli("ddl-text",
                            "trains DeltaLM, a causal Transformer of Delta sublayers, on the bytes of a text. Ctrl-C /\n"
                            "SIGTERM: finish the step, save a checkpoint, exit 128 + signal. Exit 1: bad option,\n"
                            "2: unusable data or files, 3: NaN/Inf in training (the last checkpoint is the last good state).");
  declareOptions(cli);
  return runMain("ddl-text", cli, argc, argv, run,
                 "hint: install the default text with `sudo apt-get install fortunes`, or pass --data FILE.\n");
}
