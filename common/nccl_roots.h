#ifndef TRAINCTL_COMMON_NCCL_ROOTS_H_
#define TRAINCTL_COMMON_NCCL_ROOTS_H_

// Which ranks create the ncclUniqueIds of ncclCommInitRankScalable (NCCL >=
// 2.23). The rule is NCCL's own (NCCL user guide, "ncclCommInitRankScalable":
// the nId ids are spread over the nranks ranks in contiguous blocks, the
// first nranks % nId blocks one rank larger; the first rank of each block
// calls ncclGetUniqueId, and the ids are passed in block order). Example
// from the guide: 3 ids over 7 ranks -> blocks 0-2, 3-4, 5-6, roots 0, 3, 5.
// Pure functions; no NCCL needed.

namespace trainctl {

// The most ids one communicator's rendezvous takes (TRAINCTL_NCCL_UNIQUE_IDS):
// a bound on what a caller can make the coordinator or a node's relay hold
// (128 bytes each). NCCL's guidance is a few roots per thousand ranks.
inline constexpr int kMaxNcclUniqueIds = 4096;

// The root rank of id `index` in [0, nids) for `nranks` ranks; -1 when the
// arguments are out of range (nids < 1, nids > nranks, index outside).
int NcclIdRootRank(int index, int nranks, int nids);

// The id index `rank` creates, or -1 when it is not a root (or the
// arguments are out of range).
int NcclIdIndexOfRank(int rank, int nranks, int nids);

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_NCCL_ROOTS_H_
