#pragma once
// examples/beta_max_option.hpp: --beta-max B of the training programs (docs/using.md, docs/runs.md): the cap
// of the Delta residual's gate, beta = B sigma(z) in (0, B) (docs/spec.md §2); a new model's gate starts at
// B / 2 (the middle of its range: 1 at the default 2). Checked before anything is read or written, naming
// the option and its value.
#include <optional>
#include <string>

#include "cli.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/io/metrics_csv.hpp"
#include "ddl/nn/blocks/delta_residual_options.hpp"

namespace ddl::example {

inline void declareBetaMaxOption(cli::CommandLine& cli) {
  cli.option("beta-max", "B",
             "the gate's cap: beta = B sigma(z) in (0, B), B in (0, 2]; 2 is the paper's range, 1 allows no "
             "reflection; the gate starts at B/2 (delta, write_only)",
             "2");
}

// --beta-max as given, checked to lie in (0, 2]; empty when not given.
inline std::optional<double> givenBetaMax(const cli::CommandLine& cli) {
  if (!cli.declares("beta-max") || !cli.has("beta-max")) return std::nullopt;
  const std::string text = cli.text("beta-max");
  double v = 0;
  try {
    v = parseNumber("--beta-max", text, 0, 2);
  } catch (const ValueError&) {
    v = 0;  // refused below with the option's own message
  }
  if (!(v > 0))
    throw ValueError("--beta-max expects a number in (0, 2] (the gate's cap: 2 is the paper's range, 1 allows no "
                     "reflection), got '" + text + "'");
  return v;
}

// The cap of the model's residual r. A new model (savedSource empty) takes --beta-max (default 2) and
// starts its gate at betaMax / 2, which is the authors' beta0 = 1 at the default (so a default run's
// bits are unchanged) and keeps a capped gate away from its saturated end (beta0 = 1 under a cap of 1
// would start every gate at logit(1 - 1e-6), nearly frozen). A saved model (its checkpoint or folder,
// savedSource) keeps its cap; a --beta-max other than it is refused, naming both.
inline void applyBetaMax(const cli::CommandLine& cli, DeltaResidualOptions& r, const std::string& savedSource) {
  const std::optional<double> given = givenBetaMax(cli);
  if (!savedSource.empty()) {
    if (given && *given != r.betaMax)
      throw ValueError("--beta-max " + cli.text("beta-max") + " differs from the saved model's beta_max " +
                       csvNumber(r.betaMax) + " (" + savedSource + "): the model of --resume, --eval-only, "
                       "--generate and --init-from is the saved one; drop --beta-max, or start a new run");
    return;
  }
  if (given && r.residual == ResidualKind::Additive)
    throw ValueError("--beta-max " + cli.text("beta-max") + " caps the gate of the delta and write_only residuals; "
                     "--residual additive has no gate");
  r.betaMax = given.value_or(2.0);
  r.beta0 = r.betaMax / 2;
}

}  // namespace ddl::example
