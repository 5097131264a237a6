#include "common/nccl_roots.h"

#include "gtest/gtest.h"

namespace trainctl {
namespace {

// NCCL's example: 3 ids over 7 ranks -> blocks 0-2, 3-4, 5-6.
TEST(NcclRoots, RootRank_ThreeIdsSevenRanks_MatchesNcclExample) {
  EXPECT_EQ(NcclIdRootRank(0, 7, 3), 0);
  EXPECT_EQ(NcclIdRootRank(1, 7, 3), 3);
  EXPECT_EQ(NcclIdRootRank(2, 7, 3), 5);
}

TEST(NcclRoots, IndexOfRank_IsInverseOfRootRank) {
  for (int nranks = 1; nranks <= 40; ++nranks) {
    for (int nids = 1; nids <= nranks; ++nids) {
      int roots = 0;
      for (int r = 0; r < nranks; ++r) {
        const int i = NcclIdIndexOfRank(r, nranks, nids);
        if (i < 0) continue;
        ++roots;
        EXPECT_EQ(NcclIdRootRank(i, nranks, nids), r) << nranks << " " << nids;
      }
      EXPECT_EQ(roots, nids) << nranks << " ranks, " << nids << " ids";
    }
  }
}

TEST(NcclRoots, OneId_RootIsRankZero) {
  EXPECT_EQ(NcclIdRootRank(0, 4096, 1), 0);
  EXPECT_EQ(NcclIdIndexOfRank(0, 4096, 1), 0);
  EXPECT_EQ(NcclIdIndexOfRank(1, 4096, 1), -1);
}

TEST(NcclRoots, OutOfRange_IsMinusOne) {
  EXPECT_EQ(NcclIdRootRank(0, 2, 3), -1);  // more ids than ranks
  EXPECT_EQ(NcclIdRootRank(2, 8, 2), -1);
  EXPECT_EQ(NcclIdIndexOfRank(8, 8, 2), -1);
  EXPECT_EQ(NcclIdIndexOfRank(0, 8, 0), -1);
}

}  // namespace
}  // namespace trainctl
