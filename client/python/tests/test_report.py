"""trainctl.report: a no-op outside a task, batching by size and by age with
a fake clock, flush durability and error handling, and the task's
environment (no network: a fake sink records the reports)."""

import os
import subprocess
import sys
import textwrap
import unittest
import warnings
from unittest import mock

import trainctl
from trainctl import reporting as rep


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeSink:
    """Records each report (a list of (key, value, step)); raises the queued
    errors first."""

    def __init__(self):
        self.reports = []
        self.errors = []

    def __call__(self, points):
        if self.errors:
            raise self.errors.pop(0)
        self.reports.append(list(points))


class OutsideTaskTest(unittest.TestCase):
    def setUp(self):
        rep._reset()
        self.addCleanup(rep._reset)

    def test_report_outside_task_is_noop_with_one_warning(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCTL_")}
        with mock.patch.dict(os.environ, env, clear=True):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                trainctl.report(loss=0.5, step=1)
                trainctl.report(loss=0.4, step=2)
                trainctl.flush()
        self.assertEqual(len(caught), 1)
        self.assertIn("not inside a trainctl task", str(caught[0].message))
        self.assertIsNone(rep._reporter)

    def test_reporter_from_env_bad_attempt_names_variable(self):
        with self.assertRaisesRegex(trainctl.FailedPrecondition, "TRAINCTL_ATTEMPT is not set"):
            rep.reporter_from_env({"TRAINCTL_JOB_ID": "7", "TRAINCTL_COORDINATOR": "h:1"})
        with self.assertRaisesRegex(trainctl.FailedPrecondition, "RANK is not a number"):
            rep.reporter_from_env({"TRAINCTL_JOB_ID": "7", "TRAINCTL_ATTEMPT": "0",
                                   "RANK": "x", "TRAINCTL_COORDINATOR": "h:1"})
        with self.assertRaisesRegex(trainctl.FailedPrecondition, "TRAINCTL_TLS_CA"):
            rep.reporter_from_env({"TRAINCTL_JOB_ID": "7", "TRAINCTL_ATTEMPT": "0",
                                   "TRAINCTL_COORDINATOR": "h:1",
                                   "TRAINCTL_TLS_CA": "/nonexistent/ca.crt"})

    def test_reporter_from_env_identifies_task(self):
        r = rep.reporter_from_env({"TRAINCTL_JOB_ID": "7", "TRAINCTL_ATTEMPT": "2",
                                   "RANK": "3", "TRAINCTL_TOKEN": "secret",
                                   "TRAINCTL_COORDINATOR": "h:1"})
        sink = r._send
        self.assertEqual((sink.address, sink.job_id, sink.attempt, sink.rank, sink.token),
                         ("h:1", 7, 2, 3, "secret"))


class ReporterTest(unittest.TestCase):
    def setUp(self):
        self.sink = FakeSink()
        self.clock = FakeClock()
        self.r = rep.Reporter(self.sink, clock=self.clock, max_buffered_points=4,
                              flush_interval_s=1.0)

    def test_report_below_thresholds_only_buffers(self):
        self.r.report({"loss": 1.0, "acc": 0.5}, step=0)
        self.assertEqual(self.sink.reports, [])
        self.assertEqual(self.r.pending, 2)

    def test_report_sends_when_size_threshold_reached(self):
        # 2 + 2 points reach max_buffered_points=4: one report of 4.
        self.r.report({"loss": 1.0, "acc": 0.5}, step=0)
        self.r.report({"loss": 0.9, "acc": 0.6}, step=1)
        self.assertEqual(self.sink.reports, [[("loss", 1.0, 0), ("acc", 0.5, 0),
                                              ("loss", 0.9, 1), ("acc", 0.6, 1)]])
        self.assertEqual(self.r.pending, 0)

    def test_report_sends_when_oldest_point_is_old(self):
        self.r.report({"loss": 1.0}, step=0)
        self.clock.now += 0.5  # oldest 0.5 s old: not yet
        self.r.report({"loss": 0.9}, step=1)
        self.assertEqual(self.sink.reports, [])
        self.clock.now += 0.5  # oldest 1.0 s old: due
        self.r.report({"loss": 0.8}, step=2)
        self.assertEqual(len(self.sink.reports), 1)
        self.assertEqual([p[2] for p in self.sink.reports[0]], [0, 1, 2])

    def test_flush_after_outage_sends_in_reports_of_at_most_1000(self):
        # While the coordinator is unreachable every due send fails and the
        # points stay buffered (one warning); once it is back, flush() sends
        # all 2500 in reports of 1000, 1000 and 500 (the coordinator's limit).
        down = [trainctl.Unavailable("down")] * 10_000
        self.sink.errors = down
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for step in range(2500):
                self.r.report({"loss": float(step)}, step=step)
        self.assertEqual(len(caught), 1)
        self.assertEqual(self.r.pending, 2500)
        self.sink.errors = []
        self.r.flush()
        self.assertEqual([len(x) for x in self.sink.reports], [1000, 1000, 500])
        self.assertEqual(self.sink.reports[2][-1], ("loss", 2499.0, 2499))
        self.assertEqual(self.r.pending, 0)

    def test_report_step_none_follows_previous_step(self):
        self.r.report({"a": 1}, step=None)
        self.r.report({"a": 2}, step=10)
        self.r.report({"a": 3})
        self.r.flush()
        self.assertEqual([p[2] for p in self.sink.reports[0]], [0, 10, 11])

    def test_report_bad_input_buffers_nothing(self):
        for metrics, step, error in (({"bad key": 1.0}, 0, trainctl.InvalidArgument),
                                     ({"x" * 129: 1.0}, 0, trainctl.InvalidArgument),
                                     ({"ok": 1.0, "nan": float("nan")}, 0,
                                      trainctl.InvalidArgument),
                                     ({"inf": float("inf")}, 0, trainctl.InvalidArgument),
                                     ({"s": "0.5"}, 0, TypeError),
                                     ({"ok": 1.0}, -1, trainctl.InvalidArgument),
                                     ({"ok": 1.0}, 1.5, TypeError)):
            with self.subTest(metrics=metrics, step=step):
                with self.assertRaises(error):
                    self.r.report(metrics, step=step)
        self.assertEqual(self.r.pending, 0)

    def test_report_accepts_item_scalars_and_slash_keys(self):
        class Scalar:  # a numpy scalar or a one-element tensor
            def item(self):
                return 0.25
        self.r.report({"val/loss": Scalar(), "n": 3, "flag": True}, step=Scalar2())
        self.r.flush()
        self.assertEqual(self.sink.reports, [[("val/loss", 0.25, 7), ("n", 3.0, 7),
                                              ("flag", 1.0, 7)]])

    def test_flush_unavailable_keeps_points_for_next_try(self):
        self.r.report({"loss": 1.0}, step=0)
        self.sink.errors.append(trainctl.Unavailable("cannot reach"))
        with self.assertRaises(trainctl.Unavailable):
            self.r.flush()
        self.assertEqual(self.r.pending, 1)
        self.r.flush()
        self.assertEqual(self.sink.reports, [[("loss", 1.0, 0)]])

    def test_report_unavailable_warns_once_and_keeps(self):
        self.sink.errors += [trainctl.Unavailable("down"), trainctl.Unavailable("down")]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.r.report({"a": 1, "b": 2, "c": 3, "d": 4}, step=0)  # due: fails
            self.r.report({"a": 1}, step=1)                          # due: fails
            self.r.report({"a": 2}, step=2)                          # due: sent
        self.assertEqual(len(caught), 1)
        self.assertIn("kept for the next try", str(caught[0].message))
        self.assertEqual([len(x) for x in self.sink.reports], [6])

    def test_flush_other_error_drops_refused_points_and_raises(self):
        self.r.report({"loss": 1.0}, step=0)
        self.sink.errors.append(trainctl.PermissionDenied("not this attempt's token"))
        with self.assertRaisesRegex(trainctl.PermissionDenied,
                                    "1 metric point\\(s\\) refused: not this attempt"):
            self.r.flush()
        self.assertEqual(self.r.pending, 0)

    def test_report_too_many_pending_is_resource_exhausted(self):
        r = rep.Reporter(self.sink, clock=self.clock, max_buffered_points=1000,
                         flush_interval_s=1e9, max_pending_points=3)
        r.report({"a": 1, "b": 2}, step=0)
        with self.assertRaises(trainctl.ResourceExhausted):
            r.report({"c": 1, "d": 2}, step=1)
        self.assertEqual(r.pending, 2)


class Scalar2:
    def item(self):
        return 7


class AtExitTest(unittest.TestCase):
    def test_report_in_task_flushes_at_interpreter_exit(self):
        # A child interpreter "in a task" whose sink is replaced by one that
        # prints: the points buffered below the thresholds come out at exit.
        code = textwrap.dedent("""
            import trainctl
            from trainctl import reporting as rep
            r = rep._default()
            r._send = lambda points: print("sent", points, flush=True)
            trainctl.report(loss=0.5, step=3)
            print("end of script", flush=True)
        """)
        env = dict(os.environ, TRAINCTL_JOB_ID="9", TRAINCTL_ATTEMPT="0",
                   TRAINCTL_COORDINATOR="127.0.0.1:1", TRAINCTL_TOKEN="t",
                   PYTHONPATH=os.pathsep.join(sys.path))
        out = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout)
        self.assertEqual(out.stdout.splitlines(),
                         ["end of script", "sent [('loss', 0.5, 3)]"])


if __name__ == "__main__":
    unittest.main()
