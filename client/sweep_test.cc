#include "client/sweep.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::trainctl::testing::StatusIs;

using Params = std::map<std::string, std::string>;
using Argv = std::vector<std::string>;

GridParam Grid(const std::string& text) {
  absl::StatusOr<GridParam> p = ParseGridFlag(text);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.value_or(GridParam{});
}

RandomParam Random(const std::string& text) {
  absl::StatusOr<RandomParam> p = ParseParamFlag(text);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.value_or(RandomParam{});
}

double Number(const std::string& text) {
  double v = NAN;
  EXPECT_TRUE(absl::SimpleAtod(text, &v)) << text;
  return v;
}

// ------------------------------------------------------------ grid

TEST(ExpandSweepTest, ExpandSweep_TwoByTwoGrid_CartesianProductFirstParamSlowest) {
  SweepSpec spec;
  spec.grid = {Grid("lr=1e-3,3e-4"), Grid("bs=64,128")};
  auto trials = ExpandSweep(spec, {"python", "train.py", "--lr", "{lr}", "--bs={bs}"});
  TC_ASSERT_OK(trials);
  ASSERT_EQ(trials->size(), 4u);
  // lr varies slowest, values verbatim as typed.
  EXPECT_EQ((*trials)[0].params, (Params{{"lr", "1e-3"}, {"bs", "64"}}));
  EXPECT_EQ((*trials)[1].params, (Params{{"lr", "1e-3"}, {"bs", "128"}}));
  EXPECT_EQ((*trials)[2].params, (Params{{"lr", "3e-4"}, {"bs", "64"}}));
  EXPECT_EQ((*trials)[3].params, (Params{{"lr", "3e-4"}, {"bs", "128"}}));
  EXPECT_EQ((*trials)[3].command,
            (Argv{"python", "train.py", "--lr", "3e-4", "--bs=128"}));
}

TEST(ExpandSweepTest, ExpandSweep_ThreeParams_OdometerOrder) {
  SweepSpec spec;
  spec.grid = {Grid("a=1,2"), Grid("b=x"), Grid("c=p,q,r")};
  auto trials = ExpandSweep(spec, {"run", "{a}{b}{c}"});
  TC_ASSERT_OK(trials);
  std::vector<std::string> args;
  for (const Trial& t : *trials) args.push_back(t.command[1]);
  EXPECT_THAT(args, ElementsAre("1xp", "1xq", "1xr", "2xp", "2xq", "2xr"));
}

// ------------------------------------------------------------ placeholders

TEST(ExpandSweepTest, ExpandSweep_PlaceholdersRepeatedAndEscaped_Substituted) {
  SweepSpec spec;
  spec.grid = {Grid("lr=0.1")};
  auto trials = ExpandSweep(
      spec, {"sh", "-c", "echo {lr} {lr} {{lr}} ${HOME_DIR:-x} {not a name} {}"});
  TC_ASSERT_OK(trials);
  // {{ }} are literal braces; braces that are not {identifier} stay as is.
  EXPECT_EQ((*trials)[0].command[2],
            "echo 0.1 0.1 {lr} ${HOME_DIR:-x} {not a name} {}");
}

TEST(ExpandSweepTest, ExpandSweep_UnknownPlaceholder_InvalidArgumentNamingIt) {
  SweepSpec spec;
  spec.grid = {Grid("lr=0.1")};
  EXPECT_THAT(ExpandSweep(spec, {"python", "--bs", "{bs}"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("placeholder {bs} is not a parameter")));
}

TEST(UnusedSweepParamsTest, UnusedSweepParams_ParamNotInCommand_Listed) {
  SweepSpec spec;
  spec.grid = {Grid("lr=0.1"), Grid("bs=1")};
  spec.random = {Random("wd=uniform:0:1")};
  spec.random_count = 2;
  // Allowed (the program may read it another way), but reported.
  TC_ASSERT_OK(ExpandSweep(spec, {"python", "--lr", "{lr}"}));
  EXPECT_THAT(UnusedSweepParams(spec, {"python", "--lr", "{lr}"}),
              ElementsAre("bs", "wd"));
  EXPECT_THAT(UnusedSweepParams(spec, {"x", "{lr}{bs}{wd}"}), ElementsAre());
}

// ------------------------------------------------------------ random

TEST(ExpandSweepTest, ExpandSweep_RandomSameSeed_SameTrialsOtherSeedDiffers) {
  SweepSpec spec;
  spec.random = {Random("lr=loguniform:1e-5:1e-2"), Random("opt=choice:adam|sgd")};
  spec.random_count = 20;
  spec.seed = 7;
  auto a = ExpandSweep(spec, {"train", "{lr}", "{opt}"});
  auto b = ExpandSweep(spec, {"train", "{lr}", "{opt}"});
  TC_ASSERT_OK(a);
  TC_ASSERT_OK(b);
  ASSERT_EQ(a->size(), 20u);
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].params, (*b)[i].params) << i;
    EXPECT_EQ((*a)[i].command, (*b)[i].command) << i;
  }
  spec.seed = 8;
  auto c = ExpandSweep(spec, {"train", "{lr}", "{opt}"});
  TC_ASSERT_OK(c);
  bool differs = false;
  for (size_t i = 0; i < c->size(); ++i) differs |= (*a)[i].params != (*c)[i].params;
  EXPECT_TRUE(differs);
}

TEST(ExpandSweepTest, ExpandSweep_RandomSamples_WithinBounds) {
  SweepSpec spec;
  spec.random = {Random("lr=loguniform:1e-5:1e-2"), Random("drop=uniform:0.1:0.5"),
                 Random("layers=int:2:4"), Random("act=choice:relu|gelu|silu")};
  spec.random_count = 500;
  auto trials = ExpandSweep(spec, {"train", "{lr}", "{drop}", "{layers}", "{act}"});
  TC_ASSERT_OK(trials);
  ASSERT_EQ(trials->size(), 500u);
  std::set<std::string> layers, acts;
  int lr_below_1e_4 = 0;
  for (const Trial& t : *trials) {
    const double lr = Number(t.params.at("lr"));
    EXPECT_GE(lr, 1e-5);
    EXPECT_LE(lr, 1e-2);
    if (lr < 1e-4) ++lr_below_1e_4;
    const double drop = Number(t.params.at("drop"));
    EXPECT_GE(drop, 0.1);
    EXPECT_LE(drop, 0.5);
    layers.insert(t.params.at("layers"));
    acts.insert(t.params.at("act"));
    EXPECT_EQ(t.command[3], t.params.at("layers"));
  }
  // int is inclusive at both ends: 500 draws from {2,3,4} hit each.
  EXPECT_EQ(layers, (std::set<std::string>{"2", "3", "4"}));
  EXPECT_EQ(acts, (std::set<std::string>{"relu", "gelu", "silu"}));
  // Log-uniform: [1e-5, 1e-4) is a third of the log range, ~167 of 500
  // (a uniform draw would put ~4.5 there).
  EXPECT_GT(lr_below_1e_4, 100);
  EXPECT_LT(lr_below_1e_4, 240);
}

TEST(ExpandSweepTest, ExpandSweep_GridAndRandom_NSamplesPerGridPoint) {
  SweepSpec spec;
  spec.grid = {Grid("bs=64,128")};
  spec.random = {Random("lr=uniform:0:1")};
  spec.random_count = 3;
  auto trials = ExpandSweep(spec, {"train", "{bs}", "{lr}"});
  TC_ASSERT_OK(trials);
  ASSERT_EQ(trials->size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ((*trials)[i].params.at("bs"), i < 3 ? "64" : "128") << i;
  }
}

TEST(ExpandSweepTest, ExpandSweep_DefaultSeed_Deterministic) {
  SweepSpec spec;
  spec.random = {Random("x=uniform:0:1")};
  spec.random_count = 3;
  auto a = ExpandSweep(spec, {"run", "{x}"});
  auto b = ExpandSweep(spec, {"run", "{x}"});
  TC_ASSERT_OK(a);
  TC_ASSERT_OK(b);
  EXPECT_EQ((*a)[2].command, (*b)[2].command);
  // Compact: %g, at most 6 significant digits.
  EXPECT_LE((*a)[0].params.at("x").size(), 12u);
}

// ------------------------------------------------------------ errors

TEST(ParseGridFlagTest, ParseGridFlag_BadText_InvalidArgument) {
  for (const char* text : {"lr", "lr=", "lr=1,,2", "lr=1,", "1lr=1", "=1", "l-r=1"}) {
    EXPECT_THAT(ParseGridFlag(text),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--grid")))
        << text;
  }
}

TEST(ParseDistributionTest, ParseDistribution_BadText_InvalidArgumentSayingWhy) {
  struct Case {
    const char* text;
    const char* why;
  };
  for (const Case& c : std::vector<Case>{
           {"normal:0:1", "unknown distribution \"normal\""},
           {"uniform", "expected uniform:LOW:HIGH"},
           {"uniform:0", "expected uniform:LOW:HIGH"},
           {"uniform:a:1", "finite numbers"},
           {"uniform:0:inf", "finite numbers"},
           {"uniform:2:1", "above HIGH"},
           {"loguniform:0:1", "0 < LOW"},
           {"int:1.5:3", "integers"},
           {"choice:a||b", "empty choice"},
           {"choice:", "empty choice"},
       }) {
    EXPECT_THAT(ParseDistribution(c.text),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.why)))
        << c.text;
  }
  TC_EXPECT_OK(ParseDistribution("int:-3:3"));
  TC_EXPECT_OK(ParseDistribution("choice:adam"));
}

TEST(ParseParamFlagTest, ParseParamFlag_BadDistribution_NamesTheParam) {
  EXPECT_THAT(ParseParamFlag("lr=loguniform:-1:1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--param lr: \"loguniform:-1:1\"")));
  EXPECT_THAT(ParseParamFlag("loguniform:1:2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--param")));
}

TEST(ExpandSweepTest, ExpandSweep_BadSpecs_InvalidArgument) {
  struct Case {
    SweepSpec spec;
    const char* why;
  };
  std::vector<Case> cases(6);
  cases[0].why = "no parameters";
  cases[1].spec.grid = {Grid("a=1"), Grid("a=2")};
  cases[1].why = "parameter a is given twice";
  cases[2].spec.random = {Random("a=uniform:0:1")};
  cases[2].why = "need --random N";
  cases[3].spec.grid = {Grid("a=1")};
  cases[3].spec.random_count = 2;
  cases[3].why = "needs at least one --param";
  cases[4].spec.grid = {GridParam{"a", {}}};
  cases[4].why = "--grid a: no value";
  cases[5].spec.grid = {GridParam{"a", {"1", ""}}};
  cases[5].why = "--grid a: empty value";
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_THAT(ExpandSweep(cases[i].spec, {"run", "{a}"}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(cases[i].why)))
        << i;
  }
  SweepSpec ok;
  ok.grid = {Grid("a=1")};
  EXPECT_THAT(ExpandSweep(ok, {}), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("no command")));
}

TEST(ExpandSweepTest, ExpandSweep_MoreThan10000Trials_InvalidArgument) {
  // 100 x 100 = 10 000 is the limit itself: allowed.
  std::string hundred = "v=0";
  for (int i = 1; i < 100; ++i) absl::StrAppend(&hundred, ",", i);
  SweepSpec spec;
  spec.grid = {Grid(hundred), Grid("w" + hundred.substr(1))};
  auto trials = ExpandSweep(spec, {"run", "{v}", "{w}"});
  TC_ASSERT_OK(trials);
  EXPECT_EQ(trials->size(), 10000u);
  // One more grid value: 10 100.
  spec.grid.push_back(Grid("x=1,2"));
  EXPECT_THAT(ExpandSweep(spec, {"run"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("more than 10000 trials")));
  // A huge --random alone, and a product that would overflow int64.
  SweepSpec random;
  random.random = {Random("x=uniform:0:1")};
  random.random_count = 10001;
  EXPECT_THAT(ExpandSweep(random, {"run"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("10000")));
  random.random_count = int64_t{1} << 62;
  random.grid = {Grid("a=1,2,3,4")};
  EXPECT_THAT(ExpandSweep(random, {"run"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("10000")));
}

}  // namespace
}  // namespace trainctl::cli
