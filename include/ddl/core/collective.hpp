#pragma once
// ddl/core/collective.hpp: the few collective operations data-parallel training needs, as an
// interface, so that the training loop (train/) uses them without knowing the transport.
//
//   ddl::SingleProcess one;                 // size 1: every operation is the identity
//   ddl::MpiCommunicator world;             // distributed/mpi_communicator.hpp, when built with MPI
// Every rank must make the same calls in the same order with the same sizes (as with MPI itself);
// a failed call throws ddl::Error naming the call. Sums are in place: on return every rank holds the
// sum over the ranks of its buffer. docs/decisions.md ("Data-parallel training") explains the design.
// Started sums (startSum ... finishSums) let a caller go on computing while a sum travels: the result
// is the same, bit for bit, as allreduceSum of the same buffer, and sums start in the same order on
// every rank. An implementation without them (SingleProcess) sums at once in startSum.
#include <cstddef>
#include <cstdint>
#include <string>

namespace ddl {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;  // 0 .. size() - 1
  virtual int size() const = 0;
  // data[i] = sum over ranks of data[i], on every rank.
  virtual void allreduceSum(float* data, std::size_t n) = 0;
  virtual void allreduceSum(double* data, std::size_t n) = 0;
  // Starts data[i] = sum over ranks of data[i]; data must stay untouched until finishSums() returns.
  virtual void startSum(float* data, std::size_t n) { allreduceSum(data, n); }
  virtual void startSum(double* data, std::size_t n) { allreduceSum(data, n); }
  // Lets started sums advance (MPI moves nonblocking messages only inside its calls); never waits.
  virtual void progressSums() {}
  // Waits until every started sum is complete.
  virtual void finishSums() {}
  // root's bytes to every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  // out[r] = rank r's value, on every rank (out holds size() values).
  virtual void allgather(std::uint64_t value, std::uint64_t* out) = 0;
  virtual void barrier() = 0;
  // One line for a run's first output, e.g. "2 ranks (Open MPI, deterministic sums)".
  virtual std::string describe() const = 0;
};

// One process: rank 0 of 1. What the training loop uses when no communicator is given.
class SingleProcess final : public Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduceSum(float*, std::size_t) override {}
  void allreduceSum(double*, std::size_t) override {}
  void broadcast(void*, std::size_t, int) override {}
  void allgather(std::uint64_t value, std::uint64_t* out) override { out[0] = value; }
  void barrier() override {}
  std::string describe() const override { return "1 process"; }
};

// 64-bit FNV-1a of bytes: a digest that ranks compare to agree on a configuration.
inline std::uint64_t fnv1a64(const std::string& bytes, std::uint64_t h = 14695981039346656037ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace ddl
