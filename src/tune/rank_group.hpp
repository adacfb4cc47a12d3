// The ranks of a multi-process job, as the tuner needs them to agree on every choice (DESIGN §6.7).
// The Python layer implements it over torch.distributed (broadcast_object_list / all_gather_object
// on a CPU-capable group); tests implement it with threads. Every rank must call the collectives in
// the same order, which the tuner guarantees when every rank asks it for the same problems in the
// same order (the SPMD pattern of data- and tensor-parallel jobs).
#pragma once
#include <string>
#include <vector>

namespace attnkit::tune {

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // On return every rank's `bytes` equals what `root` passed in.
  virtual void broadcast(std::string& bytes, int root) = 0;
  // Every rank's `bytes`, indexed by rank.
  virtual std::vector<std::string> all_gather(const std::string& bytes) = 0;
};

}  // namespace attnkit::tune
