#include "common/nccl_roots.h"

namespace trainctl {

int NcclIdRootRank(int index, int nranks, int nids) {
  if (nids < 1 || nids > nranks || index < 0 || index >= nids) return -1;
  const int per = nranks / nids;     // ranks per block
  const int larger = nranks % nids;  // the first `larger` blocks have per + 1
  if (index < larger) return index * (per + 1);
  return larger * (per + 1) + (index - larger) * per;
}

int NcclIdIndexOfRank(int rank, int nranks, int nids) {
  if (nids < 1 || nids > nranks || rank < 0 || rank >= nranks) return -1;
  const int per = nranks / nids;
  const int larger = nranks % nids;
  const int split = larger * (per + 1);  // first rank of the smaller blocks
  if (rank < split) return rank % (per + 1) == 0 ? rank / (per + 1) : -1;
  return (rank - split) % per == 0 ? larger + (rank - split) / per : -1;
}

}  // namespace trainctl
