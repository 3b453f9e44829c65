#pragma once
// ddl/ddl.hpp: the umbrella header. Include this, or only the headers you need.
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/types.hpp"

#include "ddl/ops/delta_operator.hpp"
#include "ddl/ops/delta_write.hpp"
#include "ddl/ops/direction.hpp"
#include "ddl/ops/gate.hpp"

#include "ddl/nn/activation.hpp"
#include "ddl/nn/compressor.hpp"
#include "ddl/nn/cross_entropy.hpp"
#include "ddl/nn/delta_block.hpp"
#include "ddl/nn/delta_net.hpp"
#include "ddl/nn/delta_net_config.hpp"
#include "ddl/nn/delta_residual.hpp"
#include "ddl/nn/dropout.hpp"
#include "ddl/nn/expansion.hpp"
#include "ddl/nn/init.hpp"
#include "ddl/nn/linear.hpp"
#include "ddl/nn/rms_norm.hpp"

#include "ddl/diag/gate_audit.hpp"
#include "ddl/diag/spectral.hpp"

#include "ddl/data/cifar.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/data/file_bytes.hpp"
#include "ddl/data/idx.hpp"

#include "ddl/io/atomic_file.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/metrics_csv.hpp"
#include "ddl/io/safetensors.hpp"

#include "ddl/train/adamw.hpp"
#include "ddl/train/grad_clip.hpp"
#include "ddl/train/lr_schedule.hpp"
#include "ddl/train/sgd.hpp"

#include "ddl/testing/grad_check.hpp"
