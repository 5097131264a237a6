"""Client and Job against a fake stub: error mapping, wait, logs, metrics,
why, jobs, nodes and sweep (no network)."""

import unittest

import grpc

import trainctl
from trainctl import errors
from trainctl.client import Client, format_why
from trainctl.v1 import metrics_pb2, sched_pb2, service_pb2, types_pb2, web_pb2

from fakes import FakeRpcError, FakeStub

S = types_pb2


def job_proto(job_id, state, **kw):
    return S.Job(id=job_id, state=state, **kw)


class ErrorMappingTest(unittest.TestCase):
    def test_from_rpc_error_every_code_has_its_class(self):
        for code in grpc.StatusCode:
            if code == grpc.StatusCode.OK:
                continue
            with self.subTest(code=code):
                e = errors.from_rpc_error(FakeRpcError(code, "msg"), "h:1")
                self.assertIsInstance(e, trainctl.TrainctlError)
                self.assertEqual(e.code, code)
                self.assertEqual(e.code_name, code.name)
                self.assertIn(type(e).__name__.lower(), code.name.replace("_", "").lower())

    def test_from_rpc_error_keeps_coordinator_message(self):
        e = errors.from_rpc_error(
            FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "spec.priority: must be in "
                         "[-1000, 1000], got 5000"), "h:1")
        self.assertIsInstance(e, trainctl.InvalidArgument)
        self.assertIsInstance(e, ValueError)
        self.assertEqual(str(e), "spec.priority: must be in [-1000, 1000], got 5000")

    def test_from_rpc_error_unavailable_names_address(self):
        e = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.UNAVAILABLE,
                                               "failed to connect"), "head:50051")
        self.assertIsInstance(e, trainctl.Unavailable)
        self.assertIn("cannot reach the coordinator at head:50051", e.message)
        self.assertIn("TRAINCTL_COORDINATOR", e.message)

    def test_from_rpc_error_client_deadline_says_how_long(self):
        e = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                               "Deadline Exceeded"), "h:1", 10)
        self.assertEqual(e.message, "the coordinator at h:1 did not answer within 10 s")

    def test_call_not_found_raises_not_found(self):
        stub = FakeStub().answer("GetJob", FakeRpcError(grpc.StatusCode.NOT_FOUND,
                                                        "job 7 does not exist"))
        with self.assertRaises(trainctl.NotFound) as cm:
            Client._for_stub(stub).job(7)
        self.assertEqual(cm.exception.message, "job 7 does not exist")
        self.assertIsInstance(cm.exception, LookupError)

    def test_call_permission_and_auth_errors(self):
        for code, cls in ((grpc.StatusCode.PERMISSION_DENIED, trainctl.PermissionDenied),
                          (grpc.StatusCode.UNAUTHENTICATED, trainctl.Unauthenticated),
                          (grpc.StatusCode.FAILED_PRECONDITION, trainctl.FailedPrecondition)):
            stub = FakeStub().answer("CancelJob", FakeRpcError(code, "no"))
            with self.subTest(code=code), self.assertRaises(cls):
                Client._for_stub(stub).job(1, read=False).cancel()


class JobTest(unittest.TestCase):
    def setUp(self):
        self.stub = FakeStub()
        self.client = Client._for_stub(self.stub)
        self.job = self.client.job(3, read=False)

    def test_wait_long_polls_until_done_and_returns_state(self):
        # Two long-polls end undone (the job is pending, then running), the
        # third reports it final.
        self.stub.answer("WaitJob",
                         service_pb2.WaitJobResponse(job=job_proto(3, S.JOB_STATE_PENDING)),
                         service_pb2.WaitJobResponse(job=job_proto(3, S.JOB_STATE_RUNNING)),
                         service_pb2.WaitJobResponse(job=job_proto(3, S.JOB_STATE_SUCCEEDED),
                                                     done=True))
        self.assertEqual(self.job.wait(), "succeeded")
        waits = self.stub.requests("WaitJob")
        self.assertEqual(len(waits), 3)
        self.assertEqual(waits[0].timeout_ms, 30000)
        self.assertEqual(self.stub.calls[0][2], 35.0)  # deadline = poll + slack
        self.assertEqual(self.job.state, "succeeded")

    def test_wait_timeout_raises_timeout_error_with_state(self):
        self.stub.answer("WaitJob",
                         service_pb2.WaitJobResponse(job=job_proto(3, S.JOB_STATE_RUNNING)))
        with self.assertRaisesRegex(TimeoutError, "job 3 is still running"):
            self.job.wait(timeout=0)
        self.assertLessEqual(self.stub.requests("WaitJob")[0].timeout_ms, 1)

    def test_wait_failed_and_cancelled_are_lower_case(self):
        for state, name in ((S.JOB_STATE_FAILED, "failed"),
                            (S.JOB_STATE_CANCELLED, "cancelled")):
            stub = FakeStub().answer("WaitJob", service_pb2.WaitJobResponse(
                job=job_proto(3, state), done=True))
            self.assertEqual(Client._for_stub(stub).job(3, read=False).wait(), name)

    def test_logs_reads_until_eof(self):
        self.stub.answer("GetLogs",
                         service_pb2.GetLogsResponse(data=b"hello ", next_offset=6),
                         service_pb2.GetLogsResponse(data=b"w\xc3\xb6rld\n", next_offset=13,
                                                     eof=True))
        self.assertEqual(self.job.logs(rank=1), "hello w\u00f6rld\n")
        offsets = [(r.rank, r.offset) for r in self.stub.requests("GetLogs")]
        self.assertEqual(offsets, [(1, 0), (1, 6)])

    def test_stream_logs_decodes_split_utf8_across_chunks(self):
        chunks = [web_pb2.StreamLogsResponse(data=b"caf\xc3"),
                  web_pb2.StreamLogsResponse(data=b"\xa9\n", eof=True)]

        class Stream:
            def __iter__(self):
                return iter(chunks)

            def cancel(self):
                pass
        self.stub.answer("StreamLogs", lambda request: Stream())
        self.assertEqual("".join(self.job.stream_logs()), "caf\u00e9\n")
        self.assertTrue(self.stub.requests("StreamLogs")[0].follow)

    def test_metrics_is_key_to_step_value_pairs(self):
        series = metrics_pb2.MetricSeries(key="loss", points=[
            metrics_pb2.MetricPoint(key="loss", value=1.0, step=0),
            metrics_pb2.MetricPoint(key="loss", value=0.5, step=10)])
        self.stub.answer("GetMetrics", metrics_pb2.GetMetricsResponse(series=[series]))
        self.assertEqual(self.job.metrics(), {"loss": [(0, 1.0), (10, 0.5)]})
        self.assertFalse(self.stub.requests("GetMetrics")[0].summary_only)

    def test_why_pending_lists_quota_nodes_reservation(self):
        why = sched_pb2.WhyJobResponse(
            job_id=3, state=S.JOB_STATE_PENDING, summary="needs 4 GPUs on one node",
            queue="default", position=2, quota="user alice: quota 8 GPUs",
            nodes=["node-a: 2 of 8 GPUs free, needs 4"], reservation_job_id=1,
            reservation="nodes a and b", reservation_eta_ms=1_000_000 + 125_000)
        text = format_why(why, now_s=1000.0)
        self.assertEqual(text.splitlines(), [
            "Job 3 is pending in queue default (number 2 in the scheduling order).",
            "Why:          needs 4 GPUs on one node",
            "Quota:        user alice: quota 8 GPUs",
            "Reservation:  job 1 holds nodes a and b, estimated start in 2m5s "
            "(1970-01-01 00:18:45 UTC)",
            "Nodes:",
            "  node-a: 2 of 8 GPUs free, needs 4"])

    def test_why_not_pending_is_the_summary(self):
        self.stub.answer("WhyJob", sched_pb2.WhyJobResponse(
            job_id=3, state=S.JOB_STATE_RUNNING, summary="job 3 is not waiting: it is running"))
        self.assertEqual(self.job.why(), "job 3 is not waiting: it is running")

    def test_cancel_updates_state(self):
        self.stub.answer("CancelJob", service_pb2.CancelJobResponse(
            job=job_proto(3, S.JOB_STATE_CANCELLED, reason="cancelled by user")))
        self.assertIs(self.job.cancel(), self.job)
        self.assertEqual((self.job.state, self.job.reason), ("cancelled", "cancelled by user"))

    def test_exit_code_none_until_final_then_first_failing_rank(self):
        # Rank 1 exited with 3 first; the teardown then stopped rank 0 (143).
        tasks = [S.Task(rank=0, exit_code=143, signal=15, end_time_ms=2000),
                 S.Task(rank=1, exit_code=3, end_time_ms=1000),
                 S.Task(rank=2, exit_code=0, end_time_ms=900)]
        self.stub.answer("WaitJob",
                         service_pb2.WaitJobResponse(job=job_proto(3, S.JOB_STATE_RUNNING)),
                         service_pb2.WaitJobResponse(job=job_proto(3, S.JOB_STATE_FAILED,
                                                                   tasks=tasks), done=True))
        self.stub.answer("GetJob", service_pb2.GetJobResponse(
            job=job_proto(3, S.JOB_STATE_RUNNING, tasks=[S.Task(rank=0)])))
        self.assertIsNone(self.job.exit_code)  # read with GetJob: running
        self.assertEqual(self.job.wait(), "failed")
        self.assertEqual(self.job.exit_code, 3)
        self.assertEqual(len(self.stub.requests("GetJob")), 1)  # wait() read it

    def test_stopped_early_tells_asha_from_a_users_cancel(self):
        self.stub.answer("GetJob", service_pb2.GetJobResponse(
            job=job_proto(3, S.JOB_STATE_CANCELLED, stopped_early_at_step=300)))
        self.assertEqual(self.job.stopped_early, 300)
        cancelled = trainctl.Job(self.client, 4, job_proto(4, S.JOB_STATE_CANCELLED))
        self.assertIsNone(cancelled.stopped_early)

    def test_exit_code_zero_when_no_rank_failed(self):
        for state, tasks in ((S.JOB_STATE_SUCCEEDED, [S.Task(rank=0), S.Task(rank=1)]),
                             (S.JOB_STATE_CANCELLED, [])):  # cancelled before it ran
            with self.subTest(state=S.JobState.Name(state)):
                stub = FakeStub().answer("GetJob", service_pb2.GetJobResponse(
                    job=job_proto(3, state, tasks=tasks)))
                self.assertEqual(Client._for_stub(stub).job(3).exit_code, 0)

    def test_exit_code_signal_only_is_128_plus_signal_and_ties_go_to_lower_rank(self):
        stub = FakeStub().answer(
            "GetJob",
            service_pb2.GetJobResponse(job=job_proto(3, S.JOB_STATE_FAILED, tasks=[
                S.Task(rank=1, signal=9, end_time_ms=500),
                S.Task(rank=0, signal=9, end_time_ms=500)])),
            service_pb2.GetJobResponse(job=job_proto(3, S.JOB_STATE_FAILED, tasks=[
                S.Task(rank=1, exit_code=2, end_time_ms=500),
                S.Task(rank=0, exit_code=7, end_time_ms=500)])))
        job = Client._for_stub(stub).job(3)
        self.assertEqual(job.exit_code, 137)  # SIGKILL, as a shell says
        self.assertEqual(job.refresh().exit_code, 7)  # rank 0 of two ending together

    def test_gpu_hours_as_of_the_last_read(self):
        self.stub.answer("GetJob",
                         service_pb2.GetJobResponse(job=job_proto(3, S.JOB_STATE_PENDING)),
                         service_pb2.GetJobResponse(job=job_proto(3, S.JOB_STATE_RUNNING,
                                                                  gpu_hours=0.75)))
        self.assertEqual(self.job.gpu_hours, 0.0)  # never placed
        self.assertEqual(self.job.gpu_hours, 0.0)  # not read again by itself
        self.assertEqual(self.job.refresh().gpu_hours, 0.75)
        self.assertEqual(len(self.stub.requests("GetJob")), 2)

    def test_exit_code_and_gpu_hours_of_an_unknown_job_raise_not_found(self):
        stub = FakeStub().answer("GetJob", FakeRpcError(grpc.StatusCode.NOT_FOUND,
                                                        "job 9 does not exist"))
        job = Client._for_stub(stub).job(9, read=False)
        for attr in ("exit_code", "gpu_hours"):
            with self.subTest(attr=attr), self.assertRaises(trainctl.NotFound):
                getattr(job, attr)


class ListTest(unittest.TestCase):
    def test_jobs_filters_by_state_names(self):
        stub = FakeStub().answer("ListJobs", service_pb2.ListJobsResponse(
            jobs=[job_proto(2, S.JOB_STATE_RUNNING), job_proto(1, S.JOB_STATE_PENDING)]))
        jobs = Client._for_stub(stub).jobs(["running", "PENDING"], limit=5)
        self.assertEqual([(j.id, j.state) for j in jobs], [(2, "running"), (1, "pending")])
        request = stub.requests("ListJobs")[0]
        self.assertEqual(list(request.states), [S.JOB_STATE_RUNNING, S.JOB_STATE_PENDING])
        self.assertEqual(request.limit, 5)
        self.assertEqual(len(stub.calls), 1)  # states came with the list

    def test_jobs_unknown_state_is_invalid(self):
        with self.assertRaisesRegex(trainctl.InvalidArgument, "running"):
            Client._for_stub(FakeStub()).jobs("runing")

    def test_nodes_gpus_and_their_tasks(self):
        node = S.Node(name="n1", state=S.NODE_STATE_READY,
                      gpus=[S.Gpu(index=0, name="H100"), S.Gpu(index=1, name="H100")])
        view = service_pb2.NodeView(node=node, gpu_tasks=[
            service_pb2.GpuTasks(tasks=[service_pb2.GpuTaskRef(job_id=5, rank=0,
                                                               reserved_bytes=10)]),
            service_pb2.GpuTasks()])
        stub = FakeStub().answer("ListNodes", service_pb2.ListNodesResponse(nodes=[view]))
        (n,) = Client._for_stub(stub).nodes()
        self.assertEqual((n.name, n.state), ("n1", "ready"))
        self.assertEqual([g.tasks for g in n.gpus], [[(5, 0, 10)], []])

    def test_drain_sends_reason_and_deadline_and_shows_draining(self):
        node = S.Node(name="n1", state=S.NODE_STATE_READY,
                      admin=S.NodeAdmin(state=S.NODE_ADMIN_STATE_DRAIN, reason="swap PSU",
                                        by="ops", deadline_ms=5000))
        view = service_pb2.NodeView(node=node,
                                    service_state=service_pb2.NODE_SERVICE_STATE_DRAINING)
        stub = FakeStub().answer("UpdateNodes", service_pb2.UpdateNodesResponse(nodes=[view]))
        (n,) = Client._for_stub(stub).drain("n1", "swap PSU", deadline_s=600)
        request = stub.calls[0][1]
        self.assertEqual(list(request.nodes), ["n1"])
        self.assertEqual(request.action, service_pb2.NODE_ACTION_DRAIN)
        self.assertEqual((request.reason, request.deadline_s), ("swap PSU", 600))
        self.assertEqual((n.state, n.reason, n.drained_by, n.drain_deadline_ms),
                         ("draining", "swap PSU", "ops", 5000))

    def test_resume_verify_waits_for_the_verify_job_then_reads_the_nodes(self):
        done = S.Job(id=9, state=S.JOB_STATE_SUCCEEDED)
        node = service_pb2.NodeView(node=S.Node(name="a", state=S.NODE_STATE_READY),
                                    service_state=service_pb2.NODE_SERVICE_STATE_IN_SERVICE)
        stub = (FakeStub()
                .answer("UpdateNodes", service_pb2.UpdateNodesResponse(verify_jobs={"a": 9}))
                .answer("WaitJob", service_pb2.WaitJobResponse(job=done, done=True))
                .answer("ListNodes", service_pb2.ListNodesResponse(nodes=[node])))
        (n,) = Client._for_stub(stub).resume("a", verify=True)
        self.assertEqual((n.name, n.state), ("a", "ready"))
        self.assertEqual([c[0] for c in stub.calls], ["UpdateNodes", "WaitJob", "ListNodes"])
        self.assertTrue(stub.calls[0][1].verify)

    def test_resume_verify_and_down(self):
        stub = FakeStub().answer("UpdateNodes", service_pb2.UpdateNodesResponse())
        client = Client._for_stub(stub)
        client.resume(["a", "b"], verify=True)
        client.down("a", "PSU")
        resume, down = stub.calls[0][1], stub.calls[1][1]
        self.assertEqual((list(resume.nodes), resume.action, resume.verify),
                         (["a", "b"], service_pb2.NODE_ACTION_RESUME, True))
        self.assertEqual((down.action, down.reason), (service_pb2.NODE_ACTION_DOWN, "PSU"))


class SweepClientTest(unittest.TestCase):
    def test_sweep_trials_share_sweep_id_with_request_ids(self):
        ids = iter(range(10, 20))
        stub = FakeStub().answer(
            "SubmitJob", lambda request: service_pb2.SubmitJobResponse(job_id=next(ids)))
        sweep = Client._for_stub(stub).sweep(
            ["python", "t.py", "--lr", "{lr}", "--bs", "{bs}"],
            grid={"lr": ["1e-3", "3e-4"], "bs": [64, 128]}, sweep_id="sw-test",
            gpu_fraction=0.25, early_stop="val_loss:min")
        self.assertEqual(sweep.id, "sw-test")
        self.assertEqual([j.id for j in sweep.jobs], [10, 11, 12, 13])
        requests = stub.requests("SubmitJob")
        self.assertEqual([r.request_id for r in requests],
                         ["sw-test-0", "sw-test-1", "sw-test-2", "sw-test-3"])
        # First grid parameter slowest, as the CLI.
        self.assertEqual([list(r.spec.command[3::2]) for r in requests],
                         [["1e-3", "64"], ["1e-3", "128"], ["3e-4", "64"], ["3e-4", "128"]])
        for i, r in enumerate(requests):
            self.assertEqual(r.spec.sweep_id, "sw-test")
            self.assertEqual(r.spec.name, "sw-test-%d" % i)
            self.assertAlmostEqual(r.spec.gpu_fraction, 0.25)
            self.assertEqual(r.spec.early_stop.metric, "val_loss")
        self.assertEqual(dict(requests[1].spec.params), {"lr": "1e-3", "bs": "128"})

    def test_sweep_unknown_kwarg_and_bad_id(self):
        client = Client._for_stub(FakeStub())
        with self.assertRaisesRegex(TypeError, "'grids' \\(did you mean 'grid'\\?\\)"):
            client.sweep(["x", "{a}"], grids={"a": [1]})
        with self.assertRaisesRegex(trainctl.InvalidArgument, "sweep_id"):
            client.sweep(["x", "{a}"], grid={"a": [1]}, sweep_id="bad id!")

    def test_sweep_cancel_skips_ended_and_just_ended_trials(self):
        # Trial 1 ended before; trial 2 ends between its read and its cancel;
        # trial 3 is cancelled.
        stub = FakeStub()
        stub.answer("GetJob", lambda r: service_pb2.GetJobResponse(job=job_proto(
            r.job_id, S.JOB_STATE_SUCCEEDED if r.job_id == 1 else S.JOB_STATE_RUNNING)))
        stub.answer("CancelJob", lambda r: FakeRpcError(
            grpc.StatusCode.FAILED_PRECONDITION, "already ended") if r.job_id == 2
            else service_pb2.CancelJobResponse(job=job_proto(r.job_id, S.JOB_STATE_CANCELLED)))
        client = Client._for_stub(stub)
        trainctl.Sweep("sw", [client.job(i, read=False) for i in (1, 2, 3)]).cancel()
        self.assertEqual([r.job_id for r in stub.requests("CancelJob")], [2, 3])

    def test_sweep_failed_trial_raises_its_error(self):
        stub = FakeStub().answer("SubmitJob", service_pb2.SubmitJobResponse(job_id=1),
                                 FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "quota"))
        with self.assertRaises(trainctl.ResourceExhausted) as cm:
            Client._for_stub(stub).sweep(["x", "{a}"], grid={"a": [1, 2]}, sweep_id="sw-1")
        self.assertEqual(str(cm.exception),
                         "trial 1 of sweep sw-1: quota; 1 of 2 trials were submitted: call "
                         "sweep() again with sweep_id='sw-1' to submit the rest (submitted "
                         "trials are not submitted twice)")


def metric_summary(last, count=1, key="val_loss"):
    return metrics_pb2.GetMetricsResponse(series=[
        metrics_pb2.MetricSeries(key=key, count=count, last=last)])


class SweepBestTest(unittest.TestCase):
    def setUp(self):
        # Trial 10's last val_loss is 0.4, 11 never reported it, 12's 0.2,
        # 13's 0.9 (its earlier points, lower, do not count).
        self.lasts = {10: metric_summary(0.4), 11: metrics_pb2.GetMetricsResponse(),
                      12: metric_summary(0.2, count=5), 13: metric_summary(0.9, count=3)}
        self.stub = FakeStub().answer("GetMetrics", lambda r: self.lasts[r.job_id])
        client = Client._for_stub(self.stub)
        self.sweep = trainctl.Sweep("sw", [client.job(i, read=False) for i in (10, 11, 12, 13)])

    def test_best_min_and_max_by_last_value(self):
        self.assertEqual(self.sweep.best("val_loss").id, 12)
        self.assertEqual(self.sweep.best("val_loss", mode="max").id, 13)
        requests = self.stub.requests("GetMetrics")
        self.assertEqual([r.job_id for r in requests], [10, 11, 12, 13] * 2)
        self.assertTrue(all(r.key == "val_loss" and r.summary_only for r in requests))

    def test_best_tie_goes_to_the_earlier_trial(self):
        self.lasts[13] = metric_summary(0.2)
        self.assertEqual(self.sweep.best("val_loss").id, 12)

    def test_best_none_when_no_trial_reported_the_metric(self):
        self.lasts = {i: metrics_pb2.GetMetricsResponse() for i in (10, 11, 12, 13)}
        self.assertIsNone(self.sweep.best("val_loss"))

    def test_best_bad_mode_or_metric_refused_before_any_call(self):
        with self.assertRaisesRegex(trainctl.InvalidArgument, "mode='lowest'"):
            self.sweep.best("val_loss", mode="lowest")
        for metric in ("", "val loss"):
            with self.subTest(metric=metric), self.assertRaises(ValueError):
                self.sweep.best(metric)
        self.assertEqual(self.stub.calls, [])

    def test_best_coordinator_error_reaches_the_caller(self):
        self.lasts[12] = FakeRpcError(grpc.StatusCode.PERMISSION_DENIED, "job 12 is bob's")
        with self.assertRaisesRegex(trainctl.PermissionDenied, "job 12 is bob's"):
            self.sweep.best("val_loss")


class JobArrayClientTest(unittest.TestCase):
    def test_submit_array_one_call_with_the_spec_once_and_the_task_ids(self):
        stub = FakeStub().answer("SubmitJobArray",
                                 service_pb2.SubmitJobsResponse(job_ids=[40, 41, 42]))
        array = Client._for_stub(stub).submit_array(
            ["python", "eval.py"], range(0, 6, 2), max_running=2, gpus=1, name="eval",
            env={"SHARD_DIR": "/data"}, request_id="r-1")
        (request,) = stub.requests("SubmitJobArray")
        self.assertEqual(list(request.task_ids), [0, 2, 4])
        self.assertEqual(request.max_running, 2)
        self.assertEqual(request.request_id, "r-1")
        self.assertEqual(list(request.spec.command), ["python", "eval.py"])
        self.assertEqual((request.spec.name, request.spec.gpus), ("eval", 1))
        self.assertEqual(dict(request.spec.env), {"SHARD_DIR": "/data"})
        self.assertFalse(request.spec.HasField("array"))
        self.assertEqual(array.id, 40)
        self.assertEqual([j.id for j in array.jobs], [40, 41, 42])
        self.assertEqual(repr(array), "JobArray(id=40, tasks=3)")

    def test_submit_array_bad_task_ids_and_keywords_refused_before_any_call(self):
        stub = FakeStub()
        client = Client._for_stub(stub)
        with self.assertRaisesRegex(trainctl.InvalidArgument, r"task_ids\[1\]='2': expected an int"):
            client.submit_array(["x"], [1, "2"])
        with self.assertRaisesRegex(trainctl.InvalidArgument, "max_running=-1"):
            client.submit_array(["x"], range(3), max_running=-1)
        with self.assertRaisesRegex(TypeError, "'max_runing'"):
            client.submit_array(["x"], range(3), max_runing=2)
        self.assertEqual(stub.calls, [])

    def test_submit_array_coordinator_message_reaches_the_caller(self):
        stub = FakeStub().answer("SubmitJobArray", FakeRpcError(
            grpc.StatusCode.INVALID_ARGUMENT, "task_ids[2]: 3 appears twice"))
        with self.assertRaisesRegex(trainctl.InvalidArgument, r"task_ids\[2\]: 3 appears twice"):
            Client._for_stub(stub).submit_array(["x"], [1, 2, 3, 3])


if __name__ == "__main__":
    unittest.main()
