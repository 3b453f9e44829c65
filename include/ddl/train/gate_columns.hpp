#pragma once
// ddl/train/gate_columns.hpp: the gate statistics of each epoch's evaluation as columns of the
// training loop's metrics.csv (beta_mean, beta_min, beta_max, beta_saturated over all gated
// sublayers; empty cells for a net without gates, e.g. an additive one).
//
//   ddl::GateColumns gates;
//   loop.addColumns(gates.columns<ddl::DeltaNet<float>>());
//   loop.run();
//   gates.stats();   // per gated sublayer (diag/gated_sublayers.hpp), of the last epoch's evaluation
//
// The statistics cover the set the loop observes: the test set when it has one, else the validation
// set. ddl::Trainer adds these columns itself for a model with gated blocks.
#include <string>
#include <vector>

#include "ddl/core/types.hpp"
#include "ddl/diag/net_gate_audit.hpp"
#include "ddl/io/metrics_csv.hpp"
#include "ddl/train/eval_columns.hpp"

namespace ddl {

class GateColumns {
 public:
  explicit GateColumns(Index bins = 20) : m_bins(bins), m_epoch(bins) {}

  // Columns bound to this object, which must outlive the loop they are added to.
  template <class Model>
  EvalColumns<Model> columns() {
    EvalColumns<Model> c;
    c.names = {"beta_mean", "beta_min", "beta_max", "beta_saturated"};
    c.start = [this] { m_epoch = NetGateAccumulator(m_bins); };
    c.observe = [this](const Model& model) { m_epoch.add(model); };
    c.cells = [this] { return finish(); };
    return c;
  }

  // Per gated sublayer, over the last completed evaluation; empty when the net has no gates.
  const std::vector<GateStats>& stats() const { return m_stats; }
  // All sublayers together (tokens == 0 when the net has no gates).
  const GateStats& all() const { return m_all; }

 private:
  std::vector<std::string> finish() {
    m_stats = m_epoch.stats();
    GateAccumulator all;
    for (const GateAccumulator& b : m_epoch.blocks()) all.merge(b);
    m_all = all.stats();
    if (m_all.tokens == 0) return std::vector<std::string>(4);
    return {csvNumber(m_all.betaMean), csvNumber(m_all.betaMin), csvNumber(m_all.betaMax),
            csvNumber(m_all.saturatedFraction())};
  }

  Index m_bins;
  NetGateAccumulator m_epoch;
  std::vector<GateStats> m_stats;
  GateStats m_all;
};

}  // namespace ddl
