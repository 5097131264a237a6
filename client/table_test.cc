#include "client/table.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::cli {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Le;
using ::testing::StartsWith;

std::vector<std::string> PrintLines(const Table& table, int width) {
  std::ostringstream out;
  table.Print(out, width);
  return absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
}

std::vector<int> Widths(const std::vector<std::string>& lines) {
  std::vector<int> widths;
  for (const std::string& line : lines) widths.push_back(DisplayWidth(line));
  return widths;
}

// A `trainctl list` table as a busy cluster shows it: a long name and a long
// pending reason make it 153 columns wide.
Table ListTable() {
  Table table({"ID", "NAME", "KIND", "STATE", "GPUS", "ATTEMPT", "AGE",
               "RUNTIME", "REASON"});
  table.AddRow({"1042", "llama-7b-finetune-lr3e-4-bs128-warmup2000", "gang",
                "pending", "2x8", "0", "5m3s", "-",
                "waiting for 16 GPUs on 2 nodes: 9 free; the head of the "
                "queue holds a reservation"});
  table.AddRow({"1041", "mnist", "experiment", "running", "0.25", "0", "1h2m",
                "1h1m", ""});
  // As `trainctl list` sets it up: short columns whole, ATTEMPT and RUNTIME
  // the first to go on a narrow terminal.
  for (int column : {0, 2, 3, 4, 6}) table.KeepWhole(column);
  table.Optional(5);
  table.Optional(7);
  return table;
}

TEST(TableTest, Print_Width120_EveryLineFitsAndShortColumnsStayWhole) {
  std::vector<std::string> lines = PrintLines(ListTable(), 120);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(Widths(lines), Each(Le(120)));
  // Ids, kinds, states and shapes are never cut; the name and the reason
  // give way, with "..." where they were cut.
  EXPECT_THAT(lines[1], StartsWith("1042  llama-7b-finetune"));
  EXPECT_THAT(lines[1], HasSubstr("gang        pending  2x8"));
  EXPECT_THAT(lines[1], HasSubstr("..."));
  EXPECT_THAT(lines[2], HasSubstr("mnist"));
  EXPECT_THAT(lines[2], HasSubstr("experiment  running  0.25"));
}

TEST(TableTest, Print_Width60_FitsByHidingOptionalColumns) {
  std::vector<std::string> lines = PrintLines(ListTable(), 60);
  EXPECT_THAT(Widths(lines), Each(Le(60)));
  // Even at their floors the nine columns need 75 columns: ATTEMPT (then
  // 66) and RUNTIME (then 57) are hidden; NAME and REASON share the rest.
  EXPECT_THAT(absl::StrSplit(lines[0], ' ', absl::SkipEmpty()),
              ElementsAre("ID", "NAME", "KIND", "STATE", "GPUS", "AGE", "REASON"));
  EXPECT_THAT(lines[2], HasSubstr("experiment  running  0.25  1h2m"));
}

TEST(TableTest, Print_Width60_CutCellsKeepTheirStart) {
  std::vector<std::string> lines = PrintLines(ListTable(), 60);
  EXPECT_THAT(lines[1], StartsWith("1042  llama"));
  EXPECT_THAT(lines[1], HasSubstr("..."));
}

TEST(TableTest, Print_WideTerminal_NothingCut) {
  std::vector<std::string> lines = PrintLines(ListTable(), 400);
  EXPECT_THAT(lines[1], HasSubstr("llama-7b-finetune-lr3e-4-bs128-warmup2000"));
  EXPECT_THAT(lines[1], HasSubstr("holds a reservation"));
}

TEST(TableTest, Print_UnknownWidth_CutsOnlyTheLastColumnAt60) {
  std::vector<std::string> lines = PrintLines(ListTable(), 0);
  EXPECT_THAT(lines[1], HasSubstr("llama-7b-finetune-lr3e-4-bs128-warmup2000"));
  std::vector<int> widths = ListTable().ColumnWidths(0);
  EXPECT_EQ(widths.back(), kDefaultTruncateWidth);
}

TEST(TableTest, Print_KeepWholeColumn_NeverCutEvenWhenTooWide) {
  Table table({"RANK", "LOG PATH"});
  const std::string path =
      "/var/lib/trainctl/agent-gpu-node-7/logs/job-1042/attempt-0/rank-3.log";
  table.AddRow({"3", path});
  table.KeepWhole(1);
  std::vector<std::string> lines = PrintLines(table, 40);
  EXPECT_EQ(lines[1], "3     " + path);
}

TEST(TableTest, Print_ColumnsAtTheirFloor_LinesAreLeftLongerNotMangled) {
  // Ten columns whose headers alone need 108 columns and none optional: at
  // 60 each is cut to its header's width, no further; the lines wrap.
  std::vector<std::string> header;
  for (int i = 0; i < 10; ++i) header.push_back("COLUMN" + std::to_string(i) + "XX");
  Table table(header);
  table.AddRow(std::vector<std::string>(10, "a-rather-long-cell-value"));
  std::vector<std::string> lines = PrintLines(table, 60);
  EXPECT_THAT(lines[0], StartsWith("COLUMN0XX  COLUMN1XX  "));
  EXPECT_THAT(lines[1], StartsWith("a-rath...  a-rath...  "));
}

TEST(TableTest, Print_UnknownWidth_NoColumnHidden) {
  std::vector<std::string> lines = PrintLines(ListTable(), 0);
  EXPECT_THAT(lines[0], HasSubstr("ATTEMPT"));
  EXPECT_THAT(lines[0], HasSubstr("RUNTIME"));
}

TEST(TableTest, Truncate_Utf8_NeverSplitsACharacter) {
  // "é" is 2 bytes, 1 column.
  EXPECT_EQ(Truncate("résumé-de-l-expérience", 8), "résum...");
  EXPECT_EQ(DisplayWidth("résumé"), 6);
  EXPECT_EQ(Truncate("short", 8), "short");
}

TEST(TableTest, AddRow_ShortRow_PaddedWithEmptyCells) {
  Table table({"A", "B", "C"});
  table.AddRow({"1"});
  EXPECT_THAT(PrintLines(table, 80), ElementsAre("A  B  C", "1"));
}

}  // namespace
}  // namespace trainctl::cli
