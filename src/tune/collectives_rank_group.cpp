#include "tune/collectives_rank_group.hpp"

#include <string>
#include <utility>
#include <vector>

#include "attnkit/error.hpp"

namespace attnkit::tune {
namespace {

class CollectivesRankGroup : public RankGroup {
 public:
  explicit CollectivesRankGroup(RankCollectives collectives) : c_(std::move(collectives)) {}
  int rank() const override { return c_.rank; }
  int size() const override { return c_.size; }
  void broadcast(std::string& bytes, int root) override { c_.broadcast(bytes, root); }
  std::vector<std::string> all_gather(const std::string& bytes) override {
    std::vector<std::string> all = c_.all_gather(bytes);
    if (static_cast<int32_t>(all.size()) != c_.size) {
      throw Error(Status::internal, "rank group all_gather returned " + std::to_string(all.size()) +
                                        " results; expected one per rank (" + std::to_string(c_.size) + ")");
    }
    return all;
  }

 private:
  RankCollectives c_;
};

}  // namespace

std::shared_ptr<RankGroup> rank_group_from_collectives(RankCollectives collectives) {
  return std::make_shared<CollectivesRankGroup>(std::move(collectives));
}

}  // namespace attnkit::tune
