#!/usr/bin/env python3
"""The DDP steady-state benchmark's arithmetic, without a GPU: paired ratios,
the median's 95% interval, and pooling calls of one experiment.

ddp_steady.py's figures (bench/results/ddp_steady*.json) are what the
training-speed claims in bench/README.md rest on; these checks make a wrong
pairing, an inverted ratio or a too-narrow interval fail in CI.
"""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_steady  # noqa: E402


def run(arm, rnd, mlp, wall=20.0, first=8.0):
    """One run as ddp_steady.py records it (every workload at mlp steps/s)."""
    return {"arm": arm, "round": rnd, "wall_s": wall, "step_ms": None,
            "line": {"steps_per_s": {w: mlp for w in ddp_steady.WORKLOADS},
                     "time_to_first_allreduce_s": first}}


class MedianIntervalTest(unittest.TestCase):
    def test_order_statistics_of_the_sign_test(self):
        # n = 10: P(Binomial(10, 1/2) <= 1) = 1.07% <= 2.5% < P(<= 2) = 5.5%,
        # so the interval is the 2nd smallest to the 2nd largest.
        self.assertEqual(ddp_steady.median_ci95(list(range(1, 11))), [2, 9])
        # n = 29 (three device calls pooled): 9th to 21st.
        self.assertEqual(ddp_steady.median_ci95(list(range(1, 30))), [9, 21])
        # Unsorted input gives the same interval.
        self.assertEqual(ddp_steady.median_ci95([9, 1, 8, 2, 7, 3, 6, 4, 5, 10]), [2, 9])

    def test_too_few_rounds_have_no_interval(self):
        # Five values: even min..max covers the median only 93.75% of the time.
        self.assertIsNone(ddp_steady.median_ci95([1, 2, 3, 4, 5]))
        self.assertEqual(ddp_steady.median_ci95([1, 2, 3, 4, 5, 6]), [1, 6])


class SummaryTest(unittest.TestCase):
    def test_ratios_pair_runs_of_the_same_round(self):
        runs = [run("torchrun", 1, 100.0, wall=20.0), run("trainctl", 1, 110.0, wall=18.0),
                run("trainctl", 2, 90.0), run("torchrun", 2, 100.0),
                run("trainctl", 3, 500.0)]  # no torchrun run in round 3: unpaired
        s = ddp_steady.summarize(runs, ["torchrun", "trainctl"])["paired_vs_torchrun"]
        t = s["trainctl"]
        self.assertEqual(t["rounds"], 2)
        self.assertEqual(t["steps_per_s_ratio"]["mlp"]["each"], [1.1, 0.9])
        self.assertEqual(t["at_least_torchrun"]["mlp"], 1)
        # Times: > 1 is slower. 18 s against 20 s is 0.9.
        self.assertEqual(t["launch_to_exit_ratio"]["min"], 0.9)

    def test_pool_sums_calls_and_refuses_unlike_ones(self):
        with tempfile.TemporaryDirectory() as d:
            def write(name, runs, procs=2):
                path = os.path.join(d, name)
                with open(path, "w") as f:
                    json.dump({"arms": ["torchrun", "trainctl"], "procs": procs,
                               "seconds_per_workload": 3, "first_round": 1,
                               "runs": runs}, f)
                return path
            a = write("a.json", [run("torchrun", r, 100.0) for r in range(1, 4)]
                      + [run("trainctl", r, 105.0) for r in range(1, 4)])
            # The second call numbers its rounds from 3, as the first call's
            # last: both round-3 pairs count.
            b = write("b.json", [run("torchrun", r, 100.0) for r in range(3, 6)]
                      + [run("trainctl", r, 95.0) for r in range(3, 6)])
            out = os.path.join(d, "pool.json")
            ddp_steady.pool(out, [a, b])
            with open(out) as f:
                pooled = json.load(f)
            mlp = pooled["summary"]["paired_vs_torchrun"]["trainctl"]["steps_per_s_ratio"]["mlp"]
            self.assertEqual(mlp["n"], 6)
            self.assertEqual(mlp["median"], 1.0)
            self.assertEqual(mlp["median_ci95"], [0.95, 1.05])
            self.assertEqual(pooled["pooled_from"], [{"first_round": 1, "runs": 6},
                                                      {"first_round": 1, "runs": 6}])
            c = write("c.json", [run("torchrun", 7, 100.0)], procs=1)
            with self.assertRaisesRegex(ValueError, "procs differs"):
                ddp_steady.pool(out, [a, c])


if __name__ == "__main__":
    unittest.main()
