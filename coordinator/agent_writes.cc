#include "coordinator/agent_writes.h"

#include <utility>

namespace trainctl::coord {

int CoalesceLeadingStarts(std::deque<v1::CoordinatorMessage>& queue) {
  size_t run = 0;
  size_t bytes = 0;
  while (run < queue.size() && run < static_cast<size_t>(kMaxStartsPerBatch) &&
         queue[run].has_start_task()) {
    const size_t size = queue[run].start_task().ByteSizeLong();
    // The first start always goes, however large (alone it fits as before).
    if (run > 0 && bytes + size > kMaxStartBatchBytes) break;
    bytes += size;
    ++run;
  }
  if (run < 2) return 0;
  v1::CoordinatorMessage batch;
  v1::StartTaskBatch* starts = batch.mutable_start_task_batch();
  starts->mutable_starts()->Reserve(static_cast<int>(run));
  for (size_t i = 0; i < run; ++i) {
    *starts->add_starts() = std::move(*queue[i].mutable_start_task());
  }
  queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(run));
  queue.push_front(std::move(batch));
  return static_cast<int>(run);
}

}  // namespace trainctl::coord
