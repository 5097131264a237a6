"""trainctl.jax: the arguments for jax.distributed.initialize from the launch
contract, and initialize() calling a stand-in jax (JAX is not installed
here)."""

import sys
import types
import unittest
from unittest import mock

import trainctl.jax

GANG = {"WORLD_SIZE": "2", "RANK": "1", "JAX_COORDINATOR_ADDRESS": "10.0.0.5:29601",
        "JAX_LOCAL_DEVICE_IDS": "1"}


class InitializeArgsTest(unittest.TestCase):
    def test_gang_rank_gets_count_id_address_and_devices(self):
        self.assertEqual(trainctl.jax.initialize_args(GANG), {
            "coordinator_address": "10.0.0.5:29601", "num_processes": 2,
            "process_id": 1, "local_device_ids": [1]})

    def test_all_gpus_of_a_node(self):
        env = dict(GANG, JAX_LOCAL_DEVICE_IDS="0,1,2,3")
        self.assertEqual(trainctl.jax.initialize_args(env)["local_device_ids"], [0, 1, 2, 3])

    def test_no_device_ids_leaves_them_to_jax(self):
        env = {k: v for k, v in GANG.items() if k != "JAX_LOCAL_DEVICE_IDS"}
        self.assertNotIn("local_device_ids", trainctl.jax.initialize_args(env))

    def test_one_process_needs_nothing(self):
        self.assertIsNone(trainctl.jax.initialize_args({"WORLD_SIZE": "1", "RANK": "0"}))

    def test_bad_input_names_the_variable(self):
        cases = {
            "WORLD_SIZE": {"RANK": "0"},
            "RANK=": dict(GANG, RANK="one"),
            "RANK=2": dict(GANG, RANK="2"),
            "JAX_COORDINATOR_ADDRESS": {k: v for k, v in GANG.items()
                                        if k != "JAX_COORDINATOR_ADDRESS"},
            "JAX_COORDINATOR_ADDRESS='host'": dict(GANG, JAX_COORDINATOR_ADDRESS="host"),
            "JAX_LOCAL_DEVICE_IDS": dict(GANG, JAX_LOCAL_DEVICE_IDS="0,x"),
        }
        for needle, env in cases.items():
            with self.subTest(needle):
                with self.assertRaises(ValueError) as e:
                    trainctl.jax.initialize_args(env)
                self.assertIn(needle, str(e.exception))


class InitializeTest(unittest.TestCase):
    def test_calls_jax_distributed_initialize_with_overrides(self):
        calls = []
        fake = types.ModuleType("jax")
        fake.distributed = types.SimpleNamespace(initialize=lambda **kw: calls.append(kw))
        with mock.patch.dict(sys.modules, {"jax": fake}), \
                mock.patch.dict("os.environ", GANG, clear=True):
            self.assertTrue(trainctl.jax.initialize(initialization_timeout=60))
        self.assertEqual(calls, [{"coordinator_address": "10.0.0.5:29601",
                                  "num_processes": 2, "process_id": 1,
                                  "local_device_ids": [1], "initialization_timeout": 60}])

    def test_one_process_does_not_import_jax(self):
        with mock.patch.dict(sys.modules, {"jax": None}), \
                mock.patch.dict("os.environ", {"WORLD_SIZE": "1", "RANK": "0"}, clear=True):
            self.assertFalse(trainctl.jax.initialize())


if __name__ == "__main__":
    unittest.main()
