"""Client.submit arguments -> JobSpec, and byte sizes / durations (no
network: a fake stub records the SubmitJob request)."""

import datetime
import os
import pwd
import unittest
from unittest import mock

import trainctl
from trainctl.client import Client
from trainctl.errors import InvalidArgument
from trainctl.units import parse_byte_size, parse_duration_s
from trainctl.v1 import preflight_pb2, service_pb2, types_pb2

from fakes import FakeStub

GiB = 1024 ** 3


class SubmitSpecTest(unittest.TestCase):
    def setUp(self):
        self.stub = FakeStub().answer("SubmitJob", service_pb2.SubmitJobResponse(job_id=42))
        self.client = Client._for_stub(self.stub)

    def submit(self, command=("python", "train.py"), **kw):
        job = self.client.submit(list(command), **kw)
        self.assertEqual(job.id, 42)
        (request,) = self.stub.requests("SubmitJob")
        return request

    def test_submit_no_shape_sends_empty_shape(self):
        # The coordinator reads gpus 0 with no other shape as one GPU.
        spec = self.submit().spec
        self.assertEqual(list(spec.command), ["python", "train.py"])
        self.assertEqual((spec.gpus, spec.gpu_fraction, spec.gpu_memory_bytes, spec.nodes),
                         (0, 0.0, 0, 0))

    def test_submit_workdir_default_is_cwd_absolute(self):
        self.assertEqual(self.submit().spec.workdir, os.getcwd())
        self.stub.calls.clear()
        self.assertEqual(self.submit(workdir="a/../b").spec.workdir,
                         os.path.join(os.getcwd(), "b"))

    def test_submit_gpu_mem_string_is_bytes_power_of_1024(self):
        self.assertEqual(self.submit(gpu_mem="20GiB").spec.gpu_memory_bytes, 20 * GiB)

    def test_submit_gpu_mem_int_is_bytes(self):
        self.assertEqual(self.submit(gpu_mem=12345).spec.gpu_memory_bytes, 12345)

    def test_submit_gang_nodes_by_gpus_per_node(self):
        spec = self.submit(nodes=2, gpus_per_node=4, tasks_per_node=1, placement="spread",
                           preflight=False).spec
        self.assertEqual((spec.nodes, spec.gpus_per_node, spec.tasks_per_node), (2, 4, 1))
        self.assertEqual(spec.placement, types_pb2.GANG_PLACEMENT_SPREAD)
        self.assertEqual(spec.preflight, preflight_pb2.PREFLIGHT_MODE_OFF)

    def test_submit_node_selection_reaches_its_fields(self):
        spec = self.submit(nodes=2, gpus_per_node=4, gpu_types=["h100", "a100"],
                           constraint="ib&nvlink", nodelist="n1, n2", exclude=["n3"],
                           allow_mixed_gpu_types=True).spec
        self.assertEqual(list(spec.gpu_types), ["h100", "a100"])
        self.assertEqual(spec.constraint, "ib&nvlink")
        self.assertEqual(list(spec.nodelist), ["n1", "n2"])
        self.assertEqual(list(spec.exclude_nodes), ["n3"])
        self.assertTrue(spec.allow_mixed_gpu_types)
        self.stub.calls.clear()
        self.assertEqual(list(self.submit(gpu_types="h100").spec.gpu_types), ["h100"])

    def test_submit_dependencies_build_slurms_string(self):
        from trainctl.client import Job
        prep = Job(self.client, 12)
        spec = self.submit(after_ok=[prep, 13], after_any=14, after_not_ok=15, after=16,
                           singleton=True).spec
        self.assertEqual(spec.dependency,
                         "afterok:12:13,afterany:14,afternotok:15,after:16,singleton")
        self.stub.calls.clear()
        spec = self.submit(dependency="afterok:12?afterany:14").spec
        self.assertEqual(spec.dependency, "afterok:12?afterany:14")
        with self.assertRaises(InvalidArgument):
            self.client.submit(["x"], dependency="afterok:1", after_ok=[2])
        with self.assertRaises(TypeError):
            self.client.submit(["x"], after_ok=["12"])
        with self.assertRaises(InvalidArgument):
            self.client.submit(["x"], after_ok=[0])

    def test_submit_node_selection_wrong_types_raise_type_error(self):
        with self.assertRaises(TypeError):
            self.client.submit(["x"], gpu_types=7)
        with self.assertRaises(TypeError):
            self.client.submit(["x"], nodelist=["a", 3])

    def test_submit_every_option_reaches_its_field(self):
        request = self.submit(gpus=8, env={"LR": 3e-4, "MODE": "fast"}, name="run",
                              priority=5, max_restarts=2, queue="prod", time_limit="1h30m",
                              preemptible=True, user="alice", project="vision",
                              request_id="req-1", hold=True, no_logs=True, slurm_env=True)
        spec = request.spec
        self.assertEqual(request.request_id, "req-1")
        self.assertEqual(spec.gpus, 8)
        self.assertEqual(dict(spec.env), {"LR": "0.0003", "MODE": "fast"})
        self.assertEqual((spec.name, spec.priority, spec.max_restarts, spec.queue),
                         ("run", 5, 2, "prod"))
        self.assertEqual(spec.time_limit_ms, 90 * 60 * 1000)
        self.assertTrue(spec.preemptible)
        self.assertTrue(spec.hold)
        self.assertTrue(spec.discard_output)
        self.assertTrue(spec.slurm_env)
        self.assertEqual((spec.user, spec.project), ("alice", "vision"))

    def test_submit_fraction_and_auto_pack(self):
        self.assertAlmostEqual(self.submit(gpu_fraction=0.25).spec.gpu_fraction, 0.25)
        self.stub.calls.clear()
        spec = self.submit(gpu_mem="10G", auto_pack=True).spec
        self.assertTrue(spec.auto_pack)
        self.assertEqual(spec.gpu_memory_bytes, 10 * GiB)

    def test_submit_time_limit_timedelta_and_seconds(self):
        self.assertEqual(self.submit(time_limit=datetime.timedelta(minutes=2))
                         .spec.time_limit_ms, 120000)
        self.stub.calls.clear()
        self.assertEqual(self.submit(time_limit=1.5).spec.time_limit_ms, 1500)

    def test_submit_user_without_token_is_the_local_account(self):
        # The password database's name of this process's uid, not $USER
        # (which any shell may set): never an empty user.
        with mock.patch.dict(os.environ, {"USER": "somebody-else"}):
            self.assertEqual(self.submit().spec.user, pwd.getpwuid(os.geteuid()).pw_name)

    def test_submit_user_with_token_is_left_to_coordinator(self):
        # With a token the coordinator sets spec.user from it; naming $USER
        # would be PERMISSION_DENIED when they differ.
        client = Client._for_stub(self.stub, token="t" * 16)
        with mock.patch.dict(os.environ, {"USER": "bob"}):
            client.submit(["true"])
        (request,) = self.stub.requests("SubmitJob")
        self.assertEqual(request.spec.user, "")
        (_, _, timeout, metadata) = self.stub.calls[0]
        self.assertEqual(metadata, (("authorization", "Bearer " + "t" * 16),))
        self.assertEqual(timeout, 10.0)

    def test_submit_unknown_kwargs_type_error_names_all(self):
        with self.assertRaises(TypeError) as cm:
            self.client.submit(["x"], gpu=1, colour="red")
        message = str(cm.exception)
        self.assertIn("'gpu' (did you mean 'gpus'?)", message)
        self.assertIn("'colour'", message)
        self.assertIn("request_id", message)  # listed among the accepted ones
        self.assertEqual(self.stub.calls, [])

    def test_submit_command_str_is_type_error(self):
        with self.assertRaisesRegex(TypeError, "shlex.split"):
            self.client.submit("python train.py")

    def test_submit_empty_command_is_invalid(self):
        with self.assertRaisesRegex(trainctl.InvalidArgument, "command is empty"):
            self.client.submit([])

    def test_submit_two_shapes_is_invalid_naming_both(self):
        for kw in ({"gpus": 2, "gpu_fraction": 0.5}, {"gpus": 1, "gpu_mem": "1G"},
                   {"gpu_fraction": 0.5, "gpu_mem": "1G"},
                   {"nodes": 2, "gpus_per_node": 2, "gpus": 4}):
            with self.subTest(kw=kw):
                with self.assertRaises(trainctl.InvalidArgument) as cm:
                    self.client.submit(["x"], **kw)
                for name in kw:
                    if name != "gpus_per_node":
                        self.assertIn(name, str(cm.exception))

    def test_submit_nodes_without_gpus_per_node_is_invalid(self):
        with self.assertRaisesRegex(trainctl.InvalidArgument, "go together"):
            self.client.submit(["x"], nodes=2)
        with self.assertRaisesRegex(trainctl.InvalidArgument, "go together"):
            self.client.submit(["x"], gpus_per_node=2)

    def test_submit_bad_values_are_invalid(self):
        for kw, pattern in (({"gpus": 0}, "gpus=0"), ({"gpu_fraction": 1.5}, r"\(0, 1\]"),
                            ({"gpu_fraction": 0}, r"\(0, 1\]"), ({"gpu_mem": "-1G"}, "negative"),
                            ({"gpu_mem": "10 parsecs"}, "unknown unit"),
                            ({"env": {"1BAD": "x"}}, "variable name"),
                            ({"placement": "diagonal"}, "pack"),
                            ({"time_limit": "soon"}, "time_limit"),
                            ({"max_restarts": -1}, "max_restarts")):
            with self.subTest(kw=kw):
                with self.assertRaisesRegex(trainctl.InvalidArgument, pattern):
                    self.client.submit(["x"], **kw)
        self.assertEqual(self.stub.calls, [])

    def test_submit_invalid_argument_is_a_value_error(self):
        with self.assertRaises(ValueError):
            self.client.submit(["x"], gpus=0)

    def test_submit_wrong_types_are_type_errors(self):
        for kw in ({"gpus": 1.0}, {"gpus": True}, {"preemptible": "yes"},
                   {"gpu_mem": 1.5}, {"gpu_fraction": "half"}):
            with self.subTest(kw=kw):
                with self.assertRaises(TypeError):
                    self.client.submit(["x"], **kw)


class ByteSizeTest(unittest.TestCase):
    # The cases of common/units_test.cc's ParseByteSize, where they apply.
    def test_parse_byte_size_accepted_forms(self):
        for text, want in (("1024", 1024), ("0", 0), ("512MiB", 512 * 1024 ** 2),
                           ("10GiB", 10 * GiB), ("10gib", 10 * GiB), ("80G", 80 * GiB),
                           ("80GB", 80 * GiB), ("1.5TiB", 1536 * GiB), (" 4 KiB ", 4096),
                           ("7B", 7), ("1.1GiB", int(1.1 * GiB)), ("1.0B", 1)):
            with self.subTest(text=text):
                self.assertEqual(parse_byte_size(text), want)

    def test_parse_byte_size_bad_forms_name_the_text(self):
        for text, why in (("", "empty"), ("-1G", "negative"), ("G", "start with a number"),
                          ("1.G", "no digits after"), ("1.5", "whole number of bytes"),
                          ("1X", 'unknown unit "X"'), ("9999999PiB", "64 bits")):
            with self.subTest(text=text):
                with self.assertRaises(trainctl.InvalidArgument) as cm:
                    parse_byte_size(text)
                self.assertIn(why, str(cm.exception))
                self.assertIn('"%s"' % text, str(cm.exception))

    def test_parse_duration_forms(self):
        self.assertEqual(parse_duration_s("1h30m", "t"), 5400)
        self.assertEqual(parse_duration_s("250ms", "t"), 0.25)
        self.assertEqual(parse_duration_s(datetime.timedelta(seconds=3), "t"), 3)
        with self.assertRaises(trainctl.InvalidArgument):
            parse_duration_s("30", "t")  # a str needs a unit
        with self.assertRaises(trainctl.InvalidArgument):
            parse_duration_s(-1, "t")


if __name__ == "__main__":
    unittest.main()
