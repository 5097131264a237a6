"""Sweep expansion (trainctl.sweep): order, placeholders, draws, errors."""

import unittest

import trainctl
from trainctl import sweep


class ExpandTest(unittest.TestCase):
    def test_expand_grid_first_parameter_slowest(self):
        trials = sweep.expand(["t", "{a}{b}"], grid={"a": ["x", "y"], "b": [1, 2, 3]})
        self.assertEqual([argv[1] for _, argv in trials],
                         ["x1", "x2", "x3", "y1", "y2", "y3"])
        self.assertEqual(trials[4][0], {"a": "y", "b": "2"})

    def test_expand_escaped_braces_and_non_placeholders_kept(self):
        (params, argv), = sweep.expand(["{{lr}}={lr}", "{not a name}", "{", "}}"],
                                       grid={"lr": ["1e-3"]})
        self.assertEqual(argv, ["{lr}=1e-3", "{not a name}", "{", "}"])

    def test_expand_random_same_seed_same_trials(self):
        kw = dict(grid={"bs": [64, 128]}, params={"lr": "loguniform:1e-5:1e-2",
                                                  "opt": "choice:adam|sgd",
                                                  "layers": "int:1:4", "p": "uniform:0:1",
                                                  "act": ["relu", "gelu"]},
                  samples=3)
        a = sweep.expand(["t"], seed=7, **kw)
        self.assertEqual(a, sweep.expand(["t"], seed=7, **kw))
        self.assertNotEqual(a, sweep.expand(["t"], seed=8, **kw))
        self.assertEqual(len(a), 6)
        for params, _ in a:
            self.assertTrue(1e-5 <= float(params["lr"]) <= 1e-2)
            self.assertIn(params["opt"], ("adam", "sgd"))
            self.assertIn(int(params["layers"]), range(1, 5))
            self.assertTrue(0 <= float(params["p"]) <= 1)
            self.assertIn(params["act"], ("relu", "gelu"))

    def test_expand_errors(self):
        cases = (
            (dict(), "no parameters"),
            (dict(grid={"a": []}), "at least one value"),
            (dict(grid={"1a": [1]}), "not a parameter name"),
            (dict(grid={"a": [1]}, params={"a": "uniform:0:1"}, samples=1), "twice"),
            (dict(params={"lr": "uniform:0:1"}), "samples=N"),
            (dict(grid={"a": [1]}, samples=2), "needs at least one random"),
            (dict(params={"lr": "normal:0:1"}, samples=1), "unknown distribution"),
            (dict(params={"lr": "uniform:1:0"}, samples=1), "above HIGH"),
            (dict(params={"lr": "loguniform:0:1"}, samples=1), "0 < LOW"),
            (dict(params={"n": "int:1.5:3"}, samples=1), "integers"),
            (dict(params={"o": "choice:a||b"}, samples=1), "empty choice"),
            (dict(grid={"a": list(range(101)), "b": list(range(100))}), "more than 10000"),
        )
        for kw, pattern in cases:
            with self.subTest(kw=kw):
                with self.assertRaisesRegex(trainctl.InvalidArgument, pattern):
                    sweep.expand(["t", "{a}"] if "a" in kw.get("grid", {}) else ["t"], **kw)

    def test_expand_unknown_placeholder_names_it(self):
        with self.assertRaisesRegex(trainctl.InvalidArgument, r"placeholder \{lr\}.*bs"):
            sweep.expand(["t", "--lr={lr}"], grid={"bs": [1]})

    def test_check_sweep_id(self):
        self.assertEqual(sweep.check_sweep_id("sw-1.a_b"), "sw-1.a_b")
        for bad in ("", "a b", "x" * 65):
            with self.assertRaises(trainctl.InvalidArgument):
                sweep.check_sweep_id(bad)


if __name__ == "__main__":
    unittest.main()
