"""Client.usage and Client.history against a fake stub (no network)."""

import datetime
import unittest

import grpc

import trainctl
from trainctl.client import Client
from trainctl.v1 import accounting_pb2

from fakes import FakeRpcError, FakeStub


class AccountingTest(unittest.TestCase):
    def setUp(self):
        self.stub = FakeStub()
        self.client = Client._for_stub(self.stub)

    def test_usage_maps_window_and_group(self):
        answer = accounting_pb2.GetUsageResponse(by="project", rows=[
            accounting_pb2.UsageRow(key="vision", allocated_gpu_hours=12.5,
                                    used_gpu_hours=10, efficiency=0.8)])
        self.stub.answer("GetUsage", answer)
        got = self.client.usage(by="project", since=datetime.datetime(2026, 11, 1),
                                until=datetime.datetime(2026, 11, 2))
        (request,) = self.stub.requests("GetUsage")
        self.assertEqual(request.by, "project")
        self.assertEqual(request.since_ms, 1793491200000)
        self.assertEqual(request.until_ms, 1793491200000 + 86400000)
        self.assertEqual(got.rows[0].key, "vision")
        self.assertAlmostEqual(got.rows[0].efficiency, 0.8)

    def test_usage_timedelta_is_before_until(self):
        self.stub.answer("GetUsage", accounting_pb2.GetUsageResponse())
        self.client.usage(since=datetime.timedelta(days=7),
                          until=datetime.datetime(2026, 11, 8))
        (request,) = self.stub.requests("GetUsage")
        self.assertEqual(request.until_ms - request.since_ms, 7 * 86400000)

    def test_usage_bad_input_raises_before_any_call(self):
        with self.assertRaises(trainctl.InvalidArgument) as cm:
            self.client.usage(by="team")
        self.assertIn("by", str(cm.exception))
        with self.assertRaises(trainctl.InvalidArgument) as cm:
            self.client.usage(since=datetime.datetime(2026, 11, 2),
                              until=datetime.datetime(2026, 11, 1))
        self.assertIn("since", str(cm.exception))
        self.assertEqual(self.stub.calls, [])

    def test_history_yields_records_across_pages(self):
        pages = [accounting_pb2.ListHistoryResponse(records=[
                     accounting_pb2.UsageRecord(job_id=1), accounting_pb2.UsageRecord(job_id=2)]),
                 accounting_pb2.ListHistoryResponse(records=[
                     accounting_pb2.UsageRecord(job_id=3, preempted=True)])]
        self.stub.answer("ListHistory", lambda request: iter(pages))
        got = list(self.client.history(user="ana", state="preempted"))
        self.assertEqual([r.job_id for r in got], [1, 2, 3])
        (request,) = self.stub.requests("ListHistory")
        self.assertEqual(request.user, "ana")
        self.assertEqual(request.state, "preempted")
        self.assertEqual(request.until_ms - request.since_ms, 86400000)

    def test_history_error_mid_stream_raises_trainctl_error(self):
        def failing(request):
            yield accounting_pb2.ListHistoryResponse(records=[accounting_pb2.UsageRecord(job_id=1)])
            raise FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "state: bad")
        self.stub.answer("ListHistory", failing)
        it = self.client.history()
        self.assertEqual(next(it).job_id, 1)
        with self.assertRaises(trainctl.InvalidArgument):
            next(it)


if __name__ == "__main__":
    unittest.main()
