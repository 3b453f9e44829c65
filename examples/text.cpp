// ddl-text: trains DeltaLM, the paper's causal language model of Delta Transformer blocks, on bytes of
// text and reports the validation loss in bits per byte, the test once at the end, and a sample.
//   ddl-text                                the fortunes of Debian's fortunes package
//   ddl-text --data FILE                    any file (UTF-8 text or anything else, read as bytes)
//   ddl-text --variant cc-ec                the expanded state of the paper (dv 4, CC + EC); see --help
//   ddl-text --residual additive            the plain pre-norm Transformer, the baseline
//   ddl-text --generate "The "              samples from the checkpoint in --out
//   ddl-text --resume / --eval-only         continue / evaluate the checkpoint in --out
//   ddl-text --audit                        audit.csv / audit.json: the gate of every Delta sublayer
//                                           (block <l> attn, block <l> mlp) on the validation text
// An "epoch" here is --steps steps of --batch random windows of --context bytes; the validation text
// is evaluated after every epoch. Ctrl-C (SIGINT) or SIGTERM finishes the step, saves a checkpoint and
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
#include "text_files.hpp"
#include "ddl/data/text_corpus.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/train/next_token_task.hpp"
#include "ddl/train/text_windows.hpp"

namespace {
using namespace ddl::example;
using Loop = ddl::TrainingLoop<ddl::DeltaLM<float>, ddl::NextTokenTask<float>, ddl::TextWindows<float>,
                               ddl::AdamW<float>>;

void declareOptions(ddl::cli::CommandLine& cli) {
  cli.option("data", "PATH", "a file, or a folder whose files (except fortune's *.dat indexes) are read in name order",
             kFortunes)
      .option("eval-bytes", "N", "validation bytes evaluated after every epoch (0 = all)", "65536")
      .section("model")
      .option("variant", "V", "dv1 | cc | cc-ec | tc | tc-ec (dv 4 for all but dv1)", "dv1")
      .option("preset", "P", "code | paper", "code")
      .option("residual", "R", "delta | write_only | additive", "delta")
      .option("width", "D", "model width d", "128")
      .option("depth", "L", "number of blocks", "4")
      .option("heads", "H", "attention heads (d / H features each)", "4")
      .option("context", "T", "bytes per training window and longest context", "128");
  // Chosen on the validation text (docs/text_defaults.md).
  TrainingDefaults d;  // bytes: no augmentation, no label smoothing
  d.epochs = "10";
  d.lr = "0.002";
  d.weightDecay = "0.1";
  d.batch = "32";
  declareTrainingOptions(cli, d);
  cli.option("steps", "S", "steps per epoch", "100")
      .option("clip", "C", "global gradient-norm clipping (0 = off)", "1");
  declareOutputOptions(cli, "out/text");
  cli.section("sampling")
      .option("generate", "TEXT", "sample from the checkpoint in --out after TEXT and exit")
      .option("prompt", "TEXT", "prompt of the sample printed after training", "The ")
      .option("tokens", "N", "bytes to sample", "300")
      .option("temperature", "X", "softmax temperature (> 0)", "0.8")
      .option("top-k", "K", "sample among the K most likely bytes", "40");
}

// The model: from the command line, or (resume, eval-only, generate) from the checkpoint.
ddl::DeltaLMConfig modelConfig(const ddl::cli::CommandLine& cli, const SavedRun& run) {
  requireSavedModelOptions(cli, run, {{"width", "d"}, {"depth", "depth"}, {"heads", "heads"}, {"context", "context"},
                                      {"variant", "variant"}, {"preset", "preset"}, {"residual", "residual"}});
  if (run.from()) return savedModelConfig<ddl::DeltaLMConfig>(run);
  ddl::DeltaLMConfig cfg;
  cfg.block.residual.residual = ddl::parseResidualKind(cli.choice("residual", {"delta", "write_only", "additive"}));
  ddl::applyPreset(cfg, cli.choice("preset", {"code", "paper"}));
  ddl::applyVariant(cfg, cli.choice("variant", {"dv1", "cc", "cc-ec", "tc", "tc-ec"}));
  cfg.d = cli.integer<ddl::Index>("width", 2, 1 << 14);
  cfg.depth = cli.integer<ddl::Index>("depth", 0, 1 << 10);
  cfg.heads = cli.integer<ddl::Index>("heads", 1, 1 << 14);
  cfg.context = cli.integer<ddl::Index>("context", 1, 1 << 16);
  cfg.validate();
  return cfg;
}

// Bytes as ids 0..255: through unsigned char, so that UTF-8 (any byte >= 0x80) is a valid prompt.
std::vector<int> bytesOf(const std::string& text) {
  std::vector<int> ids;
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string printable(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s.push_back(static_cast<char>(id));
  return s;
}

// The sample's settings, read and checked before training, so that a run never ends in a refused sample.
struct Sampling {
  std::string prompt;
  ddl::Index tokens = 0, topK = 0;
  double temperature = 0;
};

// option: "generate" or "prompt"; context: the model's (the checkpoint's for --generate).
Sampling samplingOptions(const ddl::cli::CommandLine& cli, const char* option, ddl::Index context) {
  Sampling s;
  s.prompt = cli.text(option);
  if (s.prompt.empty()) throw ddl::ValueError(std::string("--") + option + " is empty: the sample continues at least one byte");
  if (static_cast<ddl::Index>(s.prompt.size()) > context)
    throw ddl::ValueError(std::string("--") + option + " has " + std::to_string(s.prompt.size()) +
                          " bytes, more than the model's context of " + std::to_string(context) +
                          " (--context): give at most " + std::to_string(context) + " bytes");
  s.tokens = cli.integer<ddl::Index>("tokens", 0, 1 << 20);
  s.temperature = cli.number("temperature", 0, 1e6);
  if (!(s.temperature > 0))
    throw ddl::ValueError("--temperature expects a number > 0 (1 = the model's distribution, smaller = sharper), got '" +
                          cli.text("temperature") + "'");
  s.topK = cli.integer<ddl::Index>("top-k", 1, 256);
  return s;
}

// Samples in chunks of kSampleChunk bytes, printed as they come, so that Ctrl-C / SIGTERM is seen
// between chunks (within a second) instead of after --tokens bytes. Chunk c continues the newest half
// context of the text so far with seed + c; a sample of at most one chunk is one generate() call.
constexpr ddl::Index kSampleChunk = 4096;

// Returns 0, or 128 + signal when stopped.
int printSample(ddl::DeltaLM<float>& lm, const ddl::cli::CommandLine& cli, const Sampling& s, std::uint64_t seed) {
  std::cout << "sample (temperature " << cli.text("temperature") << ", top-k " << cli.text("top-k") << "):\n"
            << s.prompt << std::flush;
  std::vector<int> text = bytesOf(s.prompt);
  const std::size_t keep = static_cast<std::size_t>(std::max<ddl::Index>(1, lm.config().context / 2));
  for (ddl::Index done = 0, chunk = 0; done < s.tokens; ++chunk) {
    if (ddl::stopSignal() != 0) {
      std::cout << "\nddl-text: stopped by " << ddl::signalName(ddl::stopSignal()) << " after " << done << " of "
                << s.tokens << " bytes\n";
      return 128 + ddl::stopSignal();
    }
    const std::vector<int> prompt = chunk == 0 ? text : std::vector<int>(text.end() - static_cast<std::ptrdiff_t>(std::min(keep, text.size())), text.end());
    const std::vector<int> out = lm.generate(prompt, std::min(kSampleChunk, s.tokens - done), s.temperature, s.topK,
                                             seed + static_cast<std::uint64_t>(chunk));
    std::cout << printable(out) << std::flush;
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
  for (const auto& [name, split] : {std::pair<const char*, const std::vector<std::uint8_t>*>{"train", &corpus.train},
                                    {"validation", &corpus.validation}, {"test", &corpus.test}})
    if (split->empty())
      throw DataError(corpus.path + ": " + std::to_string(corpus.bytes()) + " bytes leave the " + name +
                      " split empty; ddl-text needs train (90%), validation (5%) and test (5%) splits of at least --context + 1 = " +
                      std::to_string(context + 1) + " bytes each");
}

int run(const ddl::cli::CommandLine& cli) {
  const SavedRun saved = savedRun(cli, "ddl-text", {"train_options", "data"});
  const ddl::DeltaLMConfig cfg = modelConfig(cli, saved);
  ddl::DeltaLM<float> lm(cfg, 1);
  if (cli.has("generate")) {  // sampling needs the model only
    const Sampling sampling = samplingOptions(cli, "generate", cfg.context);
    ddl::loadCheckpoint(saved.ckpt, lm);
    return printSample(lm, cli, sampling, 1);
  }
  const Sampling sampling = samplingOptions(cli, "prompt", cfg.context);
  std::optional<std::int64_t> warmup;
  ddl::TrainerOptions opt = trainingOptions(cli, saved, [](ddl::TrainerOptions&) {}, warmup);
  opt.clipNorm = cli.number("clip", 0, kMaxReal);
  opt.evalBatch = opt.batchSize;
  const ddl::Index evalBytes = cli.integer<ddl::Index>("eval-bytes", 0, kMaxCount);
  const ddl::Index steps = cli.integer<ddl::Index>("steps", 1, 1 << 30);
  ddl::setNumThreads(opt.threads);
  // Every option is checked before the output folder is claimed and the data is read.
  const RunFolder folder = saved.evalOnly ? RunFolder() : claimRunFolder(cli, saved);

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
    for (const std::vector<std::uint8_t>* split : {&corpus.train, &corpus.validation, &corpus.test})
      identity.digest.add(split->data(), split->size());
    requireSameData(saved, identity, opt);
  }
  const std::vector<std::uint8_t> validation = evaluatedPrefix(corpus.validation, evalBytes);
  std::cout << "model: DeltaLM " << cfg.variant() << ", preset " << ddl::toString(cfg.preset) << ", residual "
            << ddl::toString(cfg.block.residual.residual) << ", d " << cfg.d << ", depth " << cfg.depth << ", heads "
            << cfg.heads << ", dv " << cfg.dv << ", context " << cfg.context << ", " << ddl::numParams(lm)
            << " parameters, " << ddl::numThreads() << " threads" << ranks().note() << "\n";

  ddl::NextTokenTask<float> task;
  if (saved.evalOnly) {
    ddl::loadCheckpoint(saved.ckpt, lm);
    ddl::MatX<float> scratch;
    ddl::NetGateAccumulator gates;
    const bool audit = cli.has("audit");
    // With --audit the caching forward runs and every window's sublayers are audited (same logits).
    const ddl::EvalStop stop{[] { return ddl::stopSignal() != 0; }};
    const ddl::EvalResult r =
        audit ? task.evaluate(lm, corpus.test, opt.evalBatch, scratch, [&] { gates.add(lm); }, stop)
              : task.evaluate(lm, corpus.test, opt.evalBatch, scratch, stop);
    if (r.stopped)
      return ddl::report::evaluationStopped("ddl-text", "the test text", r,
                                            static_cast<ddl::Index>(corpus.test.size() - 1), "predicted bytes",
                                            "nothing was written");
    std::printf("%s (epoch %lld): test loss %.4f nats, %.4f bits per byte (%lld bytes)\n", saved.ckpt.c_str(),
                static_cast<long long>(saved.meta.epoch), r.loss, ddl::bitsPerByte(r.loss), static_cast<long long>(r.count));
    if (audit) {
      std::cout << ddl::formatGateSummary(gates.stats(), ddl::gatedLabels(lm));
      ddl::writeEvaluationAudit(lm, gates.stats(), static_cast<int>(saved.meta.epoch), saved.out);
      std::cout << "audit of this evaluation: " << saved.out << "/eval_audit.csv, " << saved.out << "/eval_audit.json\n";
    }
    return 0;
  }
  ddl::TextWindows<float> windows(corpus.train, opt.batchSize, cfg.context, steps, opt.seed);
  opt.warmupSteps = warmup ? *warmup : std::min<std::int64_t>(200, steps * opt.epochs / 10);
  ddl::AdamW<float> adam(opt.adam);
  lm.init(opt.seed);
  if (ranks().distributed()) windows.shard(ranks().comm().rank(), ranks().comm().size());
  Loop loop(lm, task, windows, adam, opt, validation.empty() ? nullptr : &validation);
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
    std::snprintf(line, sizeof line, "epoch %d/%d  step %lld  lr %.2e  train %.4f (%.3f bpb)  val %.4f (%.3f bpb)  %.1fs  %.0f tok/s",
                  m.epoch, opt.epochs, static_cast<long long>(m.step), m.lr, m.trainLoss, ddl::bitsPerByte(m.trainLoss),
                  m.validation.loss, ddl::bitsPerByte(m.validation.loss), m.seconds, m.samplesPerSec);
    bar.finish(line);
  };
  loop.shouldStop = [] { return ddl::stopSignal() != 0; };
  // --audit: one row per Delta sublayer (block <l> attn, block <l> mlp) over the validation windows.
  ddl::GateColumns gates;
  loop.addColumns(gates.columns<ddl::DeltaLM<float>>());
  ddl::AuditRecorder audit;
  if (cli.has("audit")) {
    if (validation.empty()) throw ddl::ValueError("--audit needs validation text (the corpus has none)");
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
  const ddl::EvalResult tested = loop.evaluate(corpus.test);
  if (tested.stopped)
    return ddl::report::evaluationStopped("ddl-text", "the test text", tested,
                                          static_cast<ddl::Index>(corpus.test.size() - 1), "predicted bytes",
                                          "the training is complete (checkpoint: " + loop.checkpointPath() +
                                              "); --eval-only evaluates the test text");
  std::printf("final validation loss %.4f (%.3f bits per byte); final test loss %.4f nats, %.3f bits per byte "
              "(%s, %s, %s residual, %lld steps)\n",
              last.validation.loss, ddl::bitsPerByte(last.validation.loss), tested.loss, ddl::bitsPerByte(tested.loss),
              cfg.variant().c_str(), ddl::toString(cfg.preset), ddl::toString(cfg.block.residual.residual),
              static_cast<long long>(loop.step()));
  std::cout << "metrics: " << loop.metricsPath() << "\ncheckpoint: " << loop.checkpointPath() << "\n";
  if (cli.has("audit")) {
    std::cout << "gate audit of the last validation evaluation (" << saved.out << "/audit.csv, audit.json):\n"
              << ddl::formatGateSummary(gates.stats(), ddl::gatedLabels(lm));
  }
  ddl::plot::epochCurves(saved.out, ddl::plot::EpochColumns{{"train_loss", "val_loss"}, {"train_acc", "val_acc"}});
  return printSample(lm, cli, sampling, opt.seed);
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
